"""Real torchrun jobs over a zrecord store: gloo process groups on the CPU, ranks found by the
DataLoader itself, batches fed through zrecord.torch.loader (the ranks' code is
_torchrun_worker.py).

- Four ranks read one SHUFFLE epoch: together every index exactly once except the dropped
  tail, each global batch the world-size-1 stream's, the same number of steps on every
  rank, and an all_reduce of the step count completes.
- A two-rank job is SIGKILLed after saving its state at step k while its workers are read
  ahead; one rank with twice the batch and other worker counts resumes from that state,
  and the global stream put together is an uninterrupted run's, sample for sample.
- A two-rank job where only rank 0 resumes from a saved state stops on both ranks at its
  first batch with an error naming the step each rank holds.
"""

import json
import subprocess
import time

import numpy as np
import pytest

from _ml import (
    HERE, child_env, kill_ranks, need, reference_labels, run, torchrun, wait_for, write_store,
)

need("torch")

WORKER = HERE / "_torchrun_worker.py"
N = 1000
SEED = 7
#: Bound on one torchrun job: four ranks importing torch on two busy cores take some 30 s.
JOB_TIMEOUT = 300


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("store")
    write_store(root, N)
    return root


def worker(mode, store, out, **opts):
    opts = {"store": str(store), "out": str(out), "n": N, "seed": SEED, **opts}
    return [str(WORKER), mode, json.dumps(opts, default=str)]


def read_json(path):
    return json.loads(path.read_text())


def test_four_ranks_read_one_shuffled_epoch_exactly_once(store, tmp_path):
    world, b = 4, 24
    g = world * b
    steps = N // g  # 10 global batches; the last 1000 mod 96 = 40 positions are dropped
    p = run(torchrun(world, *worker("epoch", store, tmp_path, batch=b)), JOB_TIMEOUT, env=child_env(), cwd=tmp_path)
    assert p.returncode == 0, p.stdout

    for r in range(world):
        seen = read_json(tmp_path / f"rank{r}.json")
        assert (seen["rank"], seen["world"]) == (r, world)
        # Not given to the DataLoader: taken from the initialised process group.
        assert (seen["loader_rank"], seen["loader_world"]) == (r, world), seen
        assert seen["steps_per_epoch"] == steps and seen["steps"] == steps, seen
        assert seen["all_reduced_steps"] == world * steps, seen

    # (steps, world, b): rank r's slice of each global batch.
    labels = np.stack([np.load(tmp_path / f"rank{r}.npy") for r in range(world)], axis=1)
    read = labels.reshape(-1)
    assert len(np.unique(read)) == len(read) == steps * g, "an index was read twice in one epoch"
    assert len(np.setdiff1d(np.arange(N), read)) == N - steps * g == N % g
    # Rank r's batch is the r-th slice of the one global stream, which world size 1 reads too.
    np.testing.assert_array_equal(labels.reshape(steps, g), reference_labels(store, N, g, steps, SEED))



def test_sigkilled_two_rank_job_resumes_on_one_rank_with_twice_the_batch(store, tmp_path):
    b, k, more = 16, 5, 40  # 31 steps per epoch: the resumed run crosses into epoch 1
    g = 2 * b
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    log = tmp_path / "killed-job.log"  # a file, not a pipe nobody reads while the job runs
    with open(log, "w") as out:
        job = subprocess.Popen(
            torchrun(2, *worker("kill", store, first, batch=b, save_at=k, workers=1, prefetch=3)),
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=child_env(), cwd=first,
        )
    pids = []
    try:
        for r in range(2):
            wait_for(first / f"rank{r}.json", JOB_TIMEOUT, job, log)
        saved = [read_json(first / f"rank{r}.json") for r in range(2)]
        pids = [s["pid"] for s in saved]
        # Let both ranks read on past step k, so that the state saved at k is not simply
        # the newest position: workers and consumers are ahead of it when the job dies.
        end = time.monotonic() + JOB_TIMEOUT
        for r in range(2):
            progress = first / f"rank{r}.progress"
            while not (progress.exists() and read_json(progress)["step"] >= k + 4):
                assert time.monotonic() < end and job.poll() is None, "the job stopped reading:\n" + log.read_text()
                time.sleep(0.05)
    finally:
        kill_ranks(job, pids)

    # Every rank's state is the same position: step k of the global stream.
    assert saved[0]["state"] == saved[1]["state"]
    state = saved[0]["state"]
    assert len(json.dumps(state)) < 1024
    (tmp_path / "state.json").write_text(json.dumps(state))

    p = run(
        torchrun(1, *worker("resume", store, second, batch=g, workers=3, prefetch=1, steps=more,
                            state=tmp_path / "state.json")),
        JOB_TIMEOUT, env=child_env(), cwd=second,
    )
    assert p.returncode == 0, p.stdout
    before = np.concatenate([np.load(first / "rank0.npy"), np.load(first / "rank1.npy")], axis=1)
    after = np.load(second / "rank0.npy")
    assert before.shape == (k, g) and after.shape == (more, g)
    np.testing.assert_array_equal(np.concatenate([before, after]), reference_labels(store, N, g, k + more, SEED))


def test_ranks_fed_different_states_stop_on_every_rank(store, tmp_path):
    b = 16
    import zrecord

    with zrecord.DataLoader(zrecord.Dataset(store / "data.zr"), zrecord.Dataset(store / "label.zr"),
                            batch_size=b, mode=zrecord.Sampler.Mode.SHUFFLE, seed=SEED, num_workers=0,
                            rank=0, world_size=2) as loader:
        for _ in range(5):
            next(loader)
        state = loader.state_dict()
    (tmp_path / "state.json").write_text(json.dumps(state))
    p = run(torchrun(2, *worker("disagree", store, tmp_path, batch=b, state=tmp_path / "state.json")),
            JOB_TIMEOUT, env=child_env(), cwd=tmp_path)
    assert p.returncode == 0, p.stdout
    for r in range(2):
        seen = read_json(tmp_path / f"rank{r}.json")
        assert seen["steps"] == 0, "a rank read a batch of a stream the others do not read"
        # The first next() found it; the second raises it again without another collective.
        assert [e["type"] for e in seen["raised"]] == ["RanksDisagreeError"] * 2, seen
        first = seen["raised"][0]
        assert first["differences"] == [["step", {"0": 5, "1": 0}]], first
        assert "step: rank 0 has 5; rank 1 has 0" in first["message"], first["message"]
