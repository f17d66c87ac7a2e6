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


# -- disk: a test that writes gigabytes fails here, not on a smaller CI disk -------------

#: Bytes a test may leave allocated in its tmp_path. Stores are sparse (a 4 GiB chunk file
#: of holes costs nothing); a copy that fills the holes costs gigabytes per test and once
#: filled the CI machine's disk. Override with ZRECORD_TEST_DISK_LIMIT (bytes).
DISK_LIMIT = int(os.environ.get("ZRECORD_TEST_DISK_LIMIT", 1 << 30))


def _allocated(root):
    """Bytes allocated on disk under `root` (holes not counted, symlinks not followed)."""
    total = 0
    for folder, _dirs, files in os.walk(root):
        for name in files:
            try:
                total += os.lstat(os.path.join(folder, name)).st_blocks * 512
            except FileNotFoundError:
                pass
    return total


@pytest.fixture(autouse=True)
def _disk_use_is_bounded(request):
    # Taken before the test: after it, tmp_path may already be torn down.
    path = request.getfixturevalue("tmp_path") if "tmp_path" in request.fixturenames else None
    yield
    if path is None:
        return
    used = _allocated(path)
    if used > DISK_LIMIT:
        pytest.fail(
            f"the test left {used / 2**20:.0f} MiB allocated in its tmp_path (limit "
            f"{DISK_LIMIT / 2**20:.0f} MiB): a sparse file copied densely?",
            pytrace=False,
        )
