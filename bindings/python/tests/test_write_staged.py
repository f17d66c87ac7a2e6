"""Dataset.write is all or nothing: its blocks are staged and committed once, so a write that
stops half-way adds nothing, and running it again does not duplicate part of it."""

import numpy as np
import pytest

import zrecord
from zrecord import Dataset, Zrecord


def data(n=400, seed=0):
    rng = np.random.default_rng(seed)
    return rng.integers(0, 9, (n, 1024), dtype=np.uint8)


class Stop(Exception):
    pass


@pytest.mark.parametrize("error", [Stop, KeyboardInterrupt])
def test_a_write_interrupted_after_some_blocks_adds_nothing(tmp_path, error):
    path = tmp_path / "d"
    first = data(100, seed=1)
    Dataset.write(path, first).close()  # an existing dataset the second write appends to
    calls = []

    def progress(done, total):
        calls.append(done)
        if len(calls) == 3:  # the first two blocks are written by now
            raise error("stop")

    with pytest.raises(error):
        Dataset.write(path, data(), chunk_bytes=64 * 1024, progress=progress)
    assert calls[-1] > 0
    with Dataset(path) as d:
        assert len(d) == 100, "the interrupted write added nothing"
        np.testing.assert_array_equal(d[np.arange(100)], first)
    # Again, to the end: exactly the samples of one write follow the first dataset.
    with Dataset.write(path, data(), chunk_bytes=64 * 1024) as d:
        assert len(d) == 500
        np.testing.assert_array_equal(d[np.arange(100, 500)], data())
        assert zrecord.verify(path).ok


def test_staged_records_are_invisible_until_commit_and_discard_forgets_them(tmp_path):
    rows = data(50)
    with Zrecord(tmp_path / "s") as z:
        assert z.stage(rows, 50, 1024) == 0
        assert z.stage(rows, 50, 1024) == 50
        assert len(z) == 0
        with Zrecord(tmp_path / "s", read_only=True) as other:
            assert len(other) == 0
        z.commit()
        assert len(z) == 100
        z.stage(rows, 50, 1024)
        z.discard()
        assert len(z) == 100
        z.stage(rows[:10], 10, 1024)
    # Closed with records staged: they are gone, the committed ones are there.
    with Zrecord(tmp_path / "s") as z:
        assert len(z) == 100
        out = np.empty((50, 1024), np.uint8)
        z.gather(np.arange(50, 100), out, 1024)
        np.testing.assert_array_equal(out, rows)


def test_delete_and_compact_refuse_while_records_are_staged(tmp_path):
    with Zrecord(tmp_path / "s") as z:
        z.append(data(10), 10, 1024)
        z.stage(data(10), 10, 1024)
        with pytest.raises(ValueError, match="staged"):
            z.delete([0])
        with pytest.raises(ValueError, match="staged"):
            z.compact()
        z.commit()
        z.delete([0])
        assert len(z) == 19
