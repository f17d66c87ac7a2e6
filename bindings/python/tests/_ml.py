"""Helpers for the tests that feed torch and JAX and run many processes (`from _ml import ...`).

torch and JAX come from tests/requirements-ml.txt (`make setup-python` installs it). Without
them a test module is skipped, with the reason in the summary, unless
ZRECORD_REQUIRE_INTEROP=1 (as `make test` runs pytest), where it is a collection error: a
missing torch must never look like a passed multi-process test.
"""

import importlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
REQUIRE = "ZRECORD_REQUIRE_INTEROP"

#: Variables a launcher sets; a child that must find its rank by itself starts without them.
LAUNCH_VARS = (
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR",
    "MASTER_PORT", "TORCHELASTIC_RUN_ID", "JAX_COORDINATOR_ADDRESS",
)


def need(name: str):
    """Imports `name` (torch, jax) or skips the calling module loudly, or fails it under
    ZRECORD_REQUIRE_INTEROP=1. Call at module level. Under ZRECORD_NO_ML=1 (`make test-py`,
    the quick loop) the module is skipped even where torch and JAX are installed."""
    if os.environ.get("ZRECORD_NO_ML") == "1":
        pytest.skip(f"{name} left out: ZRECORD_NO_ML=1 (make test-py); make test runs it", allow_module_level=True)
    try:
        return importlib.import_module(name)
    except ImportError as e:
        why = f"{name} cannot be imported ({e}); `pip install -r tests/requirements-ml.txt` (make setup-python does)"
        if os.environ.get(REQUIRE) == "1":
            pytest.fail(f"{REQUIRE}=1 but {why}", pytrace=False)
        pytest.skip(f"torch/JAX feeding not tested: {why}", allow_module_level=True)


def free_port() -> int:
    """A TCP port on 127.0.0.1 free a moment ago (the OS does not hand it out again soon)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def child_env(**extra: str) -> dict:
    """This environment without any launcher's variables, CPU-only JAX, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARS}
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def torchrun(nproc: int, *args: str) -> list:
    """The command line of `torchrun --standalone` (a free port of its own) from this venv."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
            "--max_restarts=0", *args]


def run(cmd, timeout: float, **kw) -> subprocess.CompletedProcess:
    """Runs `cmd` in a session of its own; on timeout kills the whole session (torchrun's
    workers too) and fails the test with the output so far."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         start_new_session=True, **kw)
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_session(p)
        out, _ = p.communicate()
        pytest.fail(f"{' '.join(map(str, cmd))} did not finish in {timeout} s:\n{out}")
    return subprocess.CompletedProcess(cmd, p.returncode, out, None)


def kill_session(p: subprocess.Popen) -> None:
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def kill_ranks(job: subprocess.Popen, pids) -> None:
    """SIGKILLs the ranks `pids` and the launcher `job`'s whole session, then waits (30 s at
    most) until none of the ranks is left."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    kill_session(job)
    job.wait(timeout=60)
    end = time.monotonic() + 30
    while any(pid_alive(pid) for pid in pids):
        assert time.monotonic() < end, "a killed rank is still running"
        time.sleep(0.05)


def wait_for(path: Path, timeout: float, proc: subprocess.Popen = None, log: Path = None) -> None:
    """Waits until `path` exists; fails early if `proc` ended first, with its `log`."""
    end = time.monotonic() + timeout
    while not path.exists():
        if proc is not None and proc.poll() is not None:
            out = log.read_text() if log is not None else ""
            pytest.fail(f"the job ended (exit {proc.returncode}) before writing {path.name}:\n{out}")
        if time.monotonic() > end:
            pytest.fail(f"{path.name} did not appear in {timeout} s")
        time.sleep(0.05)


# -- the store every multi-process test reads ---------------------------------------------

def sample_data(n: int) -> np.ndarray:
    """Sample i is [i, (i * 7919) mod 65521, ...]: a batch's data is checked against its labels."""
    i = np.arange(n, dtype=np.int64)
    return np.stack([i, (i * 7919) % 65521, (i * i) % 257], axis=1)


def write_store(root: Path, n: int):
    """`root/data.zr` (the samples above) and `root/label.zr` (label i = i)."""
    import zrecord

    data = zrecord.Dataset.write(root / "data.zr", sample_data(n))
    label = zrecord.Dataset.write(root / "label.zr", np.arange(n, dtype=np.int64))
    data.close()
    label.close()
    return root / "data.zr", root / "label.zr"


def reference_labels(root: Path, n: int, global_batch: int, steps: int, seed: int, **kw) -> np.ndarray:
    """The global stream of the `n`-sample store at `root`, read by one process (world size
    1): `(steps, global_batch)` labels, each batch's data checked against its labels."""
    import zrecord

    samples = sample_data(n)
    loader = zrecord.DataLoader(
        zrecord.Dataset(root / "data.zr"), zrecord.Dataset(root / "label.zr"),
        batch_size=global_batch, mode=zrecord.Sampler.Mode.SHUFFLE, seed=seed, rank=0, world_size=1, **kw,
    )
    with loader:
        out = []
        for _ in range(steps):
            batch = next(loader)
            np.testing.assert_array_equal(batch["data"], samples[batch["label"]])
            out.append(batch["label"].copy())
    return np.stack(out)


def write_json(path: Path, obj) -> None:
    """Whole or not at all: a test may read the file the moment it appears."""
    import json

    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(obj))
    os.replace(tmp, path)


def pid_alive(pid: int) -> bool:
    """Whether process `pid` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
