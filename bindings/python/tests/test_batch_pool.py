"""Dataset batches come from a reuse pool (the native one the DataLoader uses too), but never
overwrite an array someone holds."""

import threading

import numpy as np
import pytest

import zrecord
from zrecord import Dataset

SHAPE = (3, 64, 64)  # 12 KiB samples: a batch of 64 is 768 KiB, large enough to be pooled
KEEP = 16  # buffers a pool keeps at most (zrecord::BufferPool)


@pytest.fixture
def ds(tmp_path):
    rng = np.random.default_rng(0)
    data = rng.integers(0, 256, (600, *SHAPE), dtype=np.uint8)
    with Dataset.write(tmp_path / "d", data, codec="raw") as d:
        yield d, data


def batches(n=64, start=0):
    return np.arange(start, start + n)


def test_released_batch_memory_is_reused(ds):
    d, data = ds
    a = d.__getitems__(batches())
    first = a.ctypes.data
    del a
    b = d.__getitems__(batches(start=64))
    assert b.ctypes.data == first, "the freed batch's memory was not reused"
    np.testing.assert_array_equal(b, data[64:128])


@pytest.mark.parametrize(
    "hold",
    [
        lambda a: a,  # the array itself
        lambda a: a[5],  # a view (holds .base)
        lambda a: a.reshape(-1),  # another view
        lambda a: memoryview(a),  # a buffer export
        lambda a: [a],  # a container
    ],
)
def test_held_batch_is_never_overwritten(ds, hold):
    d, data = ds
    held = hold(d.__getitems__(batches()))
    snapshot = np.array(held, copy=True)
    for k in range(1, 9):  # more batches than the pool has arrays
        got = d.__getitems__(batches(start=64 * (k % 9)))
        np.testing.assert_array_equal(got, data[64 * (k % 9) :][:64])
        del got
    np.testing.assert_array_equal(np.asarray(held), snapshot)


def test_read_only_flag_and_shapes(ds):
    d, data = ds
    a = d.__getitems__(batches())
    a.flags.writeable = False
    del a
    b = d.__getitems__(batches(start=100))  # not the read-only one: gather needs to write
    assert b.flags.writeable
    np.testing.assert_array_equal(b, data[100:164])
    c = d.__getitems__(batches(n=80))  # another shape
    assert c.shape == (80, *SHAPE)
    np.testing.assert_array_equal(c, data[:80])


def test_pool_is_bounded_and_small_batches_are_not_pooled(ds):
    d, _ = ds
    held = [d.__getitems__(batches(n=64)) for _ in range(KEEP + 3)]
    assert len({a.ctypes.data for a in held}) == KEEP + 3, "held batches share memory"
    assert d.store._pooled_buffers == 0
    del held
    assert d.store._pooled_buffers == KEEP, "the pool keeps at most KEEP buffers"
    for _ in range(5):
        d.__getitems__([1, 2, 3])  # 36 KiB: allocated, never pooled
    assert d.store._pooled_buffers == KEEP


def test_threads_never_share_a_batch(ds):
    d, data = ds
    errors = []

    def work(seed):
        rng = np.random.default_rng(seed)
        for _ in range(40):
            idx = rng.integers(0, len(data), 64)
            got = d.__getitems__(idx)
            if not np.array_equal(got, data[idx]):
                errors.append(seed)
            del got

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_close_drops_the_pool(ds):
    d, data = ds
    kept = d.__getitems__(batches())
    d.close()
    np.testing.assert_array_equal(kept, data[:64])  # a batch outlives its store
    with pytest.raises(zrecord.StoreClosedError):
        d.__getitems__(batches())


def test_pooled_batches_start_on_a_page(ds):
    """malloc's large blocks start 16 bytes past a page, which makes copying page-aligned
    records into them stall on 4K aliasing; pooled batches are page-aligned."""
    import mmap

    d, data = ds
    for k in (64, 100):
        a = d.__getitems__(batches(n=k))
        assert a.ctypes.data % mmap.PAGESIZE == 0
        np.testing.assert_array_equal(a, data[:k])


@pytest.mark.parametrize(
    "hold",
    [
        lambda b: b["data"],  # the array itself
        lambda b: b["data"][3],  # a view of it
        lambda b: memoryview(b["data"]),  # a buffer export
        lambda b: b,  # the whole batch dict
    ],
)
def test_loader_batches_held_by_the_caller_are_never_overwritten(ds, hold):
    # The DataLoader's batch memory goes back to its loader once the last array viewing it
    # is freed, and later batches fill it again; a batch still held must keep its bytes.
    d, data = ds
    labels = np.arange(len(data), dtype=np.int64)
    with Dataset.write(d.path.parent / "l", labels) as lab, zrecord.DataLoader(
        d, lab, batch_size=64, num_workers=2, mode=zrecord.Sampler.Mode.SHUFFLE, seed=3
    ) as loader:
        kept = []
        for step in range(40):
            batch = next(loader)
            np.testing.assert_array_equal(batch["data"], data[batch["label"]])
            if step % 8 == 0:
                kept.append((hold(batch), batch["label"].copy()))
            del batch
        for held, idx in kept:
            arr = np.asarray(held["data"] if isinstance(held, dict) else held)
            want = data[idx]
            np.testing.assert_array_equal(arr, want[3] if arr.ndim == want.ndim - 1 else want)
    # Still readable after the loader and the stores closed.
    for held, _ in kept:
        arr = np.asarray(held["data"] if isinstance(held, dict) else held)
        assert arr.size > 0
