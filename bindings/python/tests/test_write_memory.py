"""Dataset.write from a memory-mapped .npy keeps its resident memory bounded."""

import subprocess
import sys

import numpy as np

import zrecord


def test_memmap_write_has_bounded_rss(tmp_path):
    n = (384 << 20) // 12288
    src = np.lib.format.open_memmap(tmp_path / "big.npy", mode="w+", dtype=np.uint8, shape=(n, 3, 64, 64))
    for s in range(0, n, 2048):
        src[s : s + 2048] = (np.arange(12288, dtype=np.uint32).reshape(3, 64, 64) // 40 + s // 2048).astype(np.uint8)
    src.flush()
    del src
    work = (
        "import numpy as np, zrecord;"
        f"a = np.load({str(tmp_path / 'big.npy')!r}, mmap_mode='r');"
        f"zrecord.Dataset.write({str(tmp_path / 'ds')!r}, a, chunk_bytes=16 << 20).close()"
    )
    # Linux carries a process's peak RSS across fork and exec, so the writer runs as a
    # grandchild of a small wrapper whose RUSAGE_CHILDREN then reports the writer alone.
    wrapper = (
        "import resource, subprocess, sys;"
        f"subprocess.run([sys.executable, '-c', {work!r}], check=True);"
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
    )
    peak_kib = int(subprocess.run([sys.executable, "-c", wrapper], capture_output=True, text=True, check=True).stdout)
    # Without releasing the source pages the peak is the whole 384 MiB file plus numpy.
    assert peak_kib < 200 * 1024, f"peak RSS {peak_kib} KiB"
    a = np.load(tmp_path / "big.npy", mmap_mode="r")
    with zrecord.Dataset(tmp_path / "ds") as ds:
        idx = np.random.default_rng(0).integers(0, n, 300)
        np.testing.assert_array_equal(ds[idx], a[idx])


def test_copy_on_write_memmap_keeps_private_changes(tmp_path):
    np.save(tmp_path / "a.npy", np.zeros((100, 16), np.uint8))
    a = np.load(tmp_path / "a.npy", mmap_mode="c")
    a[5] = 7  # a private change, never written to the file
    zrecord.Dataset.write(tmp_path / "ds", a, chunk_bytes=256).close()
    with zrecord.Dataset(tmp_path / "ds") as ds:
        np.testing.assert_array_equal(ds[5], np.full(16, 7, np.uint8))
        np.testing.assert_array_equal(ds[np.arange(100)], np.asarray(a))
