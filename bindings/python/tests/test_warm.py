"""DataLoader(warm=...): the stores are read into the page cache in the background when the
workers start; warming never changes what the batches hold."""

import time

import numpy as np
import pytest

from zrecord import DataLoader, Dataset


@pytest.fixture
def pair(tmp_path):
    rng = np.random.default_rng(3)
    data = rng.integers(0, 40, (3000, 2048), dtype=np.uint16)  # token-like: DEFLATE shrinks it
    with Dataset.write(tmp_path / "d", data, codec="flate") as d, Dataset.write(
        tmp_path / "l", np.arange(3000, dtype=np.int64)
    ) as l:
        yield d, l, data


def take(loader, n):
    out = []
    for _ in range(n):
        b = next(loader)
        out.append((b["data"].copy(), b["label"].copy()))
    return out


def test_warming_reads_every_store_and_changes_no_batch(pair):
    d, l, data = pair
    with DataLoader(d, l, num_workers=2, batch_size=32, mode=2, seed=5, warm=True) as warm, DataLoader(
        d, l, num_workers=2, batch_size=32, mode=2, seed=5, warm=False
    ) as cold:
        assert warm.warm_progress is None  # nothing starts before the first next()
        got, want = take(warm, 20), take(cold, 20)
        for (gd, gl), (wd, wl) in zip(got, want):
            np.testing.assert_array_equal(gd, wd)
            np.testing.assert_array_equal(gl, wl)
            np.testing.assert_array_equal(gd, data[gl])
        done, total = warm.warm_progress
        # Both stores: at least every stored byte of the data, and the labels' 24,000.
        assert total >= d.store.stats()["chunk_bytes"] + 3000 * 8
        assert 0 <= done <= total
        # Warming runs to its end: every byte it set out to read is read.
        end = time.monotonic() + 60
        while warm.warm_progress[0] < total:
            assert time.monotonic() < end, f"warming stalled at {warm.warm_progress}"
            time.sleep(0.01)
        assert warm.warm_progress == (total, total)
        assert cold.warm_progress is None


def test_warm_by_default_for_stores_that_fit_in_memory(pair):
    d, l, _ = pair
    with DataLoader(d, l, num_workers=1, batch_size=32) as loader:
        next(loader)
        assert loader.warm_progress is not None


def test_a_loader_without_workers_does_not_warm(pair):
    d, l, _ = pair
    with DataLoader(d, l, num_workers=0, batch_size=32, warm=True) as loader:
        next(loader)
        assert loader.warm_progress is None


@pytest.mark.parametrize("bad", ["yes", 1, 0.5])
def test_warm_is_none_true_or_false(pair, bad):
    d, l, _ = pair
    with pytest.raises(TypeError, match="warm must be None, True or False"):
        DataLoader(d, l, warm=bad)


def test_close_joins_the_warming_thread(pair, tmp_path):
    d, l, _ = pair
    loader = DataLoader(d, l, num_workers=1, batch_size=32, warm=True)
    next(loader)
    loader.close()
    assert loader._pipeline.threads_alive == 0
    d.close()
    l.close()
    # No thread holds the stores any more: a delete can have them to itself.
    with Dataset(tmp_path / "d") as again:
        again.delete([0])
        assert len(again) == 2999
