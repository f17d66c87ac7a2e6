"""Bytes and string fields, and writes from Arrow, pandas and Hugging Face datasets.

Types are kept: a caption column and an encoded-image column come back as str and bytes,
not uint8 arrays, and `Dataset.write` takes a list of bytes (not "dtype |S41927 is not a
numeric dtype"), a list of str and a pyarrow Table (not "cannot store dtype object"). The Parquet round trip through Ray is in test_ray.py.
"""

import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import zrecord
from zrecord import DataLoader, Dataset

CAPTIONS = ["a cat on a mat", "", "naïve café ✓ 猫", "x" * 5000, "\x00inner\x00nul"]


def blobs(n, seed=0):
    rng = np.random.default_rng(seed)
    out = [rng.integers(0, 256, int(k), dtype=np.uint8).tobytes() for k in rng.integers(0, 3000, n)]
    out[0] = b""
    out[1] = b"\x89PNG\r\n\x1a\n" + bytes(40)  # ends in NUL bytes, kept as they are
    return out


def test_bytes_and_strings_keep_their_type(tmp_path):
    n = 200
    captions = [CAPTIONS[i % len(CAPTIONS)] + str(i) * (i % 3) for i in range(n)]
    images = blobs(n)
    ds = Dataset.write(tmp_path / "ds", {"caption": captions, "image": images, "label": np.arange(n)},
                       shard_records=64)
    assert [(f.name, f.kind) for f in ds.fields] == [("caption", "string"), ("image", "bytes"), ("label", "fixed")]
    manifest = json.loads((tmp_path / "ds" / "dataset.json").read_text())
    assert manifest["version"] == 3
    for i in (0, 1, 2, 63, 64, 150, n - 1):
        sample = ds[i]
        assert type(sample["caption"]) is str and sample["caption"] == captions[i]
        assert type(sample["image"]) is bytes and sample["image"] == images[i]
    batch = ds[[5, 0, 199, 64]]
    assert batch["caption"] == [captions[k] for k in (5, 0, 199, 64)]
    assert batch["image"] == [images[k] for k in (5, 0, 199, 64)]
    assert ds[10:13]["caption"] == captions[10:13]
    assert "caption: string" in repr(ds) and "image: bytes" in repr(ds)


def test_a_loader_gives_strings_as_a_list_and_bytes_as_values_and_offsets(tmp_path):
    n = 300
    captions = [CAPTIONS[i % len(CAPTIONS)] + f"#{i}" for i in range(n)]
    images = blobs(n, seed=1)
    ds = Dataset.write(tmp_path / "ds", {"caption": captions, "image": images, "id": np.arange(n)},
                       codec={"image": "raw"}, shard_records=100)
    seen = 0
    with DataLoader(ds, batch_size=32, mode=2, seed=3, num_workers=2) as loader:
        for _, batch in zip(range(loader.steps_per_epoch), loader):
            assert set(batch) == {"caption", "image", "image_offsets", "id"}
            ids = batch["id"]
            assert batch["caption"] == [captions[i] for i in ids]
            values, offsets = batch["image"], batch["image_offsets"]
            assert values.dtype == np.uint8 and offsets[0] == 0 and offsets[-1] == values.size
            for k, i in enumerate(ids):
                assert values[offsets[k] : offsets[k + 1]].tobytes() == images[i]
            seen += len(ids)
    assert seen == (n // 32) * 32
    with pytest.raises(ValueError, match="caption.*string field, not ragged"):
        DataLoader(ds, batch_size=8, pad={"caption": 0})


def test_the_reported_inputs_are_written(tmp_path):
    images = blobs(50, seed=2)
    # A list of bytes becomes a numpy "S" array on the way in numpy users often take.
    ds = Dataset.write(tmp_path / "s", {"image": np.array(images[2:], dtype=object)})
    assert ds[0]["image"] == images[2]
    ds = Dataset.write(tmp_path / "u", {"caption": np.array(["ab", "ç", ""])})
    assert ds[:]["caption"] == ["ab", "ç", ""]
    ds = Dataset.write(tmp_path / "S", {"tag": np.array([b"ab", b"c\x00"])})
    assert ds[:]["tag"] == [b"ab", b"c"]  # numpy's own rule: an "S" array drops trailing NULs
    table = pa.table({"caption": CAPTIONS, "image": images[:5]})
    ds = Dataset.write(tmp_path / "arrow", table)
    assert ds[:] == {"caption": CAPTIONS, "image": images[:5]}


def test_a_parquet_file_round_trips_with_its_types(tmp_path):
    n = 1000
    rng = np.random.default_rng(4)
    table = pa.table({
        "id": pa.array(np.arange(n, dtype=np.int64)),
        "score": pa.array(rng.random(n).astype(np.float32)),
        "tokens": pa.array([list(range(i % 17 + 1)) for i in range(n)], type=pa.list_(pa.int32())),
        "image": pa.array(blobs(n, seed=5), type=pa.large_binary()),
        "caption": pa.array([CAPTIONS[i % 5] + str(i) for i in range(n)]),
        "box": pa.array([[i, i + 1, i + 2, i + 3] for i in range(n)], type=pa.list_(pa.int16(), 4)),
        "split": pa.array(["train" if i % 4 else "val" for i in range(n)]).dictionary_encode(),
    })
    pq.write_table(table, tmp_path / "in.parquet", row_group_size=300)
    source = pq.read_table(tmp_path / "in.parquet")
    ds = Dataset.write(tmp_path / "ds", source, chunk_bytes=64 << 10, shard_records=400)
    kinds = {f.name: (f.kind, f.dtype.str, f.shape) for f in ds.fields}
    assert kinds == {
        "id": ("fixed", "<i8", ()), "score": ("fixed", "<f4", ()), "tokens": ("ragged", "<i4", ()),
        "image": ("bytes", "|u1", ()), "caption": ("string", "|u1", ()), "box": ("fixed", "<i2", (4,)),
        "split": ("string", "|u1", ()),
    }
    got = ds[:]
    expect = table.to_pydict()
    assert got["id"].tolist() == expect["id"]
    np.testing.assert_array_equal(got["score"], np.asarray(expect["score"], dtype=np.float32))
    assert [t.tolist() for t in got["tokens"]] == expect["tokens"]
    assert got["image"] == expect["image"] and got["caption"] == expect["caption"]
    assert got["box"].tolist() == expect["box"] and got["split"] == expect["split"]
    # The same rows from a stream of record batches, and a sliced table.
    reader = pq.ParquetFile(tmp_path / "in.parquet").iter_batches(batch_size=128)
    streamed = Dataset.write(tmp_path / "streamed", reader)
    assert streamed[:]["caption"] == expect["caption"] and len(streamed) == n
    part = Dataset.write(tmp_path / "part", table.slice(333, 100))
    assert part[:]["image"] == expect["image"][333:433]


def test_a_dataframe_is_written_by_its_columns(tmp_path):
    df = pd.DataFrame({
        "x": np.linspace(0, 1, 6),
        "label": np.arange(6, dtype=np.int8),
        "text": ["a", "bb", "", "ccc", "d", "é"],
        "blob": [b"1", b"", b"22", b"3", b"4", b"5"],
        "ids": [[1, 2], [3], [4, 5, 6], [7], [8], [9]],
        "kind": pd.Categorical(["u", "v", "u", "u", "v", "u"]),
    })
    ds = Dataset.write(tmp_path / "df", df)
    got = ds[:]
    np.testing.assert_array_equal(got["x"], df["x"].to_numpy())
    assert got["label"].dtype == np.int8
    assert got["text"] == list(df["text"]) and got["blob"] == list(df["blob"]) and got["kind"] == list(df["kind"])
    assert [v.tolist() for v in got["ids"]] == list(df["ids"])
    with pytest.raises(ValueError, match=r"column 'text' holds a missing value at row 2"):
        Dataset.write(tmp_path / "na", pd.DataFrame({"text": ["a", "b", None]}))


def test_a_hugging_face_dataset_is_written_in_its_order(tmp_path):
    datasets = pytest.importorskip("datasets")
    hf = datasets.Dataset.from_dict({
        "text": [f"doc {i} " + "w" * (i % 7) for i in range(500)],
        "label": list(range(500)),
        "input_ids": [list(range(i % 9 + 1)) for i in range(500)],
    })
    # A shuffle keeps the rows and adds an order (an indices mapping): the write follows it.
    shuffled = hf.shuffle(seed=1)
    ds = Dataset.write(tmp_path / "hf", shuffled, dtype={"input_ids": "uint16", "label": "int32"})
    got = ds[:]
    assert got["text"] == shuffled["text"]
    assert got["label"].dtype == np.int32 and got["label"].tolist() == shuffled["label"]
    assert [t.tolist() for t in got["input_ids"]] == shuffled["input_ids"]
    assert {f.name: f.dtype.str for f in ds.fields}["input_ids"] == "<u2"


def test_dtype_casts_and_refuses_values_that_do_not_fit(tmp_path):
    docs = [np.arange(k, dtype=np.int64) * 100 for k in (3, 1, 600)]
    ds = Dataset.write(tmp_path / "ok", {"tokens": docs, "label": np.array([1, 2, 3])},
                       dtype={"tokens": "uint16", "label": np.uint8})
    assert [f.dtype.str for f in ds.fields] == ["<u2", "|u1"]
    assert ds[2]["tokens"].tolist() == docs[2].tolist()
    # The refusal names the sample, from a list of documents, a (values, offsets)
    # pair and a fixed array alike.
    with pytest.raises(ValueError, match="field 'tokens': sample 2: value 70000 does not fit uint16"):
        Dataset.write(tmp_path / "big", {"tokens": [np.array([1]), np.array([2]), np.array([1, 70000])]},
                      dtype={"tokens": "uint16"})
    values, offsets = np.array([1, 2, 3, 4, 70000, 5]), np.array([0, 2, 3, 6])
    with pytest.raises(ValueError, match="field 'tokens': sample 2: value 70000 does not fit uint16"):
        Dataset.write(tmp_path / "pair", {"tokens": (values, offsets)}, dtype={"tokens": "uint16"})
    with pytest.raises(ValueError, match="field 'w': sample 1: value 0.5 does not fit int32"):
        Dataset.write(tmp_path / "frac", {"w": np.array([1.0, 0.5])}, dtype={"w": "int32"})
    with pytest.raises(ValueError, match="does not fit uint8"):
        Dataset.write(tmp_path / "neg", pa.table({"v": [1, -1]}), dtype={"v": "uint8"})
    with pytest.raises(ValueError, match=r"dtype names fields the write does not have: \['nope'\]"):
        Dataset.write(tmp_path / "x", {"a": np.arange(3)}, dtype={"nope": "uint8"})
    with pytest.raises(TypeError, match="field 'c' holds string: dtype= applies to numeric fields"):
        Dataset.write(tmp_path / "x", {"c": ["a"]}, dtype={"c": "uint8"})
    for path in ("big", "frac", "neg", "x"):
        assert not (tmp_path / path / "dataset.json").exists()


def test_bad_values_are_refused_naming_the_field_and_the_sample(tmp_path):
    with pytest.raises(TypeError, match="field 'c': sample 2 is bytes, but sample 0 made it a string field"):
        Dataset.write(tmp_path / "a", {"c": ["x", "y", b"z"]})
    with pytest.raises(ValueError, match="field 'c': sample 1 is not valid text"):
        Dataset.write(tmp_path / "a", {"c": ["x", "\ud800"]})
    with pytest.raises(ValueError, match=r"column 's' holds a null at row 1"):
        Dataset.write(tmp_path / "a", pa.table({"s": pa.array(["a", None])}))
    with pytest.raises(TypeError, match=r"column 'm': Arrow type struct<a: int64> cannot be stored"):
        Dataset.write(tmp_path / "a", pa.table({"m": pa.array([{"a": 1}])}))
    with pytest.raises(TypeError, match=r"column 't': lists of string cannot be stored"):
        Dataset.write(tmp_path / "a", pa.table({"t": pa.array([["a"]])}))
    assert not (tmp_path / "a" / "dataset.json").exists()
    # A value longer than a record is stored (it spans records), not refused.
    too_long = b"x" * zrecord.MAX_RECORD_LEN
    assert Dataset.write(tmp_path / "a", {"b": [b"ok", too_long]})[1]["b"] == too_long


def test_an_append_keeps_the_kinds_and_refuses_others(tmp_path):
    Dataset.write(tmp_path / "ds", {"c": ["a", "b"], "n": np.arange(2)})
    ds = Dataset.write(tmp_path / "ds", pa.table({"c": ["c"], "n": [2]}), mode="append")
    assert ds[:]["c"] == ["a", "b", "c"]
    with pytest.raises(ValueError, match=r"holds fields \[c: string, n: <i8\[\]\], cannot add samples of "
                                                   r"\[c: bytes, n: <i8\[\]\]"):
        Dataset.write(tmp_path / "ds", {"c": [b"d"], "n": np.arange(1)}, mode="append")


def test_typed_fields_and_the_card_travel_through_push_and_pull(tmp_path, s3):
    from _support import BUCKET

    captions = CAPTIONS * 40
    images = blobs(len(captions), seed=9)
    path = tmp_path / "ds"
    Dataset.write(path, {"caption": captions, "image": images}, shard_records=64,
                  metadata={"license": "CC0", "classes": ["a", "b"]}).close()
    Dataset.add_field(path, "score", np.arange(len(captions), dtype=np.float32)).close()
    url = f"s3://{BUCKET}/typed/ds"
    zrecord.push(path, url, storage_options=s3)
    far = Dataset(url, storage_options=s3)
    assert far[17]["caption"] == captions[17] and far[199]["image"] == images[199]
    assert far.metadata == {"classes": ["a", "b"], "license": "CC0"}
    # Python pulls a pushed dataset back, with progress.
    seen = []
    files = zrecord.pull(url, tmp_path / "back", storage_options=s3, progress=lambda d, t: seen.append((d, t)))
    assert files > 0 and seen and seen[-1][0] == seen[-1][1]
    back = Dataset(tmp_path / "back")
    assert back[:]["caption"] == captions and back[:]["image"] == images
    assert back.metadata == far.metadata and back[:]["score"].tolist() == list(range(len(captions)))
    assert zrecord.verify(tmp_path / "back" / "shard-000000" / "caption").ok
    with pytest.raises(FileExistsError, match="not empty"):
        zrecord.pull(url, tmp_path / "back", storage_options=s3)
    with pytest.raises(zrecord.StoreIOError, match="remote.json"):
        zrecord.pull(f"s3://{BUCKET}/typed/none", tmp_path / "none", storage_options=s3)


def test_empty_documents_follow_one_rule(tmp_path):
    # Dataset.write follows zr convert's rule for empty documents: refused, or left out.
    docs = [np.array([1, 2]), np.array([], dtype=np.int64), np.array([3]), np.array([], dtype=np.int64)]
    with pytest.raises(ValueError, match=r"sample 1 is empty.*skip_empty=True"):
        Dataset.write(tmp_path / "refused", {"tokens": docs, "id": np.arange(4)})
    assert not (tmp_path / "refused").exists()
    with pytest.warns(UserWarning, match="2 samples with an empty ragged field left out"):
        ds = Dataset.write(tmp_path / "kept", {"tokens": docs, "id": np.arange(4)}, skip_empty=True)
    assert len(ds) == 2
    assert ds[:]["id"].tolist() == [0, 2]  # whole samples left out, the fields aligned
    assert [t.tolist() for t in ds[:]["tokens"]] == [[1, 2], [3]]
    with pytest.raises(TypeError, match="skip_empty"):
        Dataset.write(tmp_path / "one", np.zeros((3, 2)), skip_empty=True)
