"""Hostile input through Python: indices past every integer width, a
billion-index batch, buffers mutated and stores closed from other threads while a gather
runs with the GIL released, use after close, damaged stores. Each must be a Python
exception, never a segfault, in bounded memory. The risky cases run in a child interpreter
with ``-X faulthandler`` and an address-space limit, so a crash or a runaway allocation
fails the test instead of the test session."""

import os
import struct
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import zrecord
from zrecord import Zrecord, ZrecordError

REC = 64


@pytest.fixture
def store(tmp_path):
    path = tmp_path / "s"
    with Zrecord(path) as z:
        z.append(np.arange(200 * REC, dtype=np.uint32).astype(np.uint8), 200, REC)
    return path


def expected(i):
    return (np.arange(i * REC, (i + 1) * REC, dtype=np.uint32)).astype(np.uint8)


def run_child(code, limit_gib=6):
    """Runs `code` in a fresh interpreter with faulthandler on and RLIMIT_AS capped (the
    cap counts the store's mappings: 4 GiB per chunk file and 256 MiB of meta.zr)."""
    prelude = textwrap.dedent(
        f"""
        import resource
        resource.setrlimit(resource.RLIMIT_AS, ({limit_gib} << 30, {limit_gib} << 30))
        """
    )
    return subprocess.run(
        [sys.executable, "-X", "faulthandler", "-c", prelude + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    "idx", [2**64, 2**64 + 5, -(2**63) - 1, -(2**70), 2**200, np.uint64(2**64 - 1), np.int64(-1)]
)
def test_indices_past_every_width(store, idx):
    with Zrecord(store) as z:
        out = np.zeros(REC, np.uint8)
        with pytest.raises((ZrecordError, OverflowError, IndexError, ValueError, TypeError)):
            z.gather([idx], out, REC)
        with pytest.raises((ZrecordError, OverflowError, IndexError, ValueError, TypeError)):
            z.lengths([idx])
        assert not out.any()
        z.gather([3], out, REC)
        assert (out == expected(3)).all()


def test_billion_index_batch_is_refused_in_bounded_memory(store):
    # 10^9 indices as a zero-stride view take no memory; the store must refuse the batch
    # (destination far too small) without materialising 8 GB of indices or output.
    r = run_child(
        f"""
        import numpy as np, zrecord
        z = zrecord.Zrecord({str(store)!r})
        idx = np.broadcast_to(np.uint64(1), (10**9,))
        out = np.zeros({REC}, np.uint8)
        for call in (lambda: z.gather(idx, out, {REC}), lambda: z.lengths(idx)):
            try:
                call()
                print("NO ERROR")
            except Exception as e:
                print("raised", type(e).__name__)
        print("alive", len(z))
        """
    )
    assert r.returncode == 0, r.stderr
    lines = r.stdout.split("\n")
    assert "NO ERROR" not in r.stdout, r.stdout
    assert sum(line.startswith("raised") for line in lines) == 2, r.stdout
    assert "alive 200" in r.stdout


def test_arrays_mutated_during_a_gil_released_gather(store):
    # Other threads scribble over the index array and the destination while gathers run.
    # Every gather either succeeds with committed records or raises; nothing crashes.
    r = run_child(
        f"""
        import threading, numpy as np, zrecord
        z = zrecord.Zrecord({str(store)!r})
        n = 4096
        idx = np.arange(n, dtype=np.uint64) % 200
        out = np.zeros(n * {REC}, np.uint8)
        stop = False
        def scribble():
            k = 0
            while not stop:
                idx[k % n] = (k * 7919) % 400      # half of these are out of range
                out[(k * 64) % out.size] = 255
                k += 1
        ts = [threading.Thread(target=scribble) for _ in range(2)]
        for t in ts: t.start()
        ok = errors = 0
        for _ in range(300):
            try:
                z.gather(idx, out, {REC})
                ok += 1
            except zrecord.ZrecordError as e:
                assert e.code == -3, e
                errors += 1
        stop = True
        for t in ts: t.join()
        # Afterwards a clean gather is exact.
        idx = np.arange(200, dtype=np.uint64)
        out = np.zeros(200 * {REC}, np.uint8)
        z.gather(idx, out, {REC})
        want = np.arange(200 * {REC}, dtype=np.uint32).astype(np.uint8)
        assert (out == want).all()
        print("done", ok + errors)
        """
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "done 300" in r.stdout


def test_close_from_another_thread_during_gathers(store):
    r = run_child(
        f"""
        import threading, numpy as np, zrecord
        z = zrecord.Zrecord({str(store)!r})
        idx = np.arange(4096, dtype=np.uint64) % 200
        out = np.zeros(4096 * {REC}, np.uint8)
        outcomes = set()
        def reader():
            for _ in range(2000):
                try:
                    z.gather(idx, out, {REC})
                    outcomes.add("ok")
                except zrecord.ZrecordError as e:
                    outcomes.add(type(e).__name__)
                    return
        ts = [threading.Thread(target=reader) for _ in range(3)]
        for t in ts: t.start()
        z.close()
        for t in ts: t.join()
        z.close()  # twice is fine
        print("outcomes", sorted(outcomes))
        """
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "outcomes" in r.stdout


def test_use_after_close_everywhere(store, tmp_path):
    z = Zrecord(store)
    z.close()
    calls = [
        lambda: len(z),
        lambda: z.gather([0], np.zeros(REC, np.uint8), REC),
        lambda: z.gather_var([0], np.zeros(REC, np.uint8), [0]),
        lambda: z.lengths([0]),
        lambda: z.append(np.zeros(REC, np.uint8), 1, REC),
        lambda: z.delete([0]),
        lambda: z.compact(),
        lambda: z.stats(),
        lambda: z.sync(),
    ]
    for call in calls:
        # Every call raises: the closed-store error (code -9, also a ValueError).
        with pytest.raises(ZrecordError) as e:
            call()
        assert e.value.code == -9 and isinstance(e.value, ValueError), e.value
    ds = zrecord.Dataset.write(tmp_path / "d", np.zeros((4, 3), np.float32))
    ds.close()
    with pytest.raises((ZrecordError, ValueError)):
        ds[0]


def _corrupt(path, offset, data):
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


def test_damaged_stores_raise_typed_errors(store):
    meta = os.path.join(store, "meta.zr")
    # A damaged entry: unknown codec on record 5 is a decode error (-7) for that record only.
    _corrupt(meta, 16 + 16 * 5 + 14, b"\x09")
    with Zrecord(store) as z:
        out = np.zeros(REC, np.uint8)
        with pytest.raises(ZrecordError) as e:
            z.gather([5], out, REC)
        assert e.value.code == -7
        z.gather([6], out, REC)
        assert (out == expected(6)).all()
    # Entry pointing far past the frontier.
    _corrupt(meta, 16 + 16 * 5, struct.pack("<I", 0xFFFF_FF00))
    with Zrecord(store) as z:
        with pytest.raises(ZrecordError) as e:
            z.gather([5], np.zeros(REC, np.uint8), REC)
        assert e.value.code == -7
    # Bad magic: the directory is not a store (-8), at open.
    _corrupt(meta, 0, b"ZREX")
    with pytest.raises(ZrecordError) as e:
        Zrecord(store)
    assert e.value.code == -8


def test_oversized_threads_of_small_gathers_stay_exact(store):
    # Many Python threads at once, each gathering with the GIL released.
    with Zrecord(store) as z:
        errors = []

        def worker(seed):
            rng = np.random.default_rng(seed)
            out = np.zeros(32 * REC, np.uint8)
            for _ in range(200):
                idx = rng.integers(0, 200, 32).astype(np.uint64)
                z.gather(idx, out, REC)
                for k, i in enumerate(idx):
                    if not (out[k * REC : (k + 1) * REC] == expected(int(i))).all():
                        errors.append(int(i))
                        return

        ts = [threading.Thread(target=worker, args=(s,)) for s in range(8)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert errors == []
