"""A curator's dataset never lies: a dataset written anew is never taken for the old one, a
write says whether it creates, appends or overwrites, small shards merge without moving a
sample, and a saved state keeps its numbers through any JSON parser."""
import json
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest

import zrecord
from zrecord import DataLoader, Dataset

SHUFFLE = 2


def rows(n, reverse=False):
    order = np.arange(n)[::-1] if reverse else np.arange(n)
    return {
        "label": order.astype(np.int64),
        "caption": [f"caption {i}" for i in order],
        "quality": (order % 97).astype(np.float32) / 97,
    }


def saved_at(ds, step, key="label", **kw):
    args = dict(batch_size=64, mode=SHUFFLE, seed=7, num_workers=0) | kw
    with DataLoader(ds, **args) as loader:
        seen = [next(loader)[key] for _ in range(step)]
        return loader.state_dict(), seen


def test_a_dataset_written_again_in_another_order_refuses_the_state(tmp_path):
    path = tmp_path / "t1"
    ds = Dataset.write(path, rows(4000))
    state, _ = saved_at(ds, 30)
    ds.close()
    # The same state resumes on the same dataset, from another handle.
    with DataLoader(Dataset(path), batch_size=64, mode=SHUFFLE, seed=7, num_workers=0, state=state) as loader:
        next(loader)
    shutil.rmtree(path)
    # The same 4,000 rows, the same sizes, in reverse order: every store has the same length
    # and frontier as before.
    again = Dataset.write(path, rows(4000, reverse=True))
    with pytest.raises(ValueError, match="written again") as e:
        DataLoader(again, batch_size=64, mode=SHUFFLE, seed=7, num_workers=0, state=state)
    assert str(path) in str(e.value), "the message names the dataset"
    assert "Start a new run" in str(e.value)
    again.close()


def test_a_single_store_written_again_refuses_the_state(tmp_path):
    path = tmp_path / "labels"
    ds = Dataset.write(path, np.arange(1000))
    state, _ = saved_at(ds, 3, key="data", batch_size=10)
    ds.close()
    shutil.rmtree(path)
    again = Dataset.write(path, np.arange(1000)[::-1].copy())
    with pytest.raises(ValueError, match="not the dataset the state read"):
        DataLoader(again, batch_size=10, mode=SHUFFLE, seed=7, num_workers=0, state=state)
    again.close()


def test_resume_errors_say_how_the_dataset_changed_and_where(tmp_path):
    path = tmp_path / "ds"
    ds = Dataset.write(path, rows(1000))
    state, _ = saved_at(ds, 3)
    ds.delete(np.arange(50))
    with pytest.raises(ValueError, match=r"shrank from 1000 to 950 samples: rows were deleted") as e:
        DataLoader(ds, batch_size=64, mode=SHUFFLE, seed=7, num_workers=0, state=state)
    assert str(path) in str(e.value)
    ds.close()


def test_write_modes_create_append_overwrite(tmp_path):
    path = tmp_path / "ds"
    Dataset.write(path, rows(100)).close()
    # The default refuses an existing dataset, naming the modes, and leaves it as it was.
    with pytest.raises(ValueError, match=r'mode="append".*mode="overwrite"'):
        Dataset.write(path, rows(100))
    assert len(Dataset(path)) == 100
    with pytest.raises(ValueError, match="mode must be"):
        Dataset.write(path, rows(10), mode="replace")
    ds = Dataset.write(path, rows(50), mode="append")
    assert len(ds) == 150
    np.testing.assert_array_equal(ds[100:103]["label"], [0, 1, 2])
    ds.close()
    # Overwrite: of other fields even; the old shards are gone once it returns.
    old_shards = sorted(p.name for p in path.glob("shard-*"))
    ds = Dataset.write(path, {"x": np.arange(7, dtype=np.int16)}, mode="overwrite")
    assert len(ds) == 7 and [f.name for f in ds.fields] == ["x"]
    assert not any((path / s).exists() for s in old_shards)
    ds.close()
    # A single array keeps loaderx's habit (append), and may ask to create.
    Dataset.write(tmp_path / "one", np.arange(5)).close()
    assert len(Dataset.write(tmp_path / "one", np.arange(5))) == 10
    with pytest.raises(ValueError, match="already holds a store"):
        Dataset.write(tmp_path / "one", np.arange(5), mode="create")
    with pytest.raises(ValueError, match="overwrite"):
        Dataset.write(tmp_path / "one", np.arange(5), mode="overwrite")


def test_an_overwrite_is_seen_whole_or_not_at_all(tmp_path):
    """A reader polling the dataset while it is overwritten sees the old rows or the new
    rows, never a mix, and never a dataset that fails to open."""
    path = tmp_path / "ds"
    Dataset.write(path, {"v": np.zeros(3000, np.int64)}, shard_records=500).close()
    code = f"""
import sys, numpy as np, zrecord
seen = set()
for _ in range(400):
    ds = zrecord.Dataset({str(path)!r})
    vals = np.unique(ds[np.arange(len(ds))]["v"])
    assert vals.size == 1, vals
    seen.add((len(ds), int(vals[0])))
    ds.close()
print(sorted(seen))
"""
    reader = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    for k in range(1, 8):
        Dataset.write(path, {"v": np.full(2000 + k, k, np.int64)}, shard_records=500, mode="overwrite").close()
        time.sleep(0.01)
    out, err = reader.communicate(timeout=120)
    assert reader.returncode == 0, err
    assert Dataset(path)[0]["v"] == 7


def appended(path, shards):
    """A dataset of ``shards`` shards of 100 rows, labels counting up: one write, then appends."""
    Dataset.write(path, rows(100)).close()
    for k in range(1, shards):
        chunk = rows(100)
        chunk["label"] = chunk["label"] + 100 * k
        Dataset.write(path, chunk, mode="append").close()
    return path


def test_compaction_merges_small_shards_exactly_and_a_state_resumes_across_it(tmp_path):
    path = appended(tmp_path / "ds", 40)
    ds = Dataset(path)
    assert ds.shards == 40 and len(ds) == 4000
    before = {name: ds[np.arange(4000)][name] for name in ("label", "quality")}
    captions = [ds[i]["caption"] for i in range(0, 4000, 37)]
    state, _ = saved_at(ds, 20)
    with DataLoader(ds, batch_size=64, mode=SHUFFLE, seed=7, num_workers=0) as loader:
        reference = [next(loader)["label"] for _ in range(80)]
    ds.compact(target_rows=1000)
    assert ds.shards == 4, "40 shards of 100 into 4 of 1000"
    for name in ("label", "quality"):
        np.testing.assert_array_equal(ds[np.arange(4000)][name], before[name])
    assert [ds[i]["caption"] for i in range(0, 4000, 37)] == captions
    with DataLoader(ds, batch_size=64, mode=SHUFFLE, seed=7, num_workers=0, state=state) as loader:
        for step in range(20, 80):
            np.testing.assert_array_equal(next(loader)["label"], reference[step])
    assert zrecord.verify(path).ok
    # Nothing left to merge: a second compaction changes nothing.
    ds.compact(target_rows=1000)
    assert ds.shards == 4
    ds.close()


def test_a_loader_started_before_a_compaction_reads_on_and_a_handle_says_to_reopen(tmp_path):
    path = appended(tmp_path / "ds", 20)
    with DataLoader(Dataset(path), batch_size=64, mode=SHUFFLE, seed=7, num_workers=0) as loader:
        reference = [next(loader)["label"] for _ in range(60)]
    handle = Dataset(path)
    assert handle[5]["label"] == 5, "this read opens shard 0 only"
    with DataLoader(Dataset(path), batch_size=64, mode=SHUFFLE, seed=7, num_workers=0) as loader:
        got = [next(loader)["label"] for _ in range(10)]
        # Another process merges every shard and removes the old folders.
        subprocess.run([sys.executable, "-c", f"import zrecord; zrecord.Dataset({str(path)!r}).compact()"],
                       check=True, timeout=120)
        assert not (path / "shard-000003").exists()
        got += [next(loader)["label"] for _ in range(50)]
    for step, (a, b) in enumerate(zip(got, reference)):
        np.testing.assert_array_equal(a, b, err_msg=f"batch {step}")
    assert handle[7]["label"] == 7
    with pytest.raises(OSError, match="open the dataset again"):
        handle[350]
    handle.close()
    assert Dataset(path)[350]["label"] == 350


def test_an_append_after_compaction_resumes_a_state_of_before(tmp_path):
    path = tmp_path / "ds"
    Dataset.write(path, rows(300), shard_records=100).close()
    ds = Dataset(path)
    state, _ = saved_at(ds, 2)
    ds.compact(target_rows=300)
    assert ds.shards == 1
    ds.close()
    more = rows(100)
    more["label"] = more["label"] + 300
    Dataset.write(path, more, mode="append").close()
    # Grown by an append after the compaction: the state of before resumes (its epoch
    # finishes over the 300 samples it began with).
    with DataLoader(Dataset(path), batch_size=64, mode=SHUFFLE, seed=7, num_workers=0, state=state) as loader:
        assert next(loader)["label"].max() < 300


def test_a_saved_state_round_trips_through_javascripts_json_and_resumes(tmp_path):
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is needed (the README's set-up installs it)")
    ds = Dataset.write(tmp_path / "ds", rows(4000))
    state, _ = saved_at(ds, 30, seed=2**63 + 12345)
    text = json.dumps(state)
    back = subprocess.run([node, "-e", "let s='';process.stdin.on('data',d=>s+=d).on('end',()=>"
                           "process.stdout.write(JSON.stringify(JSON.parse(s))))"],
                          input=text, capture_output=True, text=True, check=True).stdout
    assert json.loads(back) == state, "every number survived"
    with DataLoader(ds, batch_size=64, mode=SHUFFLE, seed=2**63 + 12345, num_workers=0) as loader:
        reference = [next(loader)["label"] for _ in range(32)]
    with DataLoader(ds, batch_size=64, mode=SHUFFLE, seed=2**63 + 12345, num_workers=0,
                    state=json.loads(back)) as loader:
        np.testing.assert_array_equal(next(loader)["label"], reference[30])
    ds.close()


def test_a_copy_taken_while_rows_are_deleted_always_opens_and_verifies(tmp_path):
    """100 copies while another process deletes rows again and again: each copy is the
    dataset as one of its manifests published it, opens, verifies, and holds rows in order."""
    path = tmp_path / "ds"
    Dataset.write(path, rows(20_000), shard_records=2000).close()
    stop = tmp_path / "stop"
    code = f"""
import pathlib, numpy as np, zrecord
stop = pathlib.Path({str(stop)!r})
rng = np.random.default_rng(3)
deletes = 0
while not stop.exists() and deletes < 400:
    ds = zrecord.Dataset({str(path)!r})
    if len(ds) < 2000:
        break
    ds.delete(rng.choice(len(ds), 40, replace=False))
    ds.close()
    deletes += 1
print(deletes)
"""
    deleter = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    restarts = 0
    try:
        for k in range(100):
            out = tmp_path / f"copy{k}"
            done = zrecord.copy(path, out)
            restarts += done["restarts"]
            copy = Dataset(out)
            assert len(copy) == done["samples"] and 20_000 - len(copy) == 40 * ((20_000 - len(copy)) // 40)
            labels = copy[np.arange(len(copy))]["label"]
            assert np.all(np.diff(labels) > 0), "rows keep their order"
            assert copy[len(copy) - 1]["caption"] == f"caption {labels[-1]}"
            copy.close()
            assert zrecord.verify(out).ok
            shutil.rmtree(out)
    finally:
        stop.touch()
        out, err = deleter.communicate(timeout=300)
    assert deleter.returncode == 0, err
    assert int(out) > 5, "the deletes ran beside the copies"


APPENDER = """
import sys, numpy as np, zrecord
path, k = sys.argv[1], int(sys.argv[2])
for j in range(4):
    label = np.arange(50, dtype=np.int64) + 1000 * (4 * k + j)
    zrecord.Dataset.write(path, {"label": label, "caption": [f"c{i}" for i in label]}, mode="append").close()
"""


def test_appenders_side_by_side_take_turns_and_every_row_lands_once(tmp_path):
    path = tmp_path / "ds"
    first = np.arange(10, dtype=np.int64) - 100
    Dataset.write(path, {"label": first, "caption": [f"c{i}" for i in first]}).close()
    procs = [subprocess.Popen([sys.executable, "-c", APPENDER, str(path), str(k)], stderr=subprocess.PIPE)
             for k in range(3)]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err.decode()
    ds = Dataset(path)
    labels = ds[np.arange(len(ds))]["label"]
    want = np.concatenate([first] + [np.arange(50) + 1000 * b for b in range(12)])
    np.testing.assert_array_equal(np.sort(labels), np.sort(want))
    # Each write's rows are together, in order: one append never interleaves another's.
    for b in range(12):
        at = int(np.flatnonzero(labels == 1000 * b)[0])
        np.testing.assert_array_equal(labels[at:at + 50], np.arange(50) + 1000 * b)
    assert ds[0]["caption"] == "c-100" and zrecord.verify(path).ok
    ds.close()


def test_a_write_that_waits_too_long_for_the_lock_says_so(tmp_path):
    path = tmp_path / "ds"
    Dataset.write(path, {"label": np.arange(10)}).close()
    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl, sys, time; f = open(sys.argv[1], 'a'); fcntl.flock(f, fcntl.LOCK_EX); "
        "print('held', flush=True); time.sleep(30)"), str(path / ".zrecord-write.lock")], stdout=subprocess.PIPE)
    try:
        assert holder.stdout.readline().strip() == b"held"
        start = time.monotonic()
        with pytest.raises(zrecord.LockedError, match=r"for the 1.5 s this write waited; wait longer \(timeout=\)"):
            Dataset.write(path, {"label": np.arange(5)}, mode="append", timeout=1.5)
        assert 1.4 < time.monotonic() - start < 10
        with pytest.raises(zrecord.LockedError, match="another writer is adding to"):
            Dataset.write(path, {"label": np.arange(5)}, mode="append", timeout=0)
    finally:
        holder.kill()
        holder.wait()
    assert len(Dataset(path)) == 10, "nothing of the refused writes landed"

