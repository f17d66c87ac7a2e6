"""Whole loaders, batches with labels from worker threads or processes: zrecord against
loaderx, torch's DataLoader over .npy memmaps and Grain over ArrayRecord on every data set
(`loader`, warm or from a cold page cache), and both store and loader on one core and on all of them (`threads`).
"""

import gc
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from contenders import GRAIN, ArrayRecord, array_record_loader, array_record_writer, has_zstd, reference, torch_npy_loader
from data_sets import batch_size_for, load_set, selected_sets
from measure import RESULTS, SKIPPED, evict, optional, table


#: Rounds of every loader per data set; the median counts.
LOADER_ROUNDS = 3


def settle(threads, within=10.0):
    """Waits (at most `within` seconds) until no more Python threads run than `threads`:
    a closed loader's threads may still finish reads they started (Grain's shuts its pool
    down without waiting), and the next loader must not be timed beside them. The first
    loader of each round ran at half speed before this wait."""
    gc.collect()
    deadline = time.perf_counter() + within
    while threading.active_count() > threads and time.perf_counter() < deadline:
        time.sleep(0.01)


def bench_loader(args):
    import zrecord
    loaderx = optional("loaderx")
    torch = None if args.no_torch else optional("torch")
    grain = optional("grain")
    array_record = array_record_writer()
    workers = args.workers
    for set_name in selected_sets(args):
        data, desc = load_set(set_name, args)
        if data is None:
            continue
        n = len(data)
        batch = batch_size_for(data)
        steps = 300 if not args.quick else 60
        if data[0].nbytes * batch * steps > 1 << 30:
            steps = max(20, (1 << 30) // (data[0].nbytes * batch))
        if args.cold:
            steps = min(steps, max(10, n // (2 * batch)))  # about half the set: mostly first touches
        labels = np.arange(n, dtype=np.int64)
        work = Path(tempfile.mkdtemp(prefix="zrbench-", dir=args.workdir))
        res = {}
        try:
            def run_loader(name, make, files):
                # Cold: evict before the loader opens anything, and time everything from the
                # constructor to the last batch: the cold first epoch as a job sees it
                # (opening, the first batch's wait, any background warming), per batch.
                if args.cold:
                    evict(files)
                    t = time.perf_counter()
                    loader = make()
                    it = iter(loader)
                    for _ in range(steps):
                        b = next(it)
                    return loader, b, (time.perf_counter() - t) / steps
                loader = make()
                it = iter(loader)
                for _ in range(20):
                    b = next(it)
                t = time.perf_counter()
                for _ in range(steps):
                    b = next(it)
                elapsed = (time.perf_counter() - t) / steps
                return loader, b, elapsed

            # (package, module, codec, Dataset.write keywords, DataLoader keywords)
            variants = [("zrecord", zrecord, "flate", {}, {}), ("zrecord", zrecord, "raw", {}, {})]
            if "min_savings" in (zrecord.Dataset.write.__doc__ or ""):
                variants.insert(1, ("zrecord", zrecord, "flate", {"min_savings": 0.0}, {}))
            if has_zstd():
                variants.insert(2, ("zrecord", zrecord, "zstd", {}, {}))
            if args.cold and "warm" in (zrecord.DataLoader.__doc__ or ""):
                # The loader warms a store that fits in memory by default; this row is what
                # a store too large to warm gets: every record read from disk on its own.
                variants.insert(1, ("zrecord", zrecord, "flate", {}, {"warm": False}))
            if loaderx is not None:
                variants += [("loaderx", loaderx, "flate", {}, {}), ("loaderx", loaderx, "raw", {}, {})]
            # Every store is written first; then each loader runs once per round, in turn,
            # and its median round counts: a loader's figure moved by a third between runs
            # when each ran once, so one slow spell of the machine could decide a ratio.
            contenders = []  # (name, make, files, close)
            written = {}
            for label, mod, codec, kw, loader_kw in variants:
                tag = f"{label} {codec}" + (", min_savings=0" if kw else "") + (", warm=False" if loader_kw else "")
                if args.only_loader and args.only_loader not in tag:
                    continue
                key = (label, codec, tuple(sorted(kw.items())))
                if key not in written:
                    dpath, lpath = work / f"{len(written)}-d", work / f"{len(written)}-l"
                    mod.Dataset.write(dpath, data, codec=codec, **kw).close()
                    mod.Dataset.write(lpath, labels, codec=codec).close()
                    written[key] = (dpath, lpath)
                dpath, lpath = written[key]
                holder = {}

                def make(mod=mod, dpath=dpath, lpath=lpath, holder=holder, loader_kw=loader_kw):
                    holder["d"], holder["l"] = mod.Dataset(dpath), mod.Dataset(lpath)
                    return mod.DataLoader(holder["d"], holder["l"], num_workers=workers, batch_size=batch, **loader_kw)

                def close(loader, holder=holder):
                    loader.close()
                    holder["d"].close()
                    holder["l"].close()

                contenders.append((tag, make, [dpath, lpath], close))
            if torch is not None and not args.only_loader:
                np.save(work / "d.npy", data)
                np.save(work / "l.npy", labels)

                def make_torch():
                    return torch_npy_loader(torch, work / "d.npy", work / "l.npy", batch)

                contenders.append(("torch (npy memmap, 4 procs)", make_torch, [work / "d.npy", work / "l.npy"],
                                   lambda loader: None))
            if grain is not None and array_record is not None and not args.only_loader:
                ArrayRecord((array_record, None)).write(data, work / "d.array_record")

                def make_grain():
                    return array_record_loader(grain, work / "d.array_record", batch, data.dtype, data.shape[1:])

                contenders.append((GRAIN, make_grain, [work / "d.array_record"], lambda loader: loader.close()))
            rounds = {name: [] for name, *_ in contenders}
            for _ in range(LOADER_ROUNDS if not args.quick else 1):
                for name, make, files, close in contenders:
                    threads = threading.active_count()
                    loader, b, elapsed = run_loader(name, make, files)
                    if "torch" not in name:
                        got = b if name == GRAIN else b["data"]
                        assert got.shape == (batch, *data.shape[1:]), name
                    close(loader)
                    del loader, b
                    rounds[name].append(elapsed)
                    settle(threads)
            res = {name: float(np.median(times)) for name, times in rounds.items()}
        finally:
            shutil.rmtree(work, ignore_errors=True)
        RESULTS[("loader-cold" if args.cold else "loader", set_name)] = res
        batch_mib = batch * data[0].nbytes / 2**20
        rows = []
        torch_t = res.get("torch (npy memmap, 4 procs)")
        for name, dt in res.items():
            # torch reads raw rows and Grain zstd-compressed ones: both against loaderx flate.
            ref = res.get(reference(name) if "torch" not in name and name != GRAIN else "loaderx flate")
            rows.append([name, f"{1 / dt:.1f}", f"{dt * 1e3:.2f} ms", f"{batch / dt:,.0f}", f"{batch_mib / dt:.0f} MiB/s",
                         f"{ref / dt:.2f}x" if ref else "-", f"{torch_t / dt:.2f}x" if torch_t else "-"])
        cache = ("cold page cache: files evicted before each loader starts, timed from its constructor to the last "
                 "batch" if args.cold else "warm page cache")
        rounds_note = f"median of {LOADER_ROUNDS} rounds" if not args.quick else "one round"
        table(f"Loader [{set_name}]: {desc}, batches of {batch} with labels, {workers} workers, {steps} steps "
              f"({rounds_note}), {cache}",
              ["loader", "batches/s", "per batch", "samples/s", "throughput", "vs loaderx (same codec)", "vs torch"],
              rows)


def bench_threads(args):
    """Gather and loader throughput on 1 core and on all of them: the same script run
    under `taskset` (rayon and the loader size their pools from the process's CPU
    affinity), zrecord flate and raw only."""
    cpus = sorted(os.sched_getaffinity(0))
    if not shutil.which("taskset"):
        SKIPPED.append("threads: taskset not found")
        return
    base = [sys.executable, "-W", "ignore", str(Path(__file__).resolve().parent / "bench.py")]
    common = ["--sets", args.sets, "--workers", str(args.workers), "--no-torch"] + (["--quick"] if args.quick else [])
    if args.workdir:
        common += ["--workdir", args.workdir]
    for label, cpu_list in (("1 core", str(cpus[0])), (f"{len(cpus)} cores", ",".join(map(str, cpus)))):
        print(f"\n#### {label} (taskset -c {cpu_list})")
        sys.stdout.flush()
        for part in ("store", "loader"):
            extra = ["--only", "zrecord flate,zrecord raw"] if part == "store" else ["--only-loader", "zrecord"]
            subprocess.run(["taskset", "-c", cpu_list, *base, part, *common, *extra], check=False)
