"""zstd records (tag 2) from Python: opt-in, round trip, the min_savings rule, inspect
counts, and loaderx 0.5.4 refusing a zstd store loudly instead of returning wrong bytes."""

import numpy as np
import pytest

import zrecord
from zrecord import Dataset


def samples(n=24, seed=3):
    """uint8 samples of 3x32x32: even ones half zeros (zstd keeps them), odd ones noise
    (stored raw under any min_savings)."""
    rng = np.random.default_rng(seed)
    data = rng.integers(0, 256, (n, 3, 32, 32), dtype=np.uint8)
    data[::2, :, :16, :] = 0
    return data


def test_dataset_write_zstd_round_trips_and_counts(tmp_path):
    data = samples()
    with Dataset.write(tmp_path / "d", data, codec="zstd") as ds:
        assert ds.codec == "zstd"
        np.testing.assert_array_equal(ds[:], data)
        np.testing.assert_array_equal(ds[[5, 0, 23, 2]], data[[5, 0, 23, 2]])
    ins = zrecord.inspect(tmp_path / "d")
    assert (ins.records, ins.zstd_records, ins.raw_records, ins.flate_records) == (24, 12, 12, 0)
    assert ins.schema.codec == "zstd"
    assert ins.live_bytes < ins.logical_bytes
    # Reopened from schema.json alone, every record passes its checksum and decodes.
    with Dataset(tmp_path / "d") as ds:
        np.testing.assert_array_equal(ds[:], data)
    v = zrecord.verify(tmp_path / "d")
    assert (v.checked, v.bad_count, v.checksummed) == (24, 0, 24)


def test_zrecord_store_codec_zstd_and_min_savings(tmp_path):
    data = samples().reshape(24, -1)
    with zrecord.Zrecord(tmp_path / "s", codec="zstd") as z:
        assert z.codec == "zstd"
        z.append(data, 24, data.shape[1])
    with zrecord.Zrecord(tmp_path / "never", codec="zstd", min_savings=1.0) as z:
        z.append(data, 24, data.shape[1])
    with zrecord.Zrecord(tmp_path / "mixed") as z:
        z.append(data[:12], 12, data.shape[1], codec="zstd")
        z.append(data[12:], 12, data.shape[1], codec="flate")
    assert zrecord.inspect(tmp_path / "s").zstd_records == 12
    assert zrecord.inspect(tmp_path / "never").zstd_records == 0
    ins = zrecord.inspect(tmp_path / "mixed")
    assert (ins.zstd_records, ins.flate_records, ins.raw_records) == (6, 6, 12)
    with zrecord.Zrecord.open_read_only(tmp_path / "mixed") as z:
        out = np.empty_like(data)
        z.gather(np.arange(24), out, data.shape[1])
    np.testing.assert_array_equal(out, data)


def test_unknown_codec_names_list_zstd(tmp_path):
    with pytest.raises(ValueError, match="zstd"):
        zrecord.Zrecord(tmp_path / "s", codec="lz4")
    with pytest.raises(ValueError, match="zstd"):
        Dataset.write(tmp_path / "d", samples(), codec="lz4")


def test_loaderx_refuses_a_zstd_store_loudly(tmp_path, loaderx):
    data = samples()
    Dataset.write(tmp_path / "d", data, codec="zstd").close()
    # Its Dataset refuses the schema's codec by name.
    with pytest.raises(ValueError, match="unknown codec 'zstd'"):
        loaderx.Dataset(tmp_path / "d")
    # Its bare store opens (meta.zr is unchanged), but a gather of a zstd record fails with
    # its decode error (-7) and leaves the destination untouched; raw records still read.
    z = loaderx.Zrecord(tmp_path / "d")
    try:
        n = data[0].nbytes
        out = np.full((1, n), 0xAA, dtype=np.uint8)
        with pytest.raises(RuntimeError) as e:
            z.gather(np.array([0], dtype=np.uint64), out, n)
        assert getattr(e.value, "code", None) == -7, e.value
        assert (out == 0xAA).all()
        z.gather(np.array([1], dtype=np.uint64), out, n)
        np.testing.assert_array_equal(out[0], data[1].reshape(-1))
    finally:
        z.close()
