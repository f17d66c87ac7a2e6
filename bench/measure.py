"""What every section of the benchmarks shares: timing, disk usage, evicting files from the
page cache, the printed tables, and the run's record of what it measured and skipped.

`RESULTS` and `SKIPPED` are the run's state: sections add to them, the targets table
(summary.py) and the list of skips at the end of bench.py read them. Both are only ever
mutated, never rebound, so every module that imported them sees the same objects.
"""

import os
import sys
import time
from pathlib import Path

import numpy as np

SKIPPED = []
# What each section measured, for the targets summary at the end of `all`.
RESULTS = {}


def optional(name):
    try:
        return __import__(name)
    except Exception as e:  # noqa: BLE001 - any import failure means "skip it"
        SKIPPED.append(f"{name}: {type(e).__name__}: {e}".splitlines()[0])
        return None


def streamed(loader, fetched, stored, budget, cap):
    """A peer's shuffled epoch through its `loader` (a context manager giving batches with a
    "label" key), or what of it fits `budget` seconds and `cap` times its `stored` bytes
    fetched (`fetched`: a shared counter of the bytes it downloaded): samples/s from the
    first batch asked for, bytes fetched over the bytes of the samples read, and the part
    of the epoch read."""
    with loader as dl:
        before, samples, began = fetched.value, 0, time.perf_counter()
        for b in dl:
            samples += len(b["label"])
            if time.perf_counter() - began > budget or fetched.value - before > cap * stored:
                break
        took = time.perf_counter() - began
        total = len(dl.dataset)
    read = max(samples, 1) * stored / total
    return {"rate": samples / took, "fetched": (fetched.value - before) / read, "epoch": samples / total}


def median_time(fn, repeat=5, number=1):
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        for _ in range(number):
            fn()
        times.append((time.perf_counter() - t) / number)
    return float(np.median(times))


def disk_usage(path):
    path = Path(path)
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    return sum(os.stat(p).st_blocks * 512 for p in files)


def table(title, header, rows):
    print(f"\n### {title}\n")
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("---" for _ in header) + "|")
    for r in rows:
        print("| " + " | ".join(str(c) for c in r) + " |")
    sys.stdout.flush()


def evict(paths):
    """Drops `paths` (files, or every file under a directory) from the page cache.

    fsync first (dirty pages are not dropped), then POSIX_FADV_DONTNEED, which needs no
    privileges on files this process can open. Pages some process still maps are kept by
    the kernel, so every contender is closed (unmapped) before this runs.
    """
    for root in paths:
        root = Path(root)
        for p in [root] if root.is_file() else [q for q in root.rglob("*") if q.is_file()]:
            fd = os.open(p, os.O_RDONLY)
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
