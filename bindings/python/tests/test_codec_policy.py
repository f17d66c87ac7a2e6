"""min_savings: a record is stored compressed only when DEFLATE saves that much of it."""

import numpy as np
import pytest

import zrecord
from zrecord import Dataset


def partly_compressible(n, zero_fraction, seed=0):
    """uint8 records of 16 KiB, `zero_fraction` of each zeroed, the rest random: DEFLATE
    saves a little less than `zero_fraction`."""
    rng = np.random.default_rng(seed)
    data = rng.integers(0, 256, (n, 16384), dtype=np.uint8)
    data[:, : int(16384 * zero_fraction)] = 0
    return data


def flate_records(path):
    return zrecord.inspect(path).flate_records


def test_default_is_exported_and_used(tmp_path):
    assert zrecord.DEFAULT_MIN_SAVINGS == 0.125
    with zrecord.Zrecord(tmp_path / "s") as z:
        assert z.min_savings == zrecord.DEFAULT_MIN_SAVINGS
    # About 8% saved: raw under the default, compressed under loaderx's rule (0.0).
    data = partly_compressible(20, 0.09)
    Dataset.write(tmp_path / "default", data).close()
    Dataset.write(tmp_path / "any", data, min_savings=0.0).close()
    assert flate_records(tmp_path / "default") == 0
    assert flate_records(tmp_path / "any") == 20
    for p in ("default", "any"):
        with Dataset(tmp_path / p) as ds:
            assert ds.codec == "flate"
            np.testing.assert_array_equal(ds[:], data)


@pytest.mark.parametrize("min_savings, expected", [(0.0, 30), (0.2, 20), (0.5, 10), (1.0, 0)])
def test_threshold_splits_records(tmp_path, min_savings, expected):
    # Three groups of ten records saving about 5%, 35% and 75%.
    data = np.concatenate([partly_compressible(10, f, seed=i) for i, f in enumerate((0.06, 0.36, 0.76))])
    with Dataset.write(tmp_path / "d", data, min_savings=min_savings) as ds:
        np.testing.assert_array_equal(ds[:], data)
    assert flate_records(tmp_path / "d") == expected


def test_append_override_and_store_default(tmp_path):
    data = partly_compressible(4, 0.30)
    with zrecord.Zrecord(tmp_path / "s", min_savings=0.5) as z:
        assert z.min_savings == 0.5
        z.append(data, 4, 16384)  # store default: 30% < 50%, raw
        z.append(data, 4, 16384, min_savings=0.1)  # kept compressed
        z.append(data, 4, 16384, "raw", min_savings=0.0)  # raw codec: raw whatever the policy
        z.append_var(data.reshape(-1), np.arange(4) * 16384, np.full(4, 16384), min_savings=0.0)
        out = np.empty((16, 16384), np.uint8)
        z.gather(np.arange(16), out, 16384)
    np.testing.assert_array_equal(out, np.concatenate([data] * 4))
    ins = zrecord.inspect(tmp_path / "s")
    assert (ins.raw_records, ins.flate_records) == (8, 8)


@pytest.mark.parametrize("bad", [-0.1, 1.5, float("nan")])
def test_bad_min_savings_is_value_error_and_writes_nothing(tmp_path, bad):
    data = partly_compressible(2, 0.5)
    with pytest.raises(ValueError, match="min_savings"):
        Dataset.write(tmp_path / "d", data, min_savings=bad)
    assert not (tmp_path / "d").exists()
    with pytest.raises(ValueError, match="min_savings"):
        zrecord.Zrecord(tmp_path / "z", min_savings=bad)
    with zrecord.Zrecord(tmp_path / "y") as z:
        with pytest.raises(ValueError, match="min_savings"):
            z.append(data, 2, 16384, min_savings=bad)
        assert len(z) == 0
