"""The README's "Training on many processes" example (torch) and docs/training.md's "JAX"
example run as printed, on the stores the README's Python quick start writes (run as
printed first): each python block is saved under the name on its first line, and each sh
block runs in bash, with this venv's `python` and `torchrun` first on PATH (the JAX lines
on a free port instead of the printed one, so that parallel runs do not collide). Each
block trains one epoch and then resumes the next on another number of processes from the
state it saved."""

import json
import os
import re
import sys
from pathlib import Path

import pytest

from _ml import child_env, free_port, need, run
from _support import REPO

need("torch")
need("jax")

import zrecord  # noqa: E402

TITLE = "## Training on many processes"
JAX = ("docs/training.md", "## JAX")
PRINTED_PORT = "8476"


def section(title: str = TITLE, doc: str = "README.md") -> str:
    text = (REPO / doc).read_text()
    parts = text.split(title + "\n", 1)
    assert len(parts) == 2, f"{doc} has no '{title}' section"
    return parts[1].split("\n## ", 1)[0]


def blocks(lang: str, title: str = TITLE, doc: str = "README.md") -> list:
    return re.findall(rf"```{lang}\n(.*?)```", section(title, doc), re.S)


@pytest.fixture
def workdir(tmp_path):
    """The quick start's stores, written by the quick start as printed, and the section's
    scripts under their names."""
    quick_start = blocks("python", "## Python")[0]
    p = run([sys.executable, "-c", quick_start], 400, env=child_env(), cwd=tmp_path)
    assert p.returncode == 0, p.stdout
    assert p.stdout.strip() == "(256, 3, 16, 16) (256,)", p.stdout
    scripts = blocks("python") + blocks("python", JAX[1], JAX[0])
    assert len(scripts) == 2, "expected the torch example in the README and the JAX one in docs/training.md"
    for code in scripts:
        name = re.fullmatch(r"# (\w+\.py)", code.splitlines()[0])
        assert name, f"a python block must start with '# file.py', not {code.splitlines()[0]!r}"
        (tmp_path / name[1]).write_text(code)
    return tmp_path


def shell(command: str, cwd: Path):
    env = child_env(PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]))
    return run(["bash", "-c", command], 400, env=env, cwd=cwd)


def assert_saved_after(workdir, steps):
    """The saved state is the position after `steps` global batches of 128 (torch) or 64
    (JAX), which one process reading those global batches reaches too: rank and world size
    are not in it."""
    saved = json.loads((workdir / "data_state.json").read_text())
    global_batch = saved["global_batch"]
    loader = zrecord.DataLoader(
        zrecord.Dataset(workdir / "train_data.zr"), zrecord.Dataset(workdir / "train_label.zr"),
        batch_size=global_batch, mode=zrecord.Sampler.Mode.SHUFFLE, seed=0, rank=0, world_size=1,
    )
    with loader:
        for _ in range(steps):
            next(loader)
        assert saved == loader.state_dict()


def test_torchrun_example(workdir):
    [command] = [b for b in blocks("sh") if "torchrun" in b]
    p = shell(command, workdir)
    assert p.returncode == 0, p.stdout
    assert "epoch 0: 7 steps of 128 samples on 4 ranks" in p.stdout, p.stdout
    assert "epoch 1: 7 steps of 128 samples on 2 ranks" in p.stdout, p.stdout
    assert_saved_after(workdir, 14)
    assert not list(workdir.glob("data_state.json.tmp*")), "the atomic save left its temporary file"


def test_jax_example(workdir):
    [command] = [b for b in blocks("sh", JAX[1], JAX[0]) if "train_jax.py" in b]
    assert command.count(PRINTED_PORT) == 3
    p = shell(command.replace(PRINTED_PORT, str(free_port())), workdir)
    assert p.returncode == 0, p.stdout
    assert "epoch 0: 15 steps of 64 samples on 2 process(es)" in p.stdout, p.stdout
    assert "epoch 1: 15 steps of 64 samples on 1 process(es)" in p.stdout, p.stdout
    assert_saved_after(workdir, 30)
