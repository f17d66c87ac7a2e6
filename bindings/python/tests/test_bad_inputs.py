"""Bad inputs: each a clear Python exception, never a crash or a PanicException."""

import numpy as np
import pytest

import zrecord
from zrecord import Zrecord, ZrecordError


@pytest.fixture
def z(tmp_path):
    with Zrecord(tmp_path / "s") as store:
        store.append(np.arange(40, dtype=np.uint8), 10, 4)
        yield store


def test_wrong_dtypes(z):
    out = np.zeros((2, 4), np.uint8)
    with pytest.raises(TypeError):
        z.gather(np.array([0.0, 1.0]), out, 4)
    with pytest.raises(TypeError):
        z.gather(["a", "b"], out, 4)
    with pytest.raises(TypeError):
        z.gather(np.array([True, False]), out, 4)  # masks select; Dataset handles them
    with pytest.raises(TypeError):
        z.gather([0], np.empty(4, dtype=object), 4)
    with pytest.raises(TypeError):
        z.gather([0], [0, 0, 0, 0], 4)  # a list is not a buffer
    with pytest.raises(TypeError):
        z.gather_var([0], out, np.array([0.5]))
    with pytest.raises(TypeError):
        z.append(np.array([object()] * 4), 1, 4)
    with pytest.raises(TypeError):
        z.append("abcd", 1, 4)
    with pytest.raises(TypeError):
        z.append_var(np.zeros(4, np.uint8), [0], [1.5])


def test_non_contiguous_buffers(z):
    out = np.zeros((4, 8), np.uint8)
    with pytest.raises(ValueError, match="contiguous"):
        z.gather([0, 1], out[:, ::2], 4)
    with pytest.raises(ValueError, match="contiguous"):
        z.gather([0, 1], np.asfortranarray(np.zeros((4, 2), np.uint8)), 4)
    src = np.zeros((4, 8), np.uint8)
    with pytest.raises(ValueError, match="contiguous"):
        z.append(src[:, ::2], 4, 4)
    with pytest.raises(ValueError, match="contiguous"):
        z.append_var(src[:, ::2], [0], [4])
    with pytest.raises(ValueError, match="contiguous"):
        z.gather([0], memoryview(bytearray(16))[::2], 4)
    assert len(z) == 10


def test_read_only_destinations(z):
    ro = np.zeros(8, np.uint8)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        z.gather([0, 1], ro, 4)
    with pytest.raises(ValueError, match="read-only"):
        z.gather([0], b"\0" * 4, 4)
    with pytest.raises(ValueError):  # a broadcast view: read-only and overlapping
        z.gather_var([0], np.broadcast_to(np.zeros(1, np.uint8), (8,)), [0])
    # read-only sources are fine
    assert z.append(ro, 2, 4) == 10


def test_out_of_range_and_negative_indices(z):
    out = np.zeros(8, np.uint8)
    for bad in ([10], [0, 10], [-1], np.array([-3], np.int8), [2**63], np.array([2**64 - 1], np.uint64)):
        with pytest.raises(zrecord.IndexOutOfRangeError) as e:
            z.gather(bad, out, 4)
        assert e.value.code == -3 and isinstance(e.value, ZrecordError)
    with pytest.raises(zrecord.IndexOutOfRangeError):
        z.lengths([-1])
    with pytest.raises(zrecord.IndexOutOfRangeError):
        z.delete([-1])
    assert out.tolist() == [0] * 8  # nothing written by a failed call
    assert len(z) == 10


def test_destination_too_small(z):
    with pytest.raises(zrecord.BufferTooSmallError) as e:
        z.gather([0, 1], np.zeros(7, np.uint8), 4)
    assert e.value.code == -6
    with pytest.raises(zrecord.BufferTooSmallError):
        z.gather([0], np.zeros(8, np.uint8), 3)  # stride shorter than the record
    with pytest.raises(zrecord.BufferTooSmallError):
        z.gather([0], np.zeros(0, np.uint8), 4)
    with pytest.raises(zrecord.BufferTooSmallError):
        z.gather_var([0], np.zeros(4, np.uint8), [1])


def test_negative_sizes(z):
    with pytest.raises(ValueError):
        z.gather([0], np.zeros(4, np.uint8), -4)
    with pytest.raises(ValueError):
        z.append(np.zeros(4, np.uint8), -1, 4)
    with pytest.raises(ValueError):
        z.append(np.zeros(4, np.uint8), 1, -4)
    with pytest.raises(ValueError):
        z.append_var(np.zeros(4, np.uint8), [-1], [1])
    with pytest.raises(ValueError):
        z.append_var(np.zeros(4, np.uint8), [0], [-1])
    with pytest.raises(ValueError):
        z.append_var(np.zeros(4, np.uint8), [0], [2**32])
    with pytest.raises(ValueError):
        z.append_var(np.zeros(4, np.uint8), [0, 1], [1])  # counts differ


def test_empty_records(z):
    with pytest.raises(zrecord.RecordTooLargeError):
        z.append(np.zeros(4, np.uint8), 1, 0)
    with pytest.raises(zrecord.RecordTooLargeError):
        z.append_var(np.zeros(4, np.uint8), [0], [0])


def test_closed_store(tmp_path):
    z = Zrecord(tmp_path / "s")
    z.close()
    with pytest.raises(zrecord.StoreClosedError) as e:
        z.gather([0], np.zeros(4, np.uint8), 4)
    assert e.value.code == -9
    assert isinstance(e.value, ValueError) and isinstance(e.value, RuntimeError)


def test_bad_paths(tmp_path):
    with pytest.raises(TypeError):
        Zrecord(12)
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ZrecordError) as e:
        Zrecord(blocker / "sub")
    assert e.value.code == -2


def test_dataset_bad_indices(tmp_path):
    with zrecord.Dataset.write(tmp_path / "d", np.zeros((5, 3), np.float32)) as d:
        with pytest.raises(zrecord.IndexOutOfRangeError):
            d[5]
        with pytest.raises(zrecord.IndexOutOfRangeError):
            d[[1, 7]]
        # numpy's own answer to these is IndexError, so ours is too.
        for bad in ([1.0], "a", 1.5):
            with pytest.raises(IndexError):
                np.zeros((5, 3), np.float32)[bad]
            with pytest.raises(IndexError):
                d[bad]
