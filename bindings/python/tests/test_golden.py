"""Golden stores written by loaderx 0.5.4 (tests/golden/loaderx-0.5.4), read by zrecord.

These need no loaderx installed and never skip: the stores are checked in.
"""

import numpy as np
import pytest

import zrecord

from _support import GOLDEN, rebuild_golden


@pytest.mark.parametrize("name", ["raw", "flate", "compacted"])
def test_golden_datasets(tmp_path, name):
    store = rebuild_golden(name, tmp_path / name)
    expected = np.load(GOLDEN / name / "expected.npy")
    with zrecord.Dataset(store) as d:
        assert len(d) == len(expected)
        np.testing.assert_array_equal(d[np.arange(len(d))], expected)


def test_golden_ragged(tmp_path):
    store = rebuild_golden("ragged", tmp_path / "ragged")
    src = np.load(GOLDEN / "ragged" / "expected.npy")
    lens = np.load(GOLDEN / "ragged" / "lengths.npy")
    with zrecord.Zrecord(store) as z:
        np.testing.assert_array_equal(z.lengths(np.arange(len(lens))), lens)
        offs = np.concatenate([[0], np.cumsum(lens)[:-1]]).astype(np.uint64)
        dst = np.zeros(int(lens.sum()), np.uint8)
        z.gather_var(np.arange(len(lens)), dst, offs)
        np.testing.assert_array_equal(dst, src)
