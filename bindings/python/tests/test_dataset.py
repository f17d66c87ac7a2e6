"""zrecord.Dataset: loaderx's numpy view of a store."""

import json

import numpy as np
import pytest

import zrecord
from zrecord import Dataset

from _support import images

LOADERX_SCHEMA = (
    '{\n  "format": "loaderx-zrecord",\n  "version": 1,\n  "dtype": "|u1",\n'
    '  "shape": [\n    3,\n    8,\n    8\n  ],\n  "codec": "flate"\n}\n'
)


@pytest.fixture
def ds(tmp_path):
    data = images(64)
    with Dataset.write(tmp_path / "d", data) as d:
        yield d, data


def test_write_returns_open_dataset_with_attributes(tmp_path):
    data = images(10)
    d = Dataset.write(str(tmp_path / "d"), data, codec="raw")
    assert d.path == tmp_path / "d"
    assert d.dtype == np.uint8 and d.shape == (3, 8, 8) and d.codec == "raw"
    assert len(d) == 10
    d.close()


def test_schema_bytes_identical_to_loaderx(tmp_path):
    Dataset.write(tmp_path / "d", images(3)).close()
    assert (tmp_path / "d" / "schema.json").read_text() == LOADERX_SCHEMA
    Dataset.write(tmp_path / "s", np.arange(5, dtype=np.float32), codec="raw").close()
    schema = json.loads((tmp_path / "s" / "schema.json").read_text())
    assert schema == {"format": "loaderx-zrecord", "version": 1, "dtype": "<f4", "shape": [], "codec": "raw"}


def test_int_and_negative_indexing(ds):
    d, data = ds
    np.testing.assert_array_equal(d[0], data[0])
    np.testing.assert_array_equal(d[-1], data[-1])
    np.testing.assert_array_equal(d[np.int64(-64)], data[0])
    assert d[5].shape == (3, 8, 8)
    with pytest.raises(zrecord.IndexOutOfRangeError) as e:
        d[64]
    assert e.value.code == -3 and isinstance(e.value, IndexError)
    with pytest.raises(zrecord.IndexOutOfRangeError):
        d[-65]


def test_batch_indexing_forms(ds):
    d, data = ds
    np.testing.assert_array_equal(d[2:10:3], data[2:10:3])
    np.testing.assert_array_equal(d[::-1], data[::-1])
    np.testing.assert_array_equal(d[60:100], data[60:])
    assert d[5:5].shape == (0, 3, 8, 8)
    np.testing.assert_array_equal(d[[3, 1, 3]], data[[3, 1, 3]])
    np.testing.assert_array_equal(d[np.array([7, 0], np.uint64)], data[[7, 0]])
    np.testing.assert_array_equal(d[(1, 2)], data[1, 2])  # numpy: a tuple indexes axes
    mask = np.arange(64) % 3 == 0
    np.testing.assert_array_equal(d[mask], data[mask])
    np.testing.assert_array_equal(d[np.zeros(64, bool)], data[:0])
    with pytest.raises(IndexError):
        d[np.ones(10, bool)]
    np.testing.assert_array_equal(d[[0, -1]], data[[0, -1]])
    with pytest.raises(zrecord.IndexOutOfRangeError):
        d[[0, 64]]
    with pytest.raises(IndexError):
        d[[0.5]]


def test_getitems_fills_one_fresh_array(ds):
    d, data = ds
    out = d.__getitems__([4, 2])
    assert out.shape == (2, 3, 8, 8) and out.flags.c_contiguous and out.flags.owndata
    np.testing.assert_array_equal(out, data[[4, 2]])


def test_scalars(tmp_path):
    labels = np.arange(100, dtype=np.int64) * 3
    with Dataset.write(tmp_path / "l", labels) as d:
        assert d.shape == () and len(d) == 100
        assert d[7] == 21 and d[7].shape == ()
        np.testing.assert_array_equal(d[[1, 2]], [3, 6])
        np.testing.assert_array_equal(list(d)[:3], [0, 3, 6])


@pytest.mark.parametrize("dtype", ["<f8", ">i4", "<c16", "U3", "S5", "M8[s]", "?"])
def test_dtypes_roundtrip(tmp_path, dtype):
    raw = np.arange(24).reshape(6, 4)
    arr = raw.astype(str).astype(dtype) if dtype[0] in "US" else raw.astype(dtype)
    with Dataset.write(tmp_path / "d", arr) as d:
        assert d.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(d[np.arange(6)], arr)


def test_structured_dtype_is_refused_not_stripped_of_its_names(tmp_path):
    # schema.json keeps dtype.str (loaderx 0.5.4's choice), which names a structured dtype
    # only by its size ("|V8"): writing one would read back without its fields. It is
    # refused before anything is written; its bytes can still be stored as plain void.
    dt = np.dtype([("a", "<i4"), ("b", "<f4")])
    arr = np.zeros(5, dt)
    arr["a"] = np.arange(5)
    arr["b"] = 0.5
    with pytest.raises(TypeError, match="field names"):
        Dataset.write(tmp_path / "d", arr)
    assert not (tmp_path / "d").exists()
    with pytest.raises(TypeError, match="field names"):
        Dataset.write(tmp_path / "n", np.zeros((4, 2), dt))
    with Dataset.write(tmp_path / "v", arr.view(np.void)) as d:
        assert d.dtype == np.dtype("V8")
        assert d[[4, 0]].view(dt).tolist() == arr[[4, 0]].tolist()


def test_append_to_existing_dataset(tmp_path):
    a, b = images(10, 1), images(7, 2)
    Dataset.write(tmp_path / "d", a, codec="raw").close()
    with Dataset.write(tmp_path / "d", b, codec="flate") as d:
        assert len(d) == 17
        assert d.codec == "raw"  # the existing schema wins
        np.testing.assert_array_equal(d[np.arange(17)], np.concatenate([a, b]))
    assert (tmp_path / "d" / "schema.json").read_text().count('"raw"') == 1


def test_append_mismatch(tmp_path):
    Dataset.write(tmp_path / "d", images(3)).close()
    with pytest.raises(ValueError):
        Dataset.write(tmp_path / "d", images(3).astype(np.int16))
    with pytest.raises(ValueError):
        Dataset.write(tmp_path / "d", images(3, shape=(3, 8, 9)))
    with Dataset(tmp_path / "d") as d:
        assert len(d) == 3


def test_write_rejects(tmp_path):
    with pytest.raises(ValueError):
        Dataset.write(tmp_path / "a", np.zeros((2, zrecord.MAX_RECORD_LEN + 1), np.uint8))
    with pytest.raises(ValueError):
        Dataset.write(tmp_path / "b", np.float32(3))
    with pytest.raises(ValueError):
        Dataset.write(tmp_path / "c", np.zeros((2, 2)), codec="lz4")
    with pytest.raises(TypeError):
        Dataset.write(tmp_path / "d", np.array([object(), object()]))
    Dataset.write(tmp_path / "e", np.zeros((2, zrecord.MAX_RECORD_LEN), np.uint8), codec="raw").close()


def test_write_streams_in_chunks(tmp_path):
    data = images(100)
    with Dataset.write(tmp_path / "d", data, chunk_bytes=1000) as d:
        np.testing.assert_array_equal(d[np.arange(100)], data)


def test_write_from_mmap_npy_in_bounded_memory(tmp_path):
    """A memory-mapped .npy is streamed: the process never holds it whole."""
    import subprocess
    import sys
    import textwrap

    n, shape = 4096, (64, 256)  # 64 MiB of float32
    npy = tmp_path / "big.npy"
    mm = np.lib.format.open_memmap(npy, mode="w+", dtype=np.float32, shape=(n, *shape))
    for i in range(0, n, 512):
        mm[i : i + 512] = np.arange(i, i + 512, dtype=np.float32)[:, None, None]
    del mm
    script = textwrap.dedent(
        f"""
        import resource, numpy as np, zrecord
        arr = np.load({str(npy)!r}, mmap_mode="r")
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        ds = zrecord.Dataset.write({str(tmp_path / "d")!r}, arr, chunk_bytes=4 << 20)
        grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
        assert len(ds) == {n}
        assert float(ds[-1][0, 0]) == {n - 1}
        print(grown)
        """
    )
    out = subprocess.run([sys.executable, "-c", script], check=True, capture_output=True, text=True)
    grown_kib = int(out.stdout.strip())
    # Materialising the array would add its 64 MiB to the peak; streaming in 4 MiB blocks
    # adds a few blocks' worth (mapped pages are dropped as the read moves on).
    assert grown_kib < 40 * 1024, grown_kib


def test_open_errors(tmp_path):
    with pytest.raises(FileNotFoundError):
        Dataset(tmp_path / "missing")
    (tmp_path / "plain").mkdir()
    with pytest.raises(FileNotFoundError):
        Dataset(tmp_path / "plain")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "schema.json").write_text('{"format": "something-else"}')
    with pytest.raises(ValueError):
        Dataset(tmp_path / "other")
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "schema.json").write_text("{not json")
    with pytest.raises(ValueError):
        Dataset(tmp_path / "broken")


def test_delete_then_append(tmp_path):
    data = images(20, 4)
    with Dataset.write(tmp_path / "d", data[:10]) as d:
        d.delete([0, 9, 4])
        assert len(d) == 7
        d.delete(np.arange(7) == 6)  # a bool mask works here too
        assert len(d) == 6
    with Dataset.write(tmp_path / "d", data[10:]) as d:
        assert len(d) == 16
        got = {s.tobytes() for s in d[np.arange(16)]}
        kept = {data[i].tobytes() for i in range(10) if i not in (0, 9, 4)}
        assert len(kept & got) == 6 and {data[i].tobytes() for i in range(10, 20)} <= got


def test_compact_then_reopen(tmp_path):
    data = images(50, 6)
    with Dataset.write(tmp_path / "d", data) as d:
        d.delete(np.arange(0, 50, 3))
        assert d.stats()["reclaimable"] > 0
        d.compact()
        s = d.stats()
        assert s["reclaimable"] == 0 and s["records"] == len(d) == 33
        snapshot = d[np.arange(33)]
    with Dataset(tmp_path / "d") as d:
        np.testing.assert_array_equal(d[np.arange(33)], snapshot)


def test_close_and_context_manager(tmp_path):
    d = Dataset.write(tmp_path / "d", images(4))
    with d:
        assert len(d) == 4
    d.close()  # idempotent
    with pytest.raises(zrecord.StoreClosedError):
        d[0]
    with pytest.raises(zrecord.StoreClosedError):
        len(d)
    with pytest.raises(zrecord.StoreClosedError):
        d.stats()
    assert "closed" in repr(d)


def test_pickle_reopens_by_path(tmp_path):
    import pickle

    with Dataset.write(tmp_path / "d", images(4)) as d:
        e = pickle.loads(pickle.dumps(d))
        with e:
            np.testing.assert_array_equal(e[[1]], d[[1]])
