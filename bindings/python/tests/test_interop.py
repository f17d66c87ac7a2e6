"""Interop with the reference wheel (loaderx 0.5.4) in the same venv, both directions.

Each test closes one side's handle before the other side opens the store: loaderx takes no
locks, so sharing a store between the two while one of them mutates is undefined.

Every test that needs loaderx takes the `loaderx` fixture (conftest.py): without loaderx installed they are
skipped, loudly, and with ZRECORD_REQUIRE_INTEROP=1 (as `make test` runs them) they fail.
The golden stores written by loaderx are read in test_golden.py, which needs no loaderx.
"""

import numpy as np
import pytest

import zrecord

from _support import images

CODECS = ["raw", "flate"]
LOADERX_STATS = ("records", "live_bytes", "chunk_bytes", "reclaimable")


def ragged(seed=0, n=30):
    rng = np.random.default_rng(seed)
    lens = rng.integers(1, 6000, n).astype(np.uint32)
    recs = [np.full(int(k), i, np.uint8) if i % 2 else rng.integers(0, 256, int(k), dtype=np.uint8)
            for i, k in enumerate(lens)]
    offs = np.concatenate([[0], np.cumsum(lens)[:-1]]).astype(np.uint64)
    return recs, np.concatenate(recs), offs, lens


def read_all(store_cls, path, n, item):
    with store_cls(path) as z:
        out = np.empty(n * item, np.uint8)
        z.gather(np.arange(n, dtype=np.uint64), out, item)
        return out


def read_ragged(z, idxs):
    lens = z.lengths(idxs)
    offs = np.concatenate([[0], np.cumsum(lens)[:-1]]).astype(np.uint64)
    dst = np.zeros(int(lens.sum()), np.uint8)
    z.gather_var(np.asarray(idxs, np.uint64), dst, offs)
    return [dst[o : o + n] for o, n in zip(offs, lens)]


# -- Zrecord level ----------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
def test_zrecord_loaderx_writes_zrecord_reads_and_appends(loaderx, tmp_path, codec):
    data = images(40, 1)
    item = data[0].nbytes
    with loaderx.Zrecord(tmp_path / "s", codec=codec) as z:
        z.append(data[:30], 30, item)
        z.sync()
    with zrecord.Zrecord(tmp_path / "s", codec=codec) as z:
        assert len(z) == 30
        out = np.empty((30, *data.shape[1:]), np.uint8)
        z.gather(np.arange(30)[::-1], out, item)
        np.testing.assert_array_equal(out, data[:30][::-1])
        assert z.lengths([0, 29]).tolist() == [item, item]
        assert z.append(data[30:], 10, item) == 30
    # ...and loaderx reads what zrecord appended.
    np.testing.assert_array_equal(read_all(loaderx.Zrecord, tmp_path / "s", 40, item), data.reshape(-1))


@pytest.mark.parametrize("codec", CODECS)
def test_zrecord_zrecord_writes_loaderx_reads_and_appends(loaderx, tmp_path, codec):
    data = images(40, 2)
    item = data[0].nbytes
    with zrecord.Zrecord(tmp_path / "s", codec=codec) as z:
        z.append(data[:25], 25, item)
    with loaderx.Zrecord(tmp_path / "s", codec=codec) as z:
        assert len(z) == 25
        out = np.empty((25, *data.shape[1:]), np.uint8)
        z.gather(np.arange(25, dtype=np.uint64), out, item)
        np.testing.assert_array_equal(out, data[:25])
        z.append(data[25:], 15, item)
        z.sync()
    np.testing.assert_array_equal(read_all(zrecord.Zrecord, tmp_path / "s", 40, item), data.reshape(-1))


@pytest.mark.parametrize("writer,reader", [("loaderx", "zrecord"), ("zrecord", "loaderx")])
def test_ragged_both_ways(loaderx, tmp_path, writer, reader):
    W, R = {"loaderx": loaderx, "zrecord": zrecord}[writer].Zrecord, {"loaderx": loaderx, "zrecord": zrecord}[reader].Zrecord
    recs, src, offs, lens = ragged(3)
    with W(tmp_path / "s") as z:
        z.append_var(src, offs, lens)
        z.sync()
    with R(tmp_path / "s") as z:
        assert len(z) == len(recs)
        np.testing.assert_array_equal(z.lengths(np.arange(len(recs), dtype=np.uint64)), lens)
        pick = [29, 0, 14, 15]
        for got, i in zip(read_ragged(z, pick), pick):
            np.testing.assert_array_equal(got, recs[i])


@pytest.mark.parametrize("writer,reader", [("loaderx", "zrecord"), ("zrecord", "loaderx")])
@pytest.mark.parametrize("codec", CODECS)
def test_after_delete_and_compact_both_ways(loaderx, tmp_path, writer, reader, codec):
    """One side writes, deletes and compacts; the other reads the same records in the
    same order (swap-last order is part of the format's behaviour)."""
    W, R = {"loaderx": loaderx, "zrecord": zrecord}[writer].Zrecord, {"loaderx": loaderx, "zrecord": zrecord}[reader].Zrecord
    data = images(60, 4)
    item = data[0].nbytes
    with W(tmp_path / "s", codec=codec) as z:
        z.append(data, 60, item)
        z.delete(np.array([0, 7, 59, 12, 7, 30], np.uint64))
        z.compact()
        n = len(z)
        mine = np.empty((n, *data.shape[1:]), np.uint8)
        z.gather(np.arange(n, dtype=np.uint64), mine, item)
        stats = z.stats()
    assert n == 55 and stats["reclaimable"] == 0
    with R(tmp_path / "s", codec=codec) as z:
        assert len(z) == 55
        theirs = np.empty_like(mine)
        z.gather(np.arange(55, dtype=np.uint64), theirs, item)
        np.testing.assert_array_equal(theirs, mine)
        # loaderx's four keys agree; zrecord adds `unchecked` when the store keeps checksums.
        theirs_stats = z.stats()
        assert {k: theirs_stats[k] for k in LOADERX_STATS} == {k: stats[k] for k in LOADERX_STATS}


def test_same_delete_sequence_same_order(loaderx, tmp_path):
    """Both implementations apply a delete batch identically."""
    data = images(30, 8)
    item = data[0].nbytes
    results = []
    for lib, name in ((loaderx, "a"), (zrecord, "b")):
        with lib.Zrecord(tmp_path / name) as z:
            z.append(data, 30, item)
            z.delete(np.array([3, 29, 0, 3, 17], np.uint64))
            z.delete(np.array([1], np.uint64))
            out = np.empty((24, *data.shape[1:]), np.uint8)
            z.gather(np.arange(24, dtype=np.uint64), out, item)
            results.append(out)
    np.testing.assert_array_equal(results[0], results[1])


def test_zrecord_compacts_a_loaderx_store_with_deletes(loaderx, tmp_path):
    data = images(50, 5)
    item = data[0].nbytes
    with loaderx.Zrecord(tmp_path / "s") as z:
        z.append(data, 50, item)
        z.delete(np.arange(0, 50, 4, dtype=np.uint64))
        z.sync()
    with zrecord.Zrecord(tmp_path / "s") as z:
        n = len(z)
        before = np.empty((n, *data.shape[1:]), np.uint8)
        z.gather(np.arange(n), before, item)
        z.compact()
    with loaderx.Zrecord(tmp_path / "s") as z:
        after = np.empty_like(before)
        z.gather(np.arange(n, dtype=np.uint64), after, item)
        np.testing.assert_array_equal(before, after)
        assert z.stats()["reclaimable"] == 0


# -- Dataset level ----------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
def test_dataset_loaderx_writes_zrecord_reads_and_appends(loaderx, tmp_path, codec):
    data = np.random.default_rng(0).random((30, 5, 7)).astype(np.float32)
    loaderx.Dataset.write(tmp_path / "d", data[:20], codec=codec).close()
    with zrecord.Dataset(tmp_path / "d") as d:
        assert (d.dtype, d.shape, d.codec, len(d)) == (np.float32, (5, 7), codec, 20)
        np.testing.assert_array_equal(d[np.arange(20)], data[:20])
        np.testing.assert_array_equal(d[-1], data[19])
    schema_before = (tmp_path / "d" / "schema.json").read_bytes()
    zrecord.Dataset.write(tmp_path / "d", data[20:]).close()
    assert (tmp_path / "d" / "schema.json").read_bytes() == schema_before
    ref = loaderx.Dataset(tmp_path / "d")
    try:
        np.testing.assert_array_equal(ref[np.arange(30)], data)
    finally:
        ref.close()


@pytest.mark.parametrize("codec", CODECS)
def test_dataset_zrecord_writes_loaderx_reads_and_appends(loaderx, tmp_path, codec):
    labels = np.arange(50, dtype=np.int32)
    zrecord.Dataset.write(tmp_path / "l", labels[:35], codec=codec).close()
    ref = loaderx.Dataset(tmp_path / "l")
    try:
        assert (ref.dtype, ref.shape, ref.codec, len(ref)) == (np.int32, (), codec, 35)
        np.testing.assert_array_equal(ref[np.arange(35)], labels[:35])
    finally:
        ref.close()
    loaderx.Dataset.write(tmp_path / "l", labels[35:]).close()
    with zrecord.Dataset(tmp_path / "l") as d:
        np.testing.assert_array_equal(d[np.arange(50)], labels)


def test_schema_files_identical(loaderx, tmp_path):
    for dtype, shape in ((np.uint8, (4, 3)), (np.float64, ()), (">i2", (2,))):
        arr = np.zeros((3, *shape), dtype)
        for lib, name in ((loaderx, "a"), (zrecord, "b")):
            lib.Dataset.write(tmp_path / name / str(np.dtype(dtype)), arr, codec="raw").close()
        a = (tmp_path / "a" / str(np.dtype(dtype)) / "schema.json").read_bytes()
        b = (tmp_path / "b" / str(np.dtype(dtype)) / "schema.json").read_bytes()
        assert a == b


@pytest.mark.parametrize("writer,reader", [("loaderx", "zrecord"), ("zrecord", "loaderx")])
def test_dataset_after_delete_and_compact(loaderx, tmp_path, writer, reader):
    W, R = {"loaderx": loaderx, "zrecord": zrecord}[writer].Dataset, {"loaderx": loaderx, "zrecord": zrecord}[reader].Dataset
    data = images(40, 6)
    ds = W.write(tmp_path / "d", data)
    ds.delete(np.array([0, 5, 39, 5], np.uint64))
    ds.compact()
    mine = ds[np.arange(len(ds))]
    ds.close()
    other = R(tmp_path / "d")
    try:
        assert len(other) == 37
        np.testing.assert_array_equal(other[np.arange(37)], mine)
    finally:
        other.close()


def test_import_zrecord_as_loaderx(tmp_path):
    """loaderx 0.5.4 code, unchanged but for the import (needs no loaderx installed)."""
    import zrecord as loaderx  # the point of the test

    data = np.arange(64 * 12, dtype=np.uint8).reshape(64, 12)
    labels = np.arange(64)
    loaderx.Dataset.write(tmp_path / "train_data.zr", data)
    loaderx.Dataset.write(tmp_path / "train_label.zr", labels)
    dataset = loaderx.Dataset(tmp_path / "train_data.zr")
    labelset = loaderx.Dataset(tmp_path / "train_label.zr")
    loader = loaderx.DataLoader(dataset, labelset, batch_size=16, transform=lambda x: x)
    for i, batch in enumerate(loader):  # noqa: B007 (the last batch is checked below)
        if i >= 8:
            break
    assert batch["data"].shape == (16, 12) and batch["label"].shape == (16,)
    loader.close()
    z = loaderx.Zrecord(tmp_path / "raw.zr", codec="raw")
    with pytest.raises(loaderx.ZrecordError) as e:  # an empty store has no record 0
        z.gather(np.array([0], np.uint64), np.empty(4, np.uint8), 4)
    assert e.value.code == -3
    z.close()
    dataset.close()
    labelset.close()



def test_structured_dtype_loaderx_drops_names_zrecord_refuses(loaderx, tmp_path):
    """loaderx 0.5.4 writes a structured dtype as its dtype.str, "|V8", and reads it back
    without fields; schema.json has no way to name them, so zrecord refuses such an array
    rather than write a schema loaderx would read differently from what was meant."""
    dt = np.dtype([("a", "<i4"), ("b", "<f4")])
    arr = np.zeros(4, dt)
    ref = loaderx.Dataset.write(tmp_path / "lx", arr)
    assert ref.dtype == np.dtype("V8") and ref.dtype.names is None
    ref.close()
    with pytest.raises(TypeError, match="field names"):
        zrecord.Dataset.write(tmp_path / "zr", arr)
    # The bytes, as plain void, are written exactly as loaderx writes them.
    zrecord.Dataset.write(tmp_path / "zr", arr.view(np.void)).close()
    assert (tmp_path / "zr" / "schema.json").read_bytes() == (tmp_path / "lx" / "schema.json").read_bytes()
    with zrecord.Dataset(tmp_path / "lx") as d:
        assert d.dtype == np.dtype("V8")
