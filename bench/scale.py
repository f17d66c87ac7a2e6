"""How zrecord scales with the number of records (gather and open() at 20,000 to 2,000,000
records) and the peak memory of writing a 4 GiB memory-mapped array, against loaderx.
"""

import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from data_sets import make_records
from measure import SKIPPED, median_time, table


def bench_scale(args):
    import zrecord
    rows = []
    sizes = (20_000, 200_000, 2_000_000) if not args.quick else (20_000, 200_000)
    rng = np.random.default_rng(2)
    work = Path(tempfile.mkdtemp(prefix="zrbench-", dir=args.workdir))
    try:
        for n in sizes:
            d = work / f"s{n}"
            rec = 256
            with zrecord.Zrecord(d) as z:
                step = 100_000
                for s in range(0, n, step):
                    k = min(step, n - s)
                    block = (np.arange(k * rec, dtype=np.uint32) // 97 + s).astype(np.uint8)
                    z.append(block, k, rec)
                z.sync()
            t = median_time(lambda: zrecord.Zrecord(d).close(), repeat=5)
            with zrecord.Zrecord(d) as z:
                out = np.empty((256, rec), np.uint8)
                idx = [rng.integers(0, n, 256).astype(np.uint64) for _ in range(200)]
                for ix in idx:
                    z.gather(ix, out, rec)
                g = median_time(lambda: [z.gather(ix, out, rec) for ix in idx], repeat=3) / len(idx)
            rows.append([f"{n:,}", f"{g * 1e6:.1f} µs", f"{t * 1e3:.2f} ms"])
            shutil.rmtree(d, ignore_errors=True)
        table("Scale: random gather of 256 x 256-byte flate records, and open() time",
              ["records", "gather per batch", "open()"], rows)
        if not args.quick:
            rss_rows = []
            big = work / "big.npy"
            n = (4 << 30) // 12288
            arr = np.lib.format.open_memmap(big, mode="w+", dtype=np.uint8, shape=(n, 3, 64, 64))
            block = make_records(4096)
            for s in range(0, n, 4096):
                e = min(n, s + 4096)
                arr[s:e] = block[: e - s]
            arr.flush()
            del arr
            for mod in ("zrecord", "loaderx"):
                code = (f"import numpy as np, {mod} as m;"
                        f"m.Dataset.write({str(work / ('w-' + mod))!r}, np.load({str(big)!r}, mmap_mode='r')).close()")
                t = time.perf_counter()
                p = subprocess.run(["/usr/bin/time", "-f", "%M", sys.executable, "-c", code], capture_output=True, text=True)
                dt = time.perf_counter() - t
                if p.returncode != 0:
                    SKIPPED.append(f"{mod} 4 GiB write: {p.stderr.strip().splitlines()[-1]}")
                    continue
                peak = int(p.stderr.strip().splitlines()[-1])
                rss_rows.append([mod, f"{peak / 1024:.0f} MiB", f"{4096 / dt:.0f} MiB/s"])
                shutil.rmtree(work / ("w-" + mod), ignore_errors=True)
            table("Dataset.write of a 4 GiB np.load(mmap_mode='r') array", ["package", "peak RSS", "write"], rss_rows)
    finally:
        shutil.rmtree(work, ignore_errors=True)
