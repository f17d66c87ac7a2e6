"""The torch and JAX tests say loudly when they did not run: a module skipped with its
reason, or, under ZRECORD_REQUIRE_INTEROP=1 (as `make test` runs them), an error."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def pytest_without(tmp_path, module, target, require):
    """Runs pytest on `target` in a child where `import <module>` fails."""
    shadow = tmp_path / f"shadow-{module}"
    shadow.mkdir(exist_ok=True)
    (shadow / f"{module}.py").write_text("raise ImportError('hidden for this test')\n")
    env = {k: v for k, v in os.environ.items() if k not in ("ZRECORD_REQUIRE_INTEROP", "ZRECORD_SKIP_LOG")}
    env["PYTHONPATH"] = os.pathsep.join([str(shadow), env.get("PYTHONPATH", "")])
    if require:
        env["ZRECORD_REQUIRE_INTEROP"] = "1"
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", str(target)],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300,
    )


@pytest.mark.parametrize(
    "module, target",
    [("torch", "test_torch_feed.py"), ("torch", "test_torchrun.py"), ("torch", "test_readme_training.py"),
     ("jax", "test_jax_feed.py")],
)
def test_missing_torch_or_jax_skips_visibly_or_fails_when_required(tmp_path, module, target):
    p = pytest_without(tmp_path, module, HERE / target, require=False)
    # 5: pytest's "no tests ran", as a module skipped whole ends.
    assert p.returncode in (0, 5), p.stdout + p.stderr
    assert "skipped" in p.stdout and "feeding not tested" in p.stdout and "passed" not in p.stdout, p.stdout
    p = pytest_without(tmp_path, module, HERE / target, require=True)
    assert p.returncode != 0, p.stdout
    assert "error" in p.stdout and "ZRECORD_REQUIRE_INTEROP=1" in p.stdout, p.stdout
