"""One dataset written by many processes (zrecord.write_part / zrecord.commit_parts).

Before these, separate processes could not write one dataset: a second writer got
LockedError, and the parts API that the Ray sink uses was private and handed parts through
Ray. Here: a multiprocessing pool, a Slurm array job (real processes, one killed mid-write
with SIGKILL and run again), and parts from separate processes into the S3-compatible
server, each committed once in part order.
"""

import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import zrecord

from _support import BUCKET, bucket_objects

ROWS = 250


def rows(part):
    """Part `part`'s samples: ids, a caption (string field), ragged tokens."""
    ids = np.arange(part * ROWS, (part + 1) * ROWS, dtype=np.int64)
    return {
        "id": ids,
        "caption": [f"sample {i}" for i in ids],
        "tokens": [np.arange(i % 7 + 1, dtype=np.uint16) + i for i in ids],
    }


def _pool_task(args):
    dest, part, storage_options = args
    return zrecord.write_part(dest, part, rows(part), storage_options=storage_options, shard_records=100)


def check(ds, parts):
    want = np.concatenate([np.arange(p * ROWS, (p + 1) * ROWS) for p in parts])
    got = ds[np.arange(len(ds))]
    np.testing.assert_array_equal(got["id"], want)
    assert ds[len(ds) - 1]["caption"] == f"sample {want[-1]}"
    np.testing.assert_array_equal(ds[3]["tokens"], np.arange(want[3] % 7 + 1, dtype=np.uint16) + want[3])


def test_a_multiprocessing_pool_writes_one_dataset(tmp_path):
    dest = tmp_path / "train"
    # A second process writing the same dataset used to be refused with LockedError.
    with multiprocessing.get_context("spawn").Pool(3) as pool:
        written = pool.map(_pool_task, [(str(dest), p, None) for p in (2, 0, 3, 1)])
    assert written == [ROWS] * 4
    assert not (dest / "dataset.json").exists(), "nothing is readable before the commit"
    assert zrecord.commit_parts(dest, 4) == 4 * ROWS
    ds = zrecord.Dataset(dest)
    check(ds, [0, 1, 2, 3])
    assert {f.name: f.kind for f in ds.fields}["caption"] == "string"
    assert sorted(p.name for p in dest.iterdir() if p.name.startswith(".zrecord-part")) == []
    # A second job appends its parts; without mode="append" the commit refuses.
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        pool.map(_pool_task, [(str(dest), p, None) for p in (4, 5)])
    with pytest.raises(ValueError, match='mode="append"'):
        zrecord.commit_parts(dest, [4, 5])
    assert zrecord.commit_parts(dest, [4, 5], mode="append") == 2 * ROWS
    check(zrecord.Dataset(dest), range(6))


SLURM_TASK = textwrap.dedent(
    """
    import os, sys, time
    import numpy as np
    import zrecord
    sys.path.insert(0, {tests!r})
    from test_parts import rows

    part = int(os.environ["SLURM_ARRAY_TASK_ID"])
    data = rows(part)
    if os.environ.get("STALL_AT"):
        # Samples come from a generator; this one stops half-way and waits to be killed.
        def stalling(values):
            for k, v in enumerate(values):
                if k == int(os.environ["STALL_AT"]):
                    open(os.environ["STALLED"], "w").close()
                    time.sleep(600)
                yield v
        data["tokens"] = stalling(data["tokens"])
        data["caption"] = list(data["caption"])
    zrecord.write_part(sys.argv[1], part, data, shard_records=100, chunk_bytes=1024)
    """
)


def test_a_slurm_array_job_with_a_killed_task_commits_after_it_is_run_again(tmp_path):
    dest = tmp_path / "train"
    script = tmp_path / "task.py"
    script.write_text(SLURM_TASK.format(tests=os.path.dirname(__file__)))
    stalled = tmp_path / "stalled"
    procs = []
    for part in range(3):
        env = dict(os.environ, SLURM_ARRAY_TASK_ID=str(part))
        if part == 1:
            env.update(STALL_AT="120", STALLED=str(stalled))
        procs.append(subprocess.Popen([sys.executable, str(script), str(dest)], env=env))
    deadline = time.monotonic() + 120
    while not stalled.exists():
        assert time.monotonic() < deadline and procs[1].poll() is None, "task 1 never reached its stall"
        time.sleep(0.05)
    procs[1].send_signal(signal.SIGKILL)
    codes = [p.wait(timeout=120) for p in procs]
    assert codes[0] == codes[2] == 0 and codes[1] == -signal.SIGKILL
    # The job's last step: task 1 died half-way, and the commit names it.
    with pytest.raises(ValueError, match="part 1 did not finish|part\\(s\\) 1 were not written"):
        zrecord.commit_parts(dest, 3)
    assert not (dest / "dataset.json").exists()
    env = dict(os.environ, SLURM_ARRAY_TASK_ID="1")
    subprocess.run([sys.executable, str(script), str(dest)], env=env, check=True, timeout=120)
    assert zrecord.commit_parts(dest, 3) == 3 * ROWS
    check(zrecord.Dataset(dest), [0, 1, 2])


def test_processes_write_parts_into_an_object_store(s3, tmp_path):
    url = f"s3://{BUCKET}/parts/train"
    with multiprocessing.get_context("spawn").Pool(3) as pool:
        assert pool.map(_pool_task, [(url, p, s3) for p in (1, 0, 2)]) == [ROWS] * 3
    # Part 1 is written again (its task was judged failed): it replaces the first attempt,
    # whose uploads go.
    before = set(bucket_objects(s3, "parts/train/"))
    assert _pool_task((url, 1, s3)) == ROWS
    after = set(bucket_objects(s3, "parts/train/"))
    assert len(after) == len(before), "the first attempt's objects were replaced, not kept beside"
    assert after != before
    with pytest.raises(FileNotFoundError, match="waiting for zrecord.commit_parts"):
        zrecord.Dataset(url, storage_options=s3)
    with pytest.raises(ValueError, match=r"part\(s\) 3 were not written"):
        zrecord.commit_parts(url, 4, storage_options=s3)
    assert zrecord.commit_parts(url, 3, storage_options=s3) == 3 * ROWS
    check(zrecord.Dataset(url, storage_options=s3, verify="always"), [0, 1, 2])
    assert not [k for k in bucket_objects(s3, "parts/train/") if ".zrecord-parts" in k]
    # More parts appended by another job.
    assert _pool_task((url, 7, s3)) == ROWS
    assert zrecord.commit_parts(url, [7], mode="append", storage_options=s3) == ROWS
    check(zrecord.Dataset(url, storage_options=s3, verify="always"), [0, 1, 2, 7])
