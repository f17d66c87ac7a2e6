"""zrecord.Sampler: loaderx's endless index generator."""

import itertools

import numpy as np
import pytest

from zrecord import Sampler


def test_mode_constants():
    assert Sampler.Mode.SEQUENTIAL == 0
    assert Sampler.Mode.IID == 1


def test_sequential_is_a_circular_window():
    s = Sampler(10, 4, Sampler.Mode.SEQUENTIAL)
    batches = [s.next().tolist() for _ in range(4)]
    assert batches == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 0, 1], [2, 3, 4, 5]]


def test_sequential_matches_loaderx(loaderx):
    from loaderx._sampler import Sampler as Reference

    ours, ref = Sampler(37, 8, 0), Reference(37, 8, 0)
    for _ in range(20):
        np.testing.assert_array_equal(ours.next(), ref.next())


def test_next_returns_fresh_uint64_arrays():
    s = Sampler(1000, 16, Sampler.Mode.IID, seed=3)
    a, b = s.next(), s.next()
    assert a.dtype == np.uint64 and a.shape == (16,)
    assert a is not b and not np.shares_memory(a, b)
    a[:] = 0  # caller owns it
    assert (b < 1000).all()


def test_iid_is_seeded_and_in_range():
    a = np.concatenate(list(itertools.islice(Sampler(50, 64, 1, seed=7), 20)))
    b = np.concatenate(list(itertools.islice(Sampler(50, 64, 1, seed=7), 20)))
    c = np.concatenate(list(itertools.islice(Sampler(50, 64, 1, seed=8), 20)))
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    assert a.max() < 50 and len(np.unique(a)) == 50
    assert Sampler(50, 4, 1).next().tolist() == Sampler(50, 4, 1, 42).next().tolist()  # default seed


def test_iterable_forever():
    s = Sampler(3, 2, 0)
    assert iter(s) is s
    got = [b.tolist() for b in itertools.islice(s, 3)]
    assert got == [[0, 1], [2, 0], [1, 2]]


def test_attributes_and_repr():
    s = Sampler(10, 4, 1)
    assert (s.length, s.batch_size, s.mode) == (10, 4, 1)
    assert "IID" in repr(s)


@pytest.mark.parametrize("args", [(0, 4, 0), (10, 0, 0), (10, 4, 3), (-1, 4, 0), (10, -4, 1)])
def test_bad_arguments(args):
    with pytest.raises(ValueError):
        Sampler(*args)


def test_impossible_batch_is_a_memory_error_not_an_abort():
    s = Sampler(10, 2**60, 1)
    with pytest.raises(MemoryError):
        s.next()
