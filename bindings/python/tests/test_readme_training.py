"""The README's "Training on many processes" examples run as printed: each python block is
saved under the name on its first line, and each sh block runs in bash, with this venv's
`python` and `torchrun` first on PATH (the JAX line on a free port instead of the printed
one, so that parallel runs do not collide)."""

import json
import os
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from _ml import child_env, free_port, need, run
from _support import REPO

need("torch")
need("jax")

import zrecord  # noqa: E402

TITLE = "## Training on many processes"
PRINTED_PORT = "8476"


def section() -> str:
    readme = (REPO / "README.md").read_text()
    parts = readme.split(TITLE + "\n", 1)
    assert len(parts) == 2, f"README.md has no '{TITLE}' section"
    return parts[1].split("\n## ", 1)[0]


def blocks(lang: str) -> list:
    return re.findall(rf"```{lang}\n(.*?)```", section(), re.S)


@pytest.fixture
def workdir(tmp_path):
    """The quick start's stores, and the section's scripts under their names."""
    rng = np.random.default_rng(0)
    zrecord.Dataset.write(tmp_path / "train_data.zr", rng.integers(0, 255, (1000, 3, 16, 16), dtype=np.uint8)).close()
    zrecord.Dataset.write(tmp_path / "train_label.zr", np.arange(1000, dtype=np.int64)).close()
    scripts = blocks("python")
    assert len(scripts) == 2, "expected the torch and the JAX example"
    for code in scripts:
        name = re.fullmatch(r"# (\w+\.py)", code.splitlines()[0])
        assert name, f"a python block must start with '# file.py', not {code.splitlines()[0]!r}"
        (tmp_path / name[1]).write_text(code)
    return tmp_path


def shell(command: str, cwd: Path):
    env = child_env(PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]))
    return run(["bash", "-c", command], 400, env=env, cwd=cwd)


def test_torchrun_example(workdir):
    [command] = [b for b in blocks("sh") if "torchrun" in b]
    p = shell(command, workdir)
    assert p.returncode == 0, p.stdout
    assert "4 ranks: 7 steps of 128 samples" in p.stdout, p.stdout
    # The saved state is the position after the epoch's seven global batches of 128, which
    # one process reading global batches of 128 reaches too (rank and world size are not in it).
    saved = json.loads((workdir / "data_state.json").read_text())
    loader = zrecord.DataLoader(
        zrecord.Dataset(workdir / "train_data.zr"), zrecord.Dataset(workdir / "train_label.zr"),
        batch_size=128, mode=zrecord.Sampler.Mode.SHUFFLE, seed=0, rank=0, world_size=1,
    )
    with loader:
        for _ in range(7):
            next(loader)
        assert saved == loader.state_dict()


def test_jax_example(workdir):
    [command] = [b for b in blocks("sh") if "train_jax.py" in b]
    assert command.count(PRINTED_PORT) == 2
    p = shell(command.replace(PRINTED_PORT, str(free_port())), workdir)
    assert p.returncode == 0, p.stdout
    assert "2 processes: 15 steps of 64 samples" in p.stdout, p.stdout
