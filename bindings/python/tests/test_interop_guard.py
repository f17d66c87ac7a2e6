"""The interop tests say loudly when they did not run: skipped with a reason, or, under
ZRECORD_REQUIRE_INTEROP=1 (as `make test` runs them), an error."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
CLI_TESTS = HERE.parents[2] / "tests" / "python"


def pytest_without_loaderx(tmp_path, target, require):
    """Runs pytest on `target` in a child where `import loaderx` fails."""
    shadow = tmp_path / "shadow"
    shadow.mkdir(exist_ok=True)
    (shadow / "loaderx.py").write_text("raise ImportError('hidden for this test')\n")
    # The child's skips are the point of the test, not tests that did not run: keep them out
    # of make test's skip log.
    env = {k: v for k, v in os.environ.items() if k not in ("ZRECORD_REQUIRE_INTEROP", "ZRECORD_SKIP_LOG")}
    env["PYTHONPATH"] = os.pathsep.join([str(shadow), env.get("PYTHONPATH", "")])
    if require:
        env["ZRECORD_REQUIRE_INTEROP"] = "1"
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", str(target)],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300,
    )


@pytest.mark.parametrize(
    "target",
    [HERE / "test_interop.py::test_schema_files_identical", CLI_TESTS / "test_cli_interop.py::test_scalar_labels_round_trip"],
    ids=["bindings", "cli"],
)
def test_missing_loaderx_skips_visibly_or_fails_when_required(tmp_path, target):
    p = pytest_without_loaderx(tmp_path, target, require=False)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "1 skipped" in p.stdout and "interop not tested" in p.stdout, p.stdout
    p = pytest_without_loaderx(tmp_path, target, require=True)
    assert p.returncode != 0, p.stdout
    assert "1 error" in p.stdout and "ZRECORD_REQUIRE_INTEROP=1" in p.stdout, p.stdout


def test_golden_tests_need_no_loaderx(tmp_path):
    p = pytest_without_loaderx(tmp_path, HERE / "test_golden.py", require=True)
    assert p.returncode == 0 and "skipped" not in p.stdout, p.stdout + p.stderr
