"""The `zr` CLI against the reference wheel, loaderx 0.5.4, in both directions.

Every test takes the `loaderx` fixture (conftest.py): skipped, with its reason, where loaderx
is not installed, and an error under ZRECORD_REQUIRE_INTEROP=1 (as `make test` runs them).
"""

import json
import subprocess

import numpy as np
import pytest


def run(zr, *args, ok=True):
    p = subprocess.run([zr, *map(str, args)], capture_output=True, text=True)
    if ok and p.returncode != 0:
        raise AssertionError(f"zr {args} failed ({p.returncode}): {p.stderr}")
    return p


def images(n, seed=0):
    """Smooth image-like uint8 samples plus a little noise: mildly compressible."""
    rng = np.random.default_rng(seed)
    base = np.linspace(0, 255, 3 * 32 * 32).reshape(3, 32, 32)
    return (base[None] + rng.integers(0, 8, (n, 3, 32, 32))).astype(np.uint8)


def read_all(ds):
    return ds[np.arange(len(ds))]


@pytest.mark.parametrize("codec", ["flate", "raw"])
def test_loaderx_store_exports_identically(loaderx, zr, tmp_path, codec):
    data = images(300)
    ds = loaderx.Dataset.write(tmp_path / "lx", data, codec=codec)
    expected = read_all(ds)
    ds.close()
    run(zr, "export", tmp_path / "lx", tmp_path / "out.npy")
    got = np.load(tmp_path / "out.npy")
    assert got.dtype == data.dtype and got.shape == data.shape
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(got, data)
    assert "0 bad" in run(zr, "verify", tmp_path / "lx").stdout


@pytest.mark.parametrize("codec", ["flate", "raw"])
def test_loaderx_store_after_delete_and_compact(loaderx, zr, tmp_path, codec):
    ds = loaderx.Dataset.write(tmp_path / "lx", images(200, 1), codec=codec)
    ds.delete([0, 5, 199, 50, 5, 120])
    ds.compact()
    expected = read_all(ds)
    stats = ds.stats()
    ds.close()
    run(zr, "export", tmp_path / "lx", tmp_path / "out.npy")
    np.testing.assert_array_equal(np.load(tmp_path / "out.npy"), expected)
    ours = json.loads(run(zr, "stats", tmp_path / "lx").stdout)
    assert ours == stats


@pytest.mark.parametrize("codec", ["flate", "raw"])
def test_zr_convert_is_read_by_loaderx(loaderx, zr, tmp_path, codec):
    data = images(257, 2)
    np.save(tmp_path / "in.npy", data)
    run(zr, "convert", tmp_path / "in.npy", tmp_path / "zr", "--codec", codec)
    ref = loaderx.Dataset.write(tmp_path / "lx", data, codec=codec)
    ref.close()
    assert (tmp_path / "zr" / "schema.json").read_bytes() == (tmp_path / "lx" / "schema.json").read_bytes()
    ds = loaderx.Dataset(tmp_path / "zr")
    assert ds.dtype == data.dtype and ds.shape == data.shape[1:] and ds.codec == codec
    np.testing.assert_array_equal(read_all(ds), data)
    idx = np.random.default_rng(0).integers(0, len(data), 64)
    np.testing.assert_array_equal(ds[idx], data[idx])
    # loaderx appends to our store, and we read the result.
    ds.close()
    more = images(10, 3)
    loaderx.Dataset.write(tmp_path / "zr", more).close()
    run(zr, "export", tmp_path / "zr", tmp_path / "out.npy")
    np.testing.assert_array_equal(np.load(tmp_path / "out.npy"), np.concatenate([data, more]))


def test_zr_delete_and_compact_read_by_loaderx(loaderx, zr, tmp_path):
    data = images(100, 4)
    np.save(tmp_path / "in.npy", data)
    run(zr, "convert", tmp_path / "in.npy", tmp_path / "zr")
    run(zr, "delete", tmp_path / "zr", 3, 99, 3, 40)
    run(zr, "compact", tmp_path / "zr")
    # The same deletes through loaderx give the same order (swap-last, descending).
    ref = loaderx.Dataset.write(tmp_path / "lx", data)
    ref.delete([3, 99, 3, 40])
    expected = read_all(ref)
    ref.close()
    ds = loaderx.Dataset(tmp_path / "zr")
    np.testing.assert_array_equal(read_all(ds), expected)
    assert ds.stats()["reclaimable"] == 0


def test_scalar_labels_round_trip(loaderx, zr, tmp_path):
    labels = np.arange(1000, dtype=np.int64) * 3 - 7
    np.save(tmp_path / "l.npy", labels)
    run(zr, "convert", tmp_path / "l.npy", tmp_path / "zr")
    ds = loaderx.Dataset(tmp_path / "zr")
    assert ds.shape == ()
    np.testing.assert_array_equal(read_all(ds), labels)
    lx = loaderx.Dataset.write(tmp_path / "lx", labels)
    lx.close()
    run(zr, "export", tmp_path / "lx", tmp_path / "out.npy")
    np.testing.assert_array_equal(np.load(tmp_path / "out.npy"), labels)


def test_ragged_loaderx_records_verify_and_inspect(loaderx, zr, tmp_path):
    rng = np.random.default_rng(5)
    lens = rng.integers(1, 5000, 50).astype(np.uint32)
    src = np.concatenate([np.full(n, i % 7, np.uint8) if i % 2 else rng.integers(0, 256, n, dtype=np.uint8) for i, n in enumerate(lens)])
    offs = np.concatenate([[0], np.cumsum(lens)[:-1]]).astype(np.uint64)
    z = loaderx.Zrecord(tmp_path / "lx")
    z.append_var(src, offs, lens)
    z.close()
    assert "50 records checked, 0 bad" in run(zr, "verify", tmp_path / "lx").stdout
    report = json.loads(run(zr, "inspect", "--json", tmp_path / "lx").stdout)
    assert report["records"] == 50
    assert report["raw_records"] + report["flate_records"] == 50
    assert report["logical_bytes"] == int(lens.sum())
    assert report["schema"] is None


def test_incompatible_append_and_bad_store_fail_cleanly(loaderx, zr, tmp_path):
    np.save(tmp_path / "a.npy", images(5))
    np.save(tmp_path / "b.npy", np.zeros((5, 4), np.float32))
    run(zr, "convert", tmp_path / "a.npy", tmp_path / "zr")
    p = run(zr, "convert", tmp_path / "b.npy", tmp_path / "zr", ok=False)
    assert p.returncode != 0 and "cannot append" in p.stderr and len(p.stderr.splitlines()) == 1
    assert len(loaderx.Dataset(tmp_path / "zr")) == 5
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "meta.zr").write_bytes(b"XXXX" + bytes(12))
    p = run(zr, "inspect", tmp_path / "junk", ok=False)
    assert p.returncode != 0 and "not a zrecord store" in p.stderr
    p = run(zr, "export", tmp_path / "nowhere", tmp_path / "o.npy", ok=False)
    assert p.returncode != 0 and "Traceback" not in p.stderr
