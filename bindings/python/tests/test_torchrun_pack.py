"""A real torchrun job packing token documents (the ranks' code is
_torchrun_pack_worker.py): four gloo ranks pack a SHUFFLE epoch of documents, are
SIGKILLed mid-epoch after saving the state while their workers read ahead, and two ranks
with twice the rows each resume from it. The rows of both jobs, put together, are those
of an uninterrupted single-process run, token for token, and hold no token of the epoch
twice (shuffled rows, the default: every token but the epoch's tail).
"""

import json
import subprocess
import time

import numpy as np

from _ml import HERE, child_env, kill_ranks, need, run, torchrun, wait_for

need("torch")

import zrecord  # noqa: E402

WORKER = HERE / "_torchrun_pack_worker.py"
SEED, SEQ, ROWS, EOS = 5, 64, 8, 1
JOB_TIMEOUT = 300


def doc(i):
    return np.arange(1 + (i * 53) % 120, dtype=np.int32) + np.int32(i * 1000 + 10)



def test_packed_job_killed_on_four_ranks_resumes_on_two_token_for_token(tmp_path):
    n = 700
    data = tmp_path / "docs"
    zrecord.Dataset.write(data, {"tokens": (doc(i) for i in range(n))}, shard_records=250)
    tokens_per_epoch = sum(len(doc(i)) + 1 for i in range(n))
    epoch_steps = tokens_per_epoch // SEQ // ROWS  # shuffled rows: whole batches of whole rows
    k = epoch_steps // 3
    more = epoch_steps - k
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()

    def opts(out, **kw):
        return json.dumps({"data": str(data), "out": str(out), "seq_len": SEQ, "seed": SEED, **kw})

    log = tmp_path / "killed-job.log"
    with open(log, "w") as out:
        job = subprocess.Popen(
            torchrun(4, str(WORKER), "kill", opts(first, rows=ROWS // 4, save_at=k, workers=2, prefetch=4)),
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=child_env(), cwd=first,
        )
    pids = []
    try:
        for r in range(4):
            wait_for(first / f"rank{r}.json", JOB_TIMEOUT, job, log)
        saved = [json.loads((first / f"rank{r}.json").read_text()) for r in range(4)]
        pids = [s["pid"] for s in saved]
        end = time.monotonic() + JOB_TIMEOUT
        for r in range(4):  # every rank reads on past the saved step before the kill
            progress = first / f"rank{r}.progress"
            while not (progress.exists() and json.loads(progress.read_text())["step"] >= k + 3):
                assert time.monotonic() < end and job.poll() is None, "the job stopped reading:\n" + log.read_text()
                time.sleep(0.05)
    finally:
        kill_ranks(job, pids)

    assert all(s["state"] == saved[0]["state"] for s in saved)
    (tmp_path / "state.json").write_text(json.dumps(saved[0]["state"]))
    p = run(
        torchrun(2, str(WORKER), "resume",
                 opts(second, rows=ROWS // 2, steps=more, workers=1, prefetch=1, state=str(tmp_path / "state.json"))),
        JOB_TIMEOUT, env=child_env(), cwd=second,
    )
    assert p.returncode == 0, p.stdout
    before = np.concatenate([np.load(first / f"rank{r}.npy") for r in range(4)], axis=1)
    after = np.concatenate([np.load(second / f"rank{r}.npy") for r in range(2)], axis=1)
    assert before.shape == (k, ROWS, SEQ) and after.shape == (more, ROWS, SEQ)
    got = np.concatenate([before, after])

    with zrecord.DataLoader(zrecord.Dataset(data), batch_size=ROWS, mode=zrecord.Sampler.Mode.SHUFFLE, seed=SEED,
                            num_workers=0, pack=zrecord.Pack(seq_len=SEQ, mode="concat", eos=EOS)) as dl:
        reference = np.stack([next(dl)["tokens"] for _ in range(k + more)])
    np.testing.assert_array_equal(got, reference)
    # The epoch's tokens, each at most once, all but the tail past its last whole batch.
    body = got.reshape(-1)
    body = body[body != EOS]
    every = np.concatenate([doc(i) for i in range(n)])
    assert len(np.unique(body)) == len(body) and np.isin(body, every).all()
    assert len(every) - len(body) <= (ROWS + 1) * SEQ
