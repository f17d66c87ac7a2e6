"""zrecord.DataLoader: endless batches from Rust threads, clean shutdown."""

import gc
import itertools
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import zrecord
from zrecord import DataLoader, Dataset, Sampler

from _support import images


@pytest.fixture
def pair(tmp_path):
    data = images(300, 3)
    labels = np.arange(300, dtype=np.int64)
    d = Dataset.write(tmp_path / "data", data)
    l = Dataset.write(tmp_path / "label", labels)
    yield d, l, data
    d.close()
    l.close()


def rust_threads():
    """Names of this process's zrecord loader threads (Rust threads are not in threading)."""
    import os

    names = []
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                names.append(f.read().strip())
        except FileNotFoundError:
            pass
    return [n for n in names if n.startswith("zrecord-")]


def rust_threads_after_join(expected, within=2.0):
    """The number of zrecord threads once it is down to `expected` (or fewer: threads of an
    earlier test may still have been leaving when it was counted) or `within` seconds pass: a
    joined thread can stay listed in /proc/self/task for a moment after pthread_join
    returns (the kernel clears the thread id before it has finished exiting)."""
    deadline = time.monotonic() + within
    while True:
        n = len(rust_threads())
        if n <= expected or time.monotonic() > deadline:
            return n
        time.sleep(0.01)


def test_shapes_and_values(pair):
    d, l, data = pair
    with DataLoader(d, l, batch_size=32, num_workers=3) as loader:
        for _, batch in zip(range(20), loader):
            assert set(batch) == {"data", "label"}
            assert batch["data"].shape == (32, 3, 8, 8) and batch["data"].dtype == np.uint8
            assert batch["label"].shape == (32,) and batch["label"].dtype == np.int64
            # Each label is its sample's index: data and label come from the same draw.
            np.testing.assert_array_equal(batch["data"], data[batch["label"]])
            assert batch["data"].flags.c_contiguous and batch["data"].flags.writeable


@pytest.mark.parametrize("workers", [0, 1, 4])
def test_stream_is_the_samplers_stream(pair, workers):
    d, l, _ = pair
    expected = Sampler(300, 16, Sampler.Mode.IID, seed=9)
    with DataLoader(d, l, num_workers=workers, batch_size=16, seed=9, prefetch_size=2) as loader:
        for batch in itertools.islice(loader, 25):
            np.testing.assert_array_equal(batch["label"], expected.next().astype(np.int64))


def test_sequential_mode(pair):
    d, l, _ = pair
    with DataLoader(d, l, batch_size=128, mode=Sampler.Mode.SEQUENTIAL) as loader:
        labels = [next(loader)["label"] for _ in range(3)]
    assert labels[0].tolist() == list(range(128))
    assert labels[2].tolist() == list(range(256, 300)) + list(range(0, 84))


def test_len_raises_type_error(pair):
    d, l, _ = pair
    with DataLoader(d, l) as loader:
        with pytest.raises(TypeError):
            len(loader)


def test_length_mismatch(pair, tmp_path):
    d, _, _ = pair
    short = Dataset.write(tmp_path / "short", np.arange(10))
    with pytest.raises(ValueError):
        DataLoader(d, short)


@pytest.mark.parametrize("kw", [{"batch_size": 0}, {"num_workers": -1}, {"mode": 5}])
def test_bad_arguments(pair, kw):
    d, l, _ = pair
    with pytest.raises(ValueError):
        DataLoader(d, l, **kw)


def test_transform_runs_on_the_workers_in_parallel_and_in_order(pair):
    d, l, data = pair
    calls, lock, running, most = [], threading.Lock(), [0], [0]

    def transform(batch):
        data, label = batch
        with lock:
            calls.append(threading.get_ident())
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.05)  # releases the GIL, as numpy and decoders do
        with lock:
            running[0] -= 1
        return data.astype(np.float32) / 255, label + 1

    with DataLoader(d, l, batch_size=8, num_workers=4, prefetch_size=8, mode=0, transform=transform) as loader:
        for step in range(12):
            b = next(loader)
            assert b["data"].dtype == np.float32 and b["data"].max() <= 1
            # In stream order whatever worker finished first: SEQUENTIAL batch k is 8k..8k+7.
            np.testing.assert_array_equal(b["label"], np.arange(8 * step, 8 * step + 8) % len(data) + 1)
    assert threading.get_ident() not in calls, "a transform ran on the training thread"
    assert most[0] >= 2, "no two transforms overlapped: they are not parallel"

    # Without workers it runs inside next(), on the caller's thread.
    calls.clear()
    with DataLoader(d, l, batch_size=8, num_workers=0, transform=transform) as loader:
        next(loader)
    assert calls == [threading.get_ident()]


def test_a_transform_error_is_raised_by_next_for_its_batch(pair):
    d, l, _ = pair

    def transform(batch):
        data, label = batch
        if label[0] == 16:
            raise KeyError("no such label")
        return data, label

    with DataLoader(d, l, batch_size=8, num_workers=2, mode=0, transform=transform) as loader:
        next(loader), next(loader)
        with pytest.raises(KeyError, match="no such label"):
            next(loader)
        assert next(loader)["label"][0] == 24, "the failed batch counts as consumed"


def test_close_is_prompt_and_joins_everything(pair):
    d, l, _ = pair
    before = len(rust_threads())
    loader = DataLoader(d, l, batch_size=64, num_workers=4, prefetch_size=8)
    next(loader)
    time.sleep(0.2)  # let every queue fill and every worker block on a full queue
    assert len(rust_threads()) == before + 5
    start = time.monotonic()
    loader.close()
    assert time.monotonic() - start < 2.0
    assert loader.closed and loader._pipeline.threads_alive == 0
    assert rust_threads_after_join(before) <= before
    with pytest.raises(StopIteration):
        next(loader)
    loader.close()  # idempotent


def test_close_from_another_thread_ends_a_waiting_next(pair):
    d, l, _ = pair
    before = len(rust_threads())
    loader = DataLoader(d, l, batch_size=8, num_workers=1)
    next(loader)
    assert len(rust_threads()) > before  # the loader's threads run
    closer = threading.Timer(0.3, loader.close)
    closer.start()
    with pytest.raises(StopIteration):
        while True:
            next(loader)
    closer.join(5)
    assert not closer.is_alive()
    # The threads are gone from the process (threads_alive is 0 after any close: close
    # empties the list it counts).
    assert rust_threads_after_join(before) <= before, rust_threads()


def test_garbage_collected_loader_stops(pair):
    d, l, _ = pair
    before = len(rust_threads())
    loader = DataLoader(d, l, batch_size=8)
    next(loader)
    del loader
    gc.collect()
    assert rust_threads_after_join(before) <= before


def test_delete_is_locked_while_a_loader_reads(pair):
    d, l, _ = pair
    with DataLoader(d, l, batch_size=8) as loader:
        next(loader)
        with pytest.raises(zrecord.LockedError):
            d.delete([0])
    d.delete([0])
    assert len(d) == 299


def test_closing_the_dataset_does_not_break_a_running_loader(pair):
    d, l, data = pair
    with DataLoader(d, l, batch_size=8) as loader:
        d.close()
        l.close()
        for batch in itertools.islice(loader, 5):
            np.testing.assert_array_equal(batch["data"], data[batch["label"]])


def test_worker_error_is_raised_by_next(tmp_path):
    # A dataset whose schema claims smaller samples than its records hold: every gather
    # fails with BufferTooSmallError, which must reach the consumer, not hang it.
    d = Dataset.write(tmp_path / "d", np.zeros((20, 8), np.uint8))
    l = Dataset.write(tmp_path / "l", np.arange(20))
    d._itemsize = 4
    with DataLoader(d, l, batch_size=4, num_workers=2) as loader:
        with pytest.raises(zrecord.BufferTooSmallError):
            next(loader)
        with pytest.raises(zrecord.BufferTooSmallError):
            next(loader)


def test_any_dataset_object_works(pair, loaderx):
    """Objects with __len__/__getitems__ (here: loaderx's Dataset) take the Python path."""
    d, l, data = pair
    ref_d, ref_l = loaderx.Dataset(d.path), loaderx.Dataset(l.path)
    before = len(rust_threads())
    try:
        with DataLoader(ref_d, ref_l, batch_size=16, num_workers=2) as loader:
            for batch in itertools.islice(loader, 5):
                np.testing.assert_array_equal(batch["data"], data[batch["label"]])
            assert len(rust_threads()) > before
    finally:
        ref_d.close()
        ref_l.close()
    # Counted once loaderx's datasets are closed: the threads loaderx starts for its gathers
    # inherit the name of the loader worker that started them and live as long as those.
    assert rust_threads_after_join(before) <= before, rust_threads()


class Numbers:
    """A dataset that is not zrecord's: sample i is (i, -i). Records the thread of every
    __getitems__ call (its OS name), can fail on one index and can be slow."""

    def __init__(self, n=1000, fail_on=None, delay=0.0):
        self.n, self.fail_on, self.delay = n, fail_on, delay
        self.threads = set()
        self.lock = threading.Lock()

    def __len__(self):
        return self.n

    def __getitems__(self, idxs):
        with open(f"/proc/self/task/{threading.get_native_id()}/comm") as f:
            name = f.read().strip()
        with self.lock:
            self.threads.add(name)
        if self.delay:
            time.sleep(self.delay)
        if self.fail_on is not None and self.fail_on in idxs:
            raise KeyError(f"no sample {self.fail_on}")
        return np.asarray(idxs, dtype=np.int64)


def test_a_python_dataset_is_read_by_the_native_loader(pair):
    """__getitems__ runs on the native loader's worker threads (one pipeline, not a second
    one of Python threads); an exception is raised by next() for its batch only, and
    states resume as for stores."""
    data, labels = Numbers(fail_on=35), Numbers()
    before = len(rust_threads())
    loader = DataLoader(data, labels, batch_size=10, num_workers=3, mode=Sampler.Mode.SEQUENTIAL)
    assert [next(loader)["label"][0] for _ in range(3)] == [0, 10, 20]
    with pytest.raises(KeyError, match="no sample 35"):
        next(loader)
    b = next(loader)  # the failed batch counts as passed
    np.testing.assert_array_equal(b["data"], np.arange(40, 50))
    state = loader.state_dict()
    assert len(rust_threads()) > before
    loader.close()
    assert rust_threads_after_join(before) <= before, rust_threads()
    names = data.threads | labels.threads
    assert names and all(n.startswith("zrecord-loader-") for n in names), names
    with DataLoader(Numbers(), Numbers(), batch_size=5, num_workers=0, mode=0, state=state,
                    rank=1, world_size=2) as again:
        np.testing.assert_array_equal(next(again)["label"], np.arange(55, 60))


def test_closing_a_loader_whose_python_dataset_is_busy_is_prompt():
    """close() and garbage collection while workers are inside a slow __getitems__: they
    finish that call (they need the GIL, which close gives up) and stop; nothing hangs."""
    for _ in range(3):
        before = len(rust_threads())
        loader = DataLoader(Numbers(delay=0.2), Numbers(), batch_size=4, num_workers=4, prefetch_size=8)
        next(loader)
        start = time.monotonic()
        loader.close()
        assert time.monotonic() - start < 5.0
        assert rust_threads_after_join(before) <= before
        loader = DataLoader(Numbers(delay=0.2), Numbers(), batch_size=4, num_workers=4)
        next(loader)
        del loader
        gc.collect()
        assert rust_threads_after_join(before) <= before


def test_no_thread_left_at_exit(tmp_path):
    """A loader never closed by the program is closed at exit: its threads are gone before
    the interpreter finalises (checked by an exit hook that runs after zrecord's)."""
    script = textwrap.dedent(
        f"""
        import atexit, os

        def count_loader_threads():
            names = []
            for tid in os.listdir("/proc/self/task"):
                with open(f"/proc/self/task/{{tid}}/comm") as f:
                    names.append(f.read().strip())
            print("left:", sum(n.startswith("zrecord-loader") or n == "zrecord-sampler" for n in names))

        atexit.register(count_loader_threads)  # registered first, so it runs last

        import numpy as np, zrecord
        d = zrecord.Dataset.write({str(tmp_path / "d")!r}, np.zeros((100, 64), np.uint8))
        l = zrecord.Dataset.write({str(tmp_path / "l")!r}, np.arange(100))
        loader = zrecord.DataLoader(d, l, batch_size=10, num_workers=4)
        next(loader)
        keep = [loader]  # still referenced at exit
        print("running")
        """
    )
    start = time.monotonic()
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["running", "left:", "0"], out.stdout
    assert time.monotonic() - start < 30


def test_fork_safety(tmp_path):
    """After fork, the child can read (its own pool) but not use the parent's loader."""
    script = textwrap.dedent(
        f"""
        import os, numpy as np, zrecord
        d = zrecord.Dataset.write({str(tmp_path / "d")!r}, np.arange(4000).reshape(1000, 4))
        l = zrecord.Dataset.write({str(tmp_path / "l")!r}, np.arange(1000))
        loader = zrecord.DataLoader(d, l, batch_size=256, num_workers=2)
        next(loader)
        d[np.arange(1000)]  # the parent's rayon pool is running now
        pid = os.fork()
        if pid == 0:
            ok = int(d[np.arange(1000)].sum() == np.arange(4000).sum())
            try:
                next(loader)
                ok = 0
            except RuntimeError:
                pass
            with zrecord.DataLoader(d, l, batch_size=8, num_workers=2) as child_loader:
                b = next(child_loader)
                ok &= int((b["data"][:, 0] == b["label"] * 4).all())
            loader.close()
            os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
        loader.close()
        print(os.waitstatus_to_exitcode(status))
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "0", out.stderr


def test_impossible_batch_size_is_a_memory_error(pair):
    d, l, _ = pair
    with pytest.raises(MemoryError):
        DataLoader(d, l, batch_size=2**60)
    with pytest.raises(MemoryError):
        DataLoader(d, l, batch_size=2**60, num_workers=0)
