"""Ray Data writes and reads zrecord datasets (zrecord.ray): a real local Ray instance
(`ray.init(num_cpus=2)` on 127.0.0.1, shut down at the end) and the moto S3 server of
conftest.py.

A conversion of 20,000 samples in 8 write tasks, two of whose workers die (one in the middle
of its write, one after its part was uploaded, before Ray heard of it), commits each sample
exactly once, locally and in the object store; the dataset reads back through the
datasource and the DataLoader; a conversion that fails commits nothing, and running it again
uploads only what the failed run did not; tasks whose columns disagree are refused naming
them.
"""

import os
import sys
import time

import numpy as np
import pytest

# Ray's own servers (GCS, raylet, workers) listen on 127.0.0.1 only: a Ray that believes it
# is a single-machine install binds the loopback address instead of every interface. Read
# when ray is imported.
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"

import ray  # noqa: E402  (tests/requirements.txt: a missing Ray fails, never skips)
import ray.data  # noqa: E402

import zrecord  # noqa: E402
import zrecord.ray as zray  # noqa: E402

from _support import BUCKET  # noqa: E402

N = 20_000


@pytest.fixture(scope="module")
def cluster():
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        _node_ip_address="127.0.0.1",
        log_to_driver=False,
        configure_logging=False,
    )
    assert ray.util.get_node_ip_address() == "127.0.0.1"
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    # Ray's workers cannot import this test module: its functions travel by value.
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    yield
    ray.shutdown()


def samples(batch):
    ids = batch["id"]
    return {
        "id": ids,
        "image": (ids[:, None, None] * np.arange(1, 13).reshape(3, 4)[None] % 251).astype(np.uint8),
        "tokens": [np.arange(i % 13 + 1, dtype=np.uint16) + (i % 1000) for i in ids],
        "caption": [f"sample {i}" * (1 + i % 3) for i in ids],
    }


def source():
    return ray.data.range(N, override_num_blocks=8).map_batches(samples, batch_size=None)


def check(ds):
    """Every sample once, each field as `samples` made it."""
    assert len(ds) == N
    got = ds[:]
    order = np.argsort(got["id"])
    ids = got["id"][order]
    np.testing.assert_array_equal(ids, np.arange(N))
    expect = samples({"id": ids})
    np.testing.assert_array_equal(got["image"][order], expect["image"])
    for k in (0, 1, 4999, N - 1):
        j = order[k]
        np.testing.assert_array_equal(got["tokens"][j], expect["tokens"][k])
        assert got["caption"][j] == expect["caption"][k]


def dying(blocks):
    yield from blocks
    os._exit(1)


def failing_sink(base, marks):
    """A Datasink whose worker dies once in task 3 mid-write and once in task 5 after its
    part is finished (uploaded), each only on the first attempt (`marks` remembers)."""

    class DiesOnce(base):
        def write(self, blocks, ctx):
            mark = os.path.join(marks, f"task-{ctx.task_idx}")
            first = not os.path.exists(mark)
            if first and ctx.task_idx in (3, 5):
                open(mark, "w").close()
            if first and ctx.task_idx == 3:
                # Its block is staged into the part, then the worker dies before the commit.
                blocks = dying(blocks)
            part = super().write(blocks, ctx)
            if first and ctx.task_idx == 5:
                os._exit(1)
            return part

    return DiesOnce


@pytest.mark.parametrize("where", ["local", "s3"])
def test_a_conversion_whose_workers_die_commits_each_sample_once(cluster, s3, tmp_path, where):
    marks = tmp_path / "marks"
    marks.mkdir()
    if where == "s3":
        dest, options = f"s3://{BUCKET}/ray/train-{time.monotonic_ns()}", s3
    else:
        dest, options = str(tmp_path / "train"), None
    sink = failing_sink(zray.Datasink, str(marks))(dest, storage_options=options)
    source().write_datasink(sink, ray_remote_args={"max_retries": 3})
    assert sorted(os.listdir(marks)) == ["task-3", "task-5"], "both workers should have died once"
    assert sink.samples == N
    ds = zrecord.Dataset(dest, storage_options=options) if options else zrecord.Dataset(dest)
    assert ds.shards == 8
    assert [f.name for f in ds.fields] == ["id", "image", "tokens", "caption"]
    assert [f.kind for f in ds.fields] == ["fixed", "fixed", "ragged", "string"]
    check(ds)
    if where == "local":
        assert not [p for p in os.listdir(dest) if p.startswith(".zrecord-part-")]

    # Back into Ray, one read task per shard, and through the DataLoader.
    rows = zray.read(dest, storage_options=options).take_all()
    assert sorted(r["id"] for r in rows) == list(range(N))
    row = next(r for r in rows if r["id"] == 777)
    np.testing.assert_array_equal(row["tokens"], np.arange(777 % 13 + 1, dtype=np.uint16) + 777)
    with zrecord.DataLoader(ds, batch_size=1000, mode=2, seed=1, num_workers=2) as dl:
        ids = np.concatenate([next(dl)["id"] for _ in range(N // 1000)])
    np.testing.assert_array_equal(np.sort(ids), np.arange(N))


def test_a_local_destination_gains_the_samples_and_drops_failed_parts(cluster, tmp_path):
    dest = tmp_path / "train"
    source().write_datasink(zray.Datasink(dest))
    source().filter(lambda r: r["id"] < 500).write_datasink(zray.Datasink(dest))
    ds = zrecord.Dataset(dest)
    assert len(ds) == N + 500
    np.testing.assert_array_equal(np.sort(ds[:]["id"])[: 2 * 500 : 2], np.arange(500))

    class Fails(zray.Datasink):
        def write(self, blocks, ctx):
            if ctx.task_idx == 2:
                raise RuntimeError("task 2 fails")
            return super().write(blocks, ctx)

    with pytest.raises(Exception, match="task 2 fails"):
        source().write_datasink(Fails(dest), ray_remote_args={"max_retries": 0})
    assert len(zrecord.Dataset(dest)) == N + 500
    assert not [p for p in os.listdir(dest) if p.startswith(".zrecord-part-")]


def test_a_failed_conversion_commits_nothing_and_a_rerun_uploads_only_the_rest(cluster, s3, tmp_path):
    import boto3

    dest = f"s3://{BUCKET}/ray/rerun"
    prefix = dest.split(f"{BUCKET}/", 1)[1] + "/"
    client = boto3.client("s3", endpoint_url=s3["aws_endpoint"], aws_access_key_id="testing",
                          aws_secret_access_key="testing", region_name="us-east-1")

    def objects():
        pages = client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
        return {o["Key"]: (o["ETag"], o["LastModified"]) for p in pages for o in p.get("Contents", [])}

    done = tmp_path / "done"
    done.mkdir()

    class Fails(zray.Datasink):
        def write(self, blocks, ctx):
            part = super().write(blocks, ctx)
            if ctx.task_idx != 6:
                (done / str(ctx.task_idx)).touch()
                return part
            # Task 6 fails once every other part is up, so what the failed run left is settled.
            deadline = time.monotonic() + 300
            while len(os.listdir(done)) < 7 and time.monotonic() < deadline:
                time.sleep(0.05)
            raise RuntimeError("task 6 fails after its upload")

    with pytest.raises(Exception, match="task 6 fails"):
        source().write_datasink(Fails(dest, storage_options=s3), ray_remote_args={"max_retries": 0})
    before = objects()
    assert before and not any(k.endswith("remote.json") or k.endswith("dataset.json") for k in before)
    with pytest.raises(FileNotFoundError, match="no remote.json lists them: a push or write that did not finish"):
        zrecord.Dataset(dest, storage_options=s3)
    time.sleep(1.1)  # LastModified has a resolution of seconds
    sink = zray.Datasink(dest, storage_options=s3)
    source().write_datasink(sink)
    after = objects()
    kept = [k for k in before if after.get(k) == before[k]]
    # A rerun's stores are new stores, each with its own nonce, which lives in its small
    # checksums.zrc: those go up again; the records and tables (the bytes that count) do not.
    again = sorted(k for k in set(before) - set(kept) if not k.endswith("/checksums.zrc"))
    assert not again, f"re-uploaded: {again[:5]}"
    assert any(k.endswith("/0.zr") for k in kept)
    assert len(after) > len(before)
    check(zrecord.Dataset(dest, storage_options=s3))
    with pytest.raises(zrecord.ZrecordError, match="already there"):
        source().write_datasink(zray.Datasink(dest, storage_options=s3))


def test_an_append_to_an_object_store_dataset_lands_once_beside_its_readers(cluster, s3, tmp_path):
    """`Datasink("s3://...")` into a pushed dataset appends rather than refusing ("a dataset
    is already there (remote.json)"). With mode="append" the samples land, each
    once although two workers die, and a reader opened before keeps what it opened."""
    from ray.data._internal.savemode import SaveMode

    dest = f"s3://{BUCKET}/ray/grown-{time.monotonic_ns()}"
    first = ray.data.range(1000, override_num_blocks=2).map_batches(
        lambda b: samples({"id": b["id"] + N}), batch_size=None
    )
    first.write_datasink(zray.Datasink(dest, storage_options=s3))
    with pytest.raises(zrecord.ZrecordError, match='already there.*mode="append"'):
        first.write_datasink(zray.Datasink(dest, storage_options=s3))
    with pytest.raises(zrecord.ZrecordError, match="already there"):
        first.write_datasink(zray.Datasink(dest, storage_options=s3, mode="create"))
    with pytest.raises(ValueError, match="overwrite"):
        zray.Datasink(dest, mode="overwrite")
    before = zrecord.Dataset(dest, storage_options=s3)
    assert len(before) == 1000
    with zrecord.DataLoader(before, batch_size=100, mode=2, seed=3) as dl:
        [next(dl) for _ in range(3)]
        state = dl.state_dict()
        expect = [next(dl)["id"] for _ in range(7)]

    marks = tmp_path / "marks"
    marks.mkdir()
    sink = failing_sink(zray.Datasink, str(marks))(dest, storage_options=s3, mode=SaveMode.APPEND)
    source().write_datasink(sink, ray_remote_args={"max_retries": 3})
    assert sorted(os.listdir(marks)) == ["task-3", "task-5"], "both workers should have died once"
    assert sink.samples == N

    grown = zrecord.Dataset(dest, storage_options=s3)
    assert len(grown) == N + 1000 and grown.shards == 10
    got = grown[:]["id"]
    np.testing.assert_array_equal(got[:1000], np.arange(N, N + 1000), "the rows before keep their places")
    np.testing.assert_array_equal(np.sort(got), np.arange(N + 1000))
    assert len(before) == 1000
    np.testing.assert_array_equal(np.sort(before[:]["id"]), np.arange(N, N + 1000))
    # A state saved before the append finishes its epoch as it would have; the next epoch
    # is the grown dataset's.
    with zrecord.DataLoader(grown, batch_size=100, mode=2, seed=3, state=state) as dl:
        for want in expect:
            np.testing.assert_array_equal(next(dl)["id"], want)
        assert dl.epoch == 1 and dl.steps_per_epoch == (N + 1000) // 100

    # Samples of other columns are refused, naming the difference; nothing changes.
    other = ray.data.from_items([{"id": 1, "score": 0.5}])
    with pytest.raises(ValueError, match="missing image, tokens, caption; extra score"):
        other.write_datasink(zray.Datasink(dest, storage_options=s3, mode="append"))
    assert len(zrecord.Dataset(dest, storage_options=s3)) == N + 1000


def test_tasks_whose_columns_disagree_are_refused_naming_them(cluster, tmp_path):
    def widths(batch):
        dtype = np.int32 if batch["id"][0] < N // 2 else np.int64
        return {"id": batch["id"].astype(dtype)}

    dest = tmp_path / "bad"
    with pytest.raises(ValueError, match=r"task \d+'s fields \[id: <i8\[\]\] differ from task 0's \[id: <i4\[\]\]"):
        ray.data.range(N, override_num_blocks=4).map_batches(widths, batch_size=None).write_datasink(
            zray.Datasink(dest)
        )
    assert not (dest / "dataset.json").exists()
    assert not [p for p in os.listdir(dest) if p.startswith(".zrecord-part-")]


def test_a_parquet_file_keeps_its_types_through_ray_both_ways(cluster, tmp_path):
    # String and binary columns come back as str and bytes, not uint8 arrays.
    import pyarrow as pa
    import pyarrow.parquet as pq

    n = 2000
    table = pa.table({
        "id": pa.array(np.arange(n, dtype=np.int64)),
        "tokens": pa.array([list(range(i % 11 + 1)) for i in range(n)], type=pa.list_(pa.int64())),
        "image": pa.array([bytes([i % 256]) * (i % 50) for i in range(n)], type=pa.binary()),
        "caption": pa.array([f"caption {i} é" * (i % 3) for i in range(n)]),
    })
    src = tmp_path / "parquet"
    src.mkdir()
    for k in range(4):
        pq.write_table(table.slice(k * (n // 4), n // 4), src / f"part-{k}.parquet")
    dest = str(tmp_path / "ds")
    ray.data.read_parquet(str(src)).repartition(4).write_datasink(zray.Datasink(dest))
    ds = zrecord.Dataset(dest)
    assert {f.name: f.kind for f in ds.fields} == {"id": "fixed", "tokens": "ragged", "image": "bytes",
                                                   "caption": "string"}
    back = zray.read(dest).to_arrow_refs()
    out = pa.concat_tables(ray.get(back)).sort_by("id")
    assert out.schema.field("image").type == pa.binary() and out.schema.field("caption").type == pa.string()
    expect = table.to_pydict()
    got = out.to_pydict()
    assert got["id"] == expect["id"] and got["image"] == expect["image"] and got["caption"] == expect["caption"]
    assert [list(t) for t in got["tokens"]] == expect["tokens"]


def test_write_uses_every_cpu_for_a_few_small_files(cluster, tmp_path):
    # read_parquet of 8 small files gives one block; the sink must still run a write task per
    # CPU, not one (one core, one shard), whatever override_num_blocks says.
    import pyarrow as pa
    import pyarrow.parquet as pq

    src = tmp_path / "parquet"
    src.mkdir()
    for k in range(8):
        ids = np.arange(k * 1000, (k + 1) * 1000)
        pq.write_table(pa.table({"id": ids, "x": ids * 0.5}), src / f"part-{k}.parquet")
    by_cpu = zray.write(ray.data.read_parquet(str(src)), str(tmp_path / "by_cpu"))
    by_rows = zray.write(ray.data.read_parquet(str(src)), str(tmp_path / "by_rows"), rows_per_task=1000, codec="raw")
    assert by_cpu == by_rows == 8000
    for name, parts in (("by_cpu", 2), ("by_rows", 8)):
        ds = zrecord.Dataset(tmp_path / name)
        assert ds.shards == parts, (name, ds.shards)  # one part, so one shard, per write task
        got = ds[np.arange(len(ds))]
        np.testing.assert_array_equal(np.sort(got["id"]), np.arange(8000))  # each row once
        np.testing.assert_array_equal(got["x"], got["id"] * 0.5)
    with pytest.raises(ValueError, match="not both"):
        zray.write(ray.data.read_parquet(str(src)), str(tmp_path / "x"), tasks=2, rows_per_task=10)


def test_the_sink_reports_the_bytes_its_tasks_write(cluster, s3, tmp_path):
    # The sink reports progress in bytes, as push does.
    reports = []
    dest = f"s3://{BUCKET}/progress-{time.monotonic_ns()}.zr"
    written = zray.write(source(), dest, tasks=4, storage_options=s3, progress=lambda d, t: reports.append((d, t)))
    assert written == N
    dones = [d for d, _ in reports]
    assert dones == sorted(dones), reports  # never backwards
    assert reports[-1][0] == reports[-1][1] > 0, reports  # the last report closes the total
    assert all(t == 0 for _, t in reports[:-1]), reports  # no total before the end
    # At least the fixed fields' bytes (id 8 + image 12 per sample), at most a few times them all.
    assert 20 * N <= reports[-1][0] < 20 * N + 200 * N, reports[-1]
    check(zrecord.Dataset(dest, storage_options=s3))
    with pytest.raises(TypeError, match="progress must be"):
        zray.Datasink(str(tmp_path / "x"), progress="yes")


def test_a_retried_write_task_is_counted_once():
    # A retried task's bytes must not add to those of the attempt Ray abandoned: only each
    # task's latest attempt counts in the sink's progress.
    counts = zray._Counts()
    counts.add(0, "first", 100)
    counts.add(1, "a", 50)
    counts.add(0, "first", 20)
    assert counts.total() == 170
    counts.add(0, "retry", 30)  # task 0 runs again, writing its bytes anew
    assert counts.total() == 80
    counts.add(0, "retry", 90)
    assert counts.total() == 170
