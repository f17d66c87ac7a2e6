"""Columns added to and dropped from a dataset: `Dataset.add_field` / `Dataset.drop_field`.

Adding a field to an existing dataset (a new caption model's output, an embedding, a
quality score) must not mean rewriting everything. A state
saved before the change resumes after it, since a stream reads rows, not columns.
"""

import json
import os

import numpy as np
import pyarrow as pa
import pytest

import zrecord
from zrecord import DataLoader, Dataset


def written(path, n=1000, shard_records=300, layout=None):
    rng = np.random.default_rng(0)
    return Dataset.write(path, {
        "image": rng.integers(0, 255, (n, 3, 4, 4), dtype=np.uint8),
        "label": np.arange(n),
        "tokens": [np.arange(i % 9 + 1, dtype=np.uint16) for i in range(n)],
    }, shard_records=shard_records, layout=layout)


def files(path):
    return sorted(os.path.relpath(os.path.join(d, f), path) for d, _, fs in os.walk(path) for f in fs)


def test_a_field_is_added_to_every_row_and_a_saved_state_resumes(tmp_path):
    path = tmp_path / "ds"
    ds = written(path)
    before = files(path)
    with DataLoader(ds, batch_size=50, mode=2, seed=4) as loader:
        [next(loader) for _ in range(5)]
        state = loader.state_dict()
        expect = [next(loader)["label"] for _ in range(6)]
    ds.close()

    scores = np.arange(1000, dtype=np.float32) / 7
    ds = Dataset.add_field(path, "score", scores)
    assert [f.name for f in ds.fields] == ["image", "label", "tokens", "score"]
    np.testing.assert_array_equal(ds[:]["score"], scores)
    assert set(before) <= set(files(path)), "no file of the other fields was touched"
    manifest = json.loads((path / "dataset.json").read_text())
    assert manifest["version"] == 3 and "rows" in manifest
    with DataLoader(ds, batch_size=50, mode=2, seed=4, state=state) as loader:
        got = [next(loader) for _ in range(6)]
    for b, labels in zip(got, expect):
        np.testing.assert_array_equal(b["label"], labels)
        np.testing.assert_array_equal(b["score"], scores[labels])

    # Strings from an iterator, a pyarrow column, a pandas Series: the same rule as write.
    captions = (f"caption {i}" for i in range(1000))
    Dataset.add_field(path, "caption", captions, codec="zstd")
    Dataset.add_field(path, "ids", pa.chunked_array([[[1, 2]] * 500, [[3]] * 500]), dtype="uint16")
    ds = Dataset(path)
    assert ds[999]["caption"] == "caption 999" and ds[500]["ids"].tolist() == [3]
    assert {f.name: f.kind for f in ds.fields}["caption"] == "string"

    # Dropping one: gone from the manifest and the disk; the state still resumes.
    ds = Dataset.drop_field(path, "image")
    assert [f.name for f in ds.fields] == ["label", "tokens", "score", "caption", "ids"]
    assert not any(p.endswith(os.sep + "image") or "/image/" in p for p in files(path))
    with DataLoader(ds, batch_size=50, mode=2, seed=4, state=state) as loader:
        np.testing.assert_array_equal(next(loader)["label"], expect[0])


def test_a_wrong_column_is_refused_and_leaves_the_dataset_as_it_was(tmp_path):
    path = tmp_path / "ds"
    written(path, n=100, shard_records=40)
    before = files(path)
    manifest = (path / "dataset.json").read_text()
    with pytest.raises(ValueError, match=r"99 samples given, the dataset holds 100"):
        Dataset.add_field(path, "score", np.zeros(99))
    with pytest.raises(ValueError, match=r"101 samples given, the dataset holds 100"):
        Dataset.add_field(path, "score", np.zeros(101))
    with pytest.raises(ValueError, match="already has a field \"label\""):
        Dataset.add_field(path, "label", np.zeros(100))
    with pytest.raises(ValueError, match="field 'x': sample 0: value 300 does not fit uint8"):
        Dataset.add_field(path, "x", np.full(100, 300), dtype="uint8")

    def interrupted():
        yield from (f"c{i}" for i in range(60))
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        Dataset.add_field(path, "caption", interrupted())
    assert files(path) == before and (path / "dataset.json").read_text() == manifest
    with pytest.raises(ValueError, match="no field \"nope\"; its fields are image, label, tokens"):
        Dataset.drop_field(path, "nope")
    Dataset.drop_field(path, "image")
    Dataset.drop_field(path, "tokens")
    with pytest.raises(ValueError, match="only field"):
        Dataset.drop_field(path, "label")


def test_scalar_columns_come_from_iterators_and_lists_of_numbers(tmp_path):
    path = tmp_path / "ds"
    written(path, n=700)
    # A generator of Python floats, read in blocks: a fixed field of shape ().
    ds = Dataset.add_field(path, "q", (float(x) / 7 for x in range(700)), chunk_bytes=512)
    field = {f.name: f for f in ds.fields}["q"]
    assert field.shape == () and field.dtype == np.float64
    np.testing.assert_array_equal(ds[np.arange(700)]["q"], np.arange(700) / 7)
    # numpy scalars keep their dtype, and dtype= casts as for arrays.
    ds = Dataset.add_field(path, "small", (np.uint8(i % 200) for i in range(700)))
    assert ds[np.arange(3)]["small"].dtype == np.uint8
    ds = Dataset.add_field(path, "cast", iter(range(700)), dtype="int16")
    assert ds[699]["cast"] == 699 and ds[np.arange(2)]["cast"].dtype == np.int16
    ds.close()
    # Dataset.write takes lists and iterators of numbers beside other fields.
    other = Dataset.write(tmp_path / "w", {"label": [1, 2, 3], "score": iter([0.5, 1.5, np.float64(2.5)]),
                                           "ok": [True, False, True]})
    np.testing.assert_array_equal(other[np.arange(3)]["score"], [0.5, 1.5, 2.5])
    assert other[np.arange(3)]["label"].dtype == np.int64 and other[1]["ok"] == False  # noqa: E712
    other.close()
    # A fraction after integers would be cut: refused, naming the field and sample.
    with pytest.raises(ValueError, match=r"field 'n': sample 2: value 0.5 does not fit int64"):
        Dataset.write(tmp_path / "bad", {"n": iter([1, 2, 0.5])})
    with pytest.raises(TypeError, match=r"field 'm': sample 1 is ndarray, but sample 0 made it a scalar field"):
        Dataset.write(tmp_path / "bad2", {"m": [1.0, np.arange(3)]})
    assert not (tmp_path / "bad").exists() and not (tmp_path / "bad2").exists()


def test_an_added_field_takes_the_dataset_layout_and_loaderx_reads_it(tmp_path):
    path = tmp_path / "ds"
    written(path, n=120, shard_records=50, layout="sparse")
    Dataset.add_field(path, "score", np.arange(120, dtype=np.float64))
    info = zrecord.inspect(path / "shard-000002" / "score")
    assert info.layout == "sparse"
    loaderx = pytest.importorskip("loaderx")
    store = loaderx.Dataset(str(path / "shard-000001" / "score"))
    np.testing.assert_array_equal(store[np.arange(50)], np.arange(50, 100, dtype=np.float64))


def test_appends_after_a_change_keep_every_field(tmp_path):
    path = tmp_path / "ds"
    written(path, n=100)
    Dataset.add_field(path, "caption", [f"c{i}" for i in range(100)])
    ds = Dataset.write(path, {
        "image": np.zeros((5, 3, 4, 4), np.uint8), "label": np.arange(100, 105),
        "tokens": [np.ones(2, np.uint16)] * 5, "caption": ["new"] * 5,
    }, mode="append")
    assert len(ds) == 105 and ds[104]["caption"] == "new" and ds[99]["caption"] == "c99"
    with pytest.raises(ValueError, match="missing caption"):
        Dataset.write(path, {"image": np.zeros((1, 3, 4, 4), np.uint8), "label": np.arange(1),
                             "tokens": [np.ones(2, np.uint16)]}, mode="append")


def test_a_state_saved_before_an_append_finishes_its_epoch_then_reads_the_new_rows(tmp_path):
    """An append used to invalidate every saved loader state, so a corpus could not grow
    under a job."""
    path = tmp_path / "ds"
    ds = written(path)
    with DataLoader(ds, batch_size=50, mode=2, seed=4) as loader:
        whole = [next(loader)["label"] for _ in range(20)]
    with DataLoader(ds, batch_size=50, mode=2, seed=4) as loader:
        [next(loader) for _ in range(7)]
        state = loader.state_dict()
    ds.close()
    grown = Dataset.write(path, {
        "image": np.zeros((500, 3, 4, 4), np.uint8), "label": np.arange(1000, 1500),
        "tokens": [np.ones(2, np.uint16)] * 500,
    }, mode="append")
    assert json.loads((path / "dataset.json").read_text())["version"] == 4
    with DataLoader(grown, batch_size=25, mode=2, seed=4, world_size=2, rank=0, state=state) as r0, \
            DataLoader(grown, batch_size=25, mode=2, seed=4, world_size=2, rank=1, state=state) as r1:
        assert (r0.epoch, r0.steps_per_epoch, r0.steps_left_in_epoch) == (0, 20, 13)
        rest = [np.concatenate([next(r0)["label"], next(r1)["label"]]) for _ in range(13)]
        for got, want in zip(rest, whole[7:]):
            np.testing.assert_array_equal(got, want)
        assert (r0.epoch, r0.steps_per_epoch) == (1, 30)
        epoch1 = np.concatenate([np.concatenate([next(r0)["label"], next(r1)["label"]]) for _ in range(30)])
    assert sorted(epoch1.tolist()) == list(range(1500)), "every row once, the new ones too"


def test_concat_joins_datasets_by_reference_and_says_how_fields_differ(tmp_path):
    a = Dataset.write(tmp_path / "a", {"text": ["x", "y"], "n": np.arange(2)}, metadata={"source": "a"})
    b = Dataset.write(tmp_path / "b", {"text": ["z"], "n": np.arange(2, 3)})
    a.close(), b.close()
    done = zrecord.concat([tmp_path / "a", tmp_path / "b"], tmp_path / "ab")
    assert done == {"samples": 3, "shards": 2, "linked": done["linked"], "copied": 0} and done["linked"] > 0
    ab = Dataset(tmp_path / "ab")
    assert ab[:]["text"] == ["x", "y", "z"] and ab.metadata == {"source": "a"}
    Dataset.write(tmp_path / "c", {"text": [b"bytes"], "n": np.arange(1)}).close()
    with pytest.raises(ValueError, match="text is string here, bytes there"):
        zrecord.concat([tmp_path / "a", tmp_path / "c"], tmp_path / "ac")
    assert not (tmp_path / "ac").exists()
