"""Rows appended under a running job join where a restarted job would take them: the same
job reads the same samples whether it ran through or was stopped and resumed from a saved
state, in every mode. Each run is its own process, and the append is another."""
import json
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from zrecord import Dataset

N, MORE, STEPS = 1000, 500, 70

# A run of the loader in its own process. argv: path, mode, batch, first step to stop at
# (the parent then appends), steps in all, output, and "resume" to save the state at the
# stop, exit, and go on in a new process after the append.
RUN = textwrap.dedent("""
    import json, os, sys, time
    import numpy as np
    from zrecord import DataLoader, Dataset
    path, mode, batch, stop, steps, out, how = sys.argv[1:8]
    mode, batch, stop, steps = int(mode), int(batch), int(stop), int(steps)
    state = None
    if how == "resumed":
        with open(out + ".state") as f:
            state = json.load(f)
    labels = []
    with DataLoader(Dataset(path), batch_size=batch, mode=mode, seed=3, num_workers=2, state=state) as loader:
        for step in range(loader.step, steps):
            if step == stop and how != "resumed":
                if how == "saves":
                    with open(out + ".state", "w") as f:
                        json.dump(loader.state_dict(), f)
                    np.save(out + ".before.npy", np.array(labels, dtype=np.int64).reshape(-1, batch))
                    sys.exit(0)
                open(out + ".stopped", "w").close()
                while not os.path.exists(out + ".appended"):
                    time.sleep(0.01)
            labels.append(next(loader)["label"])
    np.save(out + ".npy", np.array(labels, dtype=np.int64).reshape(-1, batch))
""")


def append(path):
    subprocess.run([sys.executable, "-c", (
        "import sys, numpy as np; from zrecord import Dataset; "
        f"Dataset.write(sys.argv[1], {{'label': np.arange({N}, {N + MORE})}}, mode='append').close()"
    ), str(path)], check=True)


def run_through(path, mode, batch, stop, out):
    """A run that keeps going while another process appends at step `stop`."""
    child = subprocess.Popen([sys.executable, "-c", RUN, str(path), str(mode), str(batch), str(stop),
                              str(STEPS), str(out), "through"])
    deadline = time.monotonic() + 60
    while not (out.parent / (out.name + ".stopped")).exists():
        assert child.poll() is None and time.monotonic() < deadline, "the run did not get to its stop"
        time.sleep(0.01)
    append(path)
    (out.parent / (out.name + ".appended")).touch()
    assert child.wait(timeout=120) == 0
    return np.load(f"{out}.npy")


def run_restarted(path, mode, batch, stop, out):
    """A run stopped at `stop`, an append, and the run resumed from its state."""
    args = [str(path), str(mode), str(batch), str(stop), str(STEPS), str(out)]
    subprocess.run([sys.executable, "-c", RUN, *args, "saves"], check=True, timeout=120)
    before = np.load(f"{out}.before.npy")
    append(path)
    subprocess.run([sys.executable, "-c", RUN, *args, "resumed"], check=True, timeout=120)
    return np.concatenate([before, np.load(f"{out}.npy")])


@pytest.mark.parametrize("mode,batch", [(2, 50), (2, 64), (1, 64), (0, 48)], ids=["shuffle", "shuffle-tail", "sequential", "iid"])
def test_an_uninterrupted_run_and_a_restarted_one_read_the_same_samples_across_an_append(tmp_path, mode, batch):
    for name in ("through", "restarted"):
        Dataset.write(tmp_path / name, {"label": np.arange(N)}).close()
    # The append comes at another step in each: where a row joins must not depend on it.
    through = run_through(tmp_path / "through", mode, batch, 7, tmp_path / "a")
    restarted = run_restarted(tmp_path / "restarted", mode, batch, 11, tmp_path / "b")
    assert through.shape == restarted.shape == (STEPS, batch)
    for step, (a, b) in enumerate(zip(through, restarted)):
        np.testing.assert_array_equal(a, b, err_msg=f"step {step}")
    read = np.unique(through)
    assert read.max() >= N, "the appended rows were read"
    assert (through[:7] < N).all()
    if mode == 2:
        # The epoch in flight finished over the rows it began with; the next has them all.
        per = N // batch
        assert (through[:per] < N).all()
        grown = (N + MORE) // batch
        epoch1 = through[per:per + grown].ravel()
        assert len(np.unique(epoch1)) == epoch1.size and epoch1.max() >= N


def test_a_run_reads_on_over_the_rows_it_opened_when_rows_are_deleted(tmp_path):
    """A delete is not followed (a restart after it is refused): the run goes on over the
    rows it opened, every batch whole."""
    from zrecord import DataLoader
    ds = Dataset.write(tmp_path / "ds", {"label": np.arange(N)})
    with DataLoader(ds, batch_size=50, mode=2, seed=3, num_workers=0) as loader:
        first = [next(loader)["label"] for _ in range(5)]
        Dataset(tmp_path / "ds").delete(np.arange(100))
        rest = [next(loader)["label"] for _ in range(40)]
    epoch0 = np.concatenate(first + rest[:15])
    assert sorted(epoch0.tolist()) == list(range(N))
    assert np.concatenate(rest[15:]).max() < N


def test_ranks_of_a_torchrun_job_take_an_append_at_the_same_step(tmp_path):
    """Two ranks (gloo) read on while rank 0 appends: they agree on the grown dataset at the
    same epoch boundary, and the global stream they read is a one-process job's restarted
    across the append."""
    from _ml import HERE, child_env, need, run, torchrun

    need("torch")
    b, stop = 25, 7
    Dataset.write(tmp_path / "job", {"label": np.arange(N)}).close()
    opts = {"path": str(tmp_path / "job"), "out": str(tmp_path), "batch": b, "stop": stop, "steps": STEPS}
    p = run(torchrun(2, str(HERE / "_torchrun_append_worker.py"), json.dumps(opts)), 300, env=child_env(),
            cwd=tmp_path)
    assert p.returncode == 0, p.stdout
    job = np.concatenate([np.load(tmp_path / f"rank{r}.npy") for r in range(2)], axis=1)
    Dataset.write(tmp_path / "one", {"label": np.arange(N)}).close()
    one = run_restarted(tmp_path / "one", 2, 2 * b, 3, tmp_path / "ref")
    np.testing.assert_array_equal(job, one)
    assert job.max() >= N
