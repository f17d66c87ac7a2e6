"""The memory contract of GIL-free calls (bindings/python/src/buffers.rs).

While a gather runs without the GIL, other threads run too. Two calls must not write the
same bytes at once (nor one read what another writes), and numpy must not move the memory
under the call. Each test starts one long gather in a thread, waits until it is inside the
call (its destination's owner then carries the pin, a weak reference), and acts meanwhile.
"""

import threading
import time
import weakref

import numpy as np
import pytest

import zrecord

REC = 1 << 20
N = 48


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = tmp_path_factory.mktemp("buffers") / "s"
    rng = np.random.default_rng(0)
    # Mildly compressible 1 MiB records: each gather of all of them takes a while to decode.
    data = (np.arange(N * REC, dtype=np.uint64) % 251).astype(np.uint8) ^ rng.integers(0, 4, N * REC, dtype=np.uint8)
    with zrecord.Zrecord(path) as z:
        z.append(data, N, REC)
    z = zrecord.Zrecord(path)
    yield z, data.reshape(N, REC)
    z.close()


class Gather(threading.Thread):
    """Gathers every record into `dst` `times` times, in a thread; with `patient`, a gather
    refused because a probe holds some of the bytes is tried again."""

    def __init__(self, z, dst, times=3, patient=False):
        super().__init__()
        self.z, self.dst, self.times, self.patient, self.error = z, dst, times, patient, None

    def run(self):
        try:
            done = 0
            while done < self.times:
                try:
                    self.z.gather(np.arange(N), self.dst, REC)
                    done += 1
                except BufferError:
                    if not self.patient:
                        raise
        except BaseException as e:  # noqa: BLE001 - checked by the test
            self.error = e


def wait_inside(owner, thread):
    """Until the gather thread is inside the call: the owner of its memory is pinned."""
    deadline = time.monotonic() + 30
    while weakref.getweakrefcount(owner) == 0:
        assert thread.is_alive() and time.monotonic() < deadline, "the gather never started"
        time.sleep(0.0002)


def test_two_gathers_into_the_same_bytes_conflict(store):
    z, data = store
    out = np.empty((N, REC), np.uint8)
    t = Gather(z, out)
    t.start()
    wait_inside(out, t)
    with pytest.raises(BufferError):
        z.gather(np.arange(2), out[N - 2 :], REC)  # overlaps the running gather's tail
    with pytest.raises(BufferError):
        z.append(out[:1], 1, REC)  # reading bytes another call is writing
    t.join()
    assert t.error is None
    np.testing.assert_array_equal(out, data)
    # Once it is done, the same bytes are free again.
    z.gather(np.arange(2), out[N - 2 :], REC)


def test_gathers_into_disjoint_halves_of_one_array_run_together(store):
    z, data = store
    out = np.empty((2 * N, REC), np.uint8)
    first, second = Gather(z, out[:N]), Gather(z, out[N:])
    first.start()
    wait_inside(out, first)
    second.start()
    first.join()
    second.join()
    assert first.error is None and second.error is None
    np.testing.assert_array_equal(out[:N], data)
    np.testing.assert_array_equal(out[N:], data)


def test_reads_of_one_source_run_together(tmp_path, store):
    z, data = store
    src = data[:8].copy()
    out = np.empty((N, REC), np.uint8)
    t = Gather(z, out)
    t.start()
    wait_inside(out, t)
    with zrecord.Zrecord(tmp_path / "a") as a, zrecord.Zrecord(tmp_path / "b") as b:
        a.append(src, 8, REC)  # no gather writes src: reading it anywhere is fine
        b.append(src, 8, REC)
    t.join()
    assert t.error is None


def test_numpy_cannot_move_the_memory_of_a_running_gather(store):
    """`base.resize(refcheck=False)` reallocates under every view of `base`; while a gather
    writes through such a view, numpy must refuse (it does for an array with a weak
    reference, which is how the call pins it)."""
    z, data = store
    base = np.empty((N + 1) * REC, np.uint8)
    view = base[REC:].reshape(N, REC)
    t = Gather(z, view)
    t.start()
    wait_inside(base, t)
    with pytest.raises(ValueError, match="resize"):
        base.resize(4 * REC, refcheck=False)
    t.join()
    assert t.error is None
    np.testing.assert_array_equal(view, data)
    del view
    base.resize(4 * REC, refcheck=False)  # the pin is gone with the call


def test_pin_follows_memoryviews_to_the_array(store):
    z, data = store
    base = np.empty((N, REC), np.uint8)
    t = Gather(z, memoryview(base))
    t.start()
    wait_inside(base, t)
    with pytest.raises(ValueError, match="resize"):
        base.resize(REC, refcheck=False)
    t.join()
    assert t.error is None
    np.testing.assert_array_equal(base, data)


def test_the_mmap_under_a_memmap_cannot_close_mid_call(tmp_path, store):
    """np.memmap holds no buffer export on its mmap, so `m._mmap.close()` (a common way to
    let go of a memmap) would unmap the pages a running gather writes to; the call holds
    an export, so the close is refused until the gather is done."""
    z, data = store
    m = np.lib.format.open_memmap(tmp_path / "out.npy", mode="w+", dtype=np.uint8, shape=(N, REC))
    t = Gather(z, m, patient=True)
    t.start()
    deadline = time.monotonic() + 30
    while True:  # inside once a gather into the same bytes is refused
        try:
            z.gather([0], m[:1], REC)  # harmless either way: record 0 belongs in slot 0
        except BufferError:
            break
        assert t.is_alive() and time.monotonic() < deadline, "the gather never started"
    with pytest.raises(BufferError):
        m._mmap.close()
    t.join()
    assert t.error is None
    np.testing.assert_array_equal(m, data)
    m.flush()
    m._mmap.close()  # and allowed once the call let go
    np.testing.assert_array_equal(np.load(tmp_path / "out.npy"), data)


def test_claims_are_released_on_errors(store):
    z, _ = store
    out = np.empty(REC, np.uint8)
    with pytest.raises(zrecord.IndexOutOfRangeError):
        z.gather([N], out, REC)
    with pytest.raises(zrecord.BufferTooSmallError):
        z.gather([0, 1], out, REC)
    z.gather([0], out, REC)  # neither failure left the bytes claimed
    assert weakref.getweakrefcount(out) == 0
