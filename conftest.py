"""Shared by every pytest run in the repository: a test that could not run is written to
the file named by ZRECORD_SKIP_LOG (set by `make test`), whose final summary lists them, so
a skip never looks like a pass."""

import os

import pytest


def pytest_runtest_logreport(report):
    log = os.environ.get("ZRECORD_SKIP_LOG")
    if not log or not report.skipped or hasattr(report, "wasxfail"):
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    with open(log, "a", encoding="utf-8") as f:
        f.write(f"{report.nodeid}: {reason}\n")


# -- loaderx, the reference wheel: one fixture for every test folder ---------------------

#: Set by `make test`: interop tests must run there, so a missing loaderx is a failure.
REQUIRE_INTEROP = "ZRECORD_REQUIRE_INTEROP"


@pytest.fixture(scope="session")
def loaderx():
    """The reference wheel, loaderx 0.5.4. Without it the test is skipped, with the reason in
    the summary (`pytest -rs`), unless ZRECORD_REQUIRE_INTEROP=1, where it is an error."""
    try:
        import loaderx as module
    except ImportError as e:
        why = f"loaderx 0.5.4 cannot be imported ({e}); `pip install loaderx==0.5.4` (make setup-python does)"
        if os.environ.get(REQUIRE_INTEROP) == "1":
            pytest.fail(f"{REQUIRE_INTEROP}=1 but {why}", pytrace=False)
        pytest.skip(f"interop not tested: {why}")
    return module
