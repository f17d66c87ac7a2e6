"""Shared by every pytest run in the repository: a test that could not run is written to
the file named by ZRECORD_SKIP_LOG (set by `make test`), whose final summary lists them, so
a skip never looks like a pass."""

import os


def pytest_runtest_logreport(report):
    log = os.environ.get("ZRECORD_SKIP_LOG")
    if not log or not report.skipped or hasattr(report, "wasxfail"):
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    with open(log, "a", encoding="utf-8") as f:
        f.write(f"{report.nodeid}: {reason}\n")
