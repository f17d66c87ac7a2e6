"""The torch and JAX tests say loudly when they did not run: a module skipped with its
reason, or, under ZRECORD_REQUIRE_INTEROP=1 (as `make test` runs them), an error."""

import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


TARGETS = ["test_torch_feed.py", "test_torchrun.py", "test_jax_feed.py", "test_readme_training.py"]


def pytest_without_torch_and_jax(tmp_path, require):
    """Runs pytest on every torch and JAX test module in a child where `import torch` and
    `import jax` fail."""
    shadow = tmp_path / "shadow"
    shadow.mkdir(exist_ok=True)
    for module in ("torch", "jax"):
        (shadow / f"{module}.py").write_text("raise ImportError('hidden for this test')\n")
    env = {k: v for k, v in os.environ.items() if k not in ("ZRECORD_REQUIRE_INTEROP", "ZRECORD_SKIP_LOG", "ZRECORD_NO_ML")}
    env["PYTHONPATH"] = os.pathsep.join([str(shadow), env.get("PYTHONPATH", "")])
    if require:
        env["ZRECORD_REQUIRE_INTEROP"] = "1"
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", *(str(HERE / t) for t in TARGETS)],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300,
    )


def test_missing_torch_or_jax_skips_visibly_or_fails_when_required(tmp_path):
    p = pytest_without_torch_and_jax(tmp_path, require=False)
    # 5: pytest's "no tests ran", as modules skipped whole end.
    assert p.returncode in (0, 5), p.stdout + p.stderr
    assert f"{len(TARGETS)} skipped" in p.stdout and "passed" not in p.stdout, p.stdout
    assert "feeding not tested: torch cannot be imported" in p.stdout, p.stdout
    p = pytest_without_torch_and_jax(tmp_path, require=True)
    assert p.returncode != 0, p.stdout
    assert f"{len(TARGETS)} errors" in p.stdout and "ZRECORD_REQUIRE_INTEROP=1" in p.stdout, p.stdout
