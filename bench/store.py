"""Random batches gathered from a store: zrecord against its peers on every data set
(`store`, warm or from a cold page cache), what each `min_savings` threshold costs and buys
(`policy`), the Python path against the engine's own gather (`pool`), and what per-record
checksums cost (`checksums`).
"""

import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from contenders import gather_all, reference, store_contenders
from data_sets import load_set, random_batches, selected_sets
from measure import RESULTS, SKIPPED, disk_usage, evict, median_time, table


def bench_store(args):
    for set_name in selected_sets(args):
        data, desc = load_set(set_name, args)
        if data is None:
            continue
        n = len(data)
        batch = 256
        batches = (200 if not args.quick else 40) if not args.cold else (20 if not args.quick else 5)
        rng = np.random.default_rng(1)
        idxs = [rng.integers(0, n, batch) for _ in range(batches)]
        mib = data.nbytes / 2**20
        results = {}
        for c in store_contenders():
            if args.only and not any(o in c.name for o in args.only.split(",")):
                continue
            work = Path(tempfile.mkdtemp(prefix="zrbench-", dir=args.workdir))
            path = work / "store"
            try:
                # Best of up to three writes: each ends in an fsync whose time on a shared
                # disk varies more than the work does. Slow writers (over 8 s) get one.
                wts = []
                while len(wts) < 3 and (not wts or max(wts) < 8):
                    if wts:
                        shutil.rmtree(path, ignore_errors=True)
                        if path.exists():
                            path.unlink()
                    os.sync()  # start each timed write with no other writeback pending
                    t = time.perf_counter()
                    c.write(data, path)
                    wts.append(time.perf_counter() - t)
                wt = min(wts)
                c.open(path)
                # Check the contents once (this also warms the page cache).
                got = c.gather(idxs[0])
                assert np.array_equal(got, data[idxs[0]]), c.name
                if args.cold:
                    # Every batch from a cold cache, as in a data set far larger than memory:
                    # close (a mapped page is never dropped), evict, then time opening and
                    # the batch: what a reader reads at open (ArrayRecord its whole index)
                    # is metadata a cold batch needs too. Evicting once per pass instead
                    # would let readahead-based readers warm the rest of a small file and
                    # time mostly cached reads.
                    def cold_pass():
                        total = 0.0
                        for ix in idxs:
                            c.close()
                            evict([path])
                            t = time.perf_counter()
                            c.open(path)
                            c.gather(ix)
                            total += time.perf_counter() - t
                        return total
                    gt = float(np.median([cold_pass() for _ in range(3)])) / batches
                else:
                    t = time.perf_counter()
                    c.gather(idxs[1])
                    if time.perf_counter() - t > 0.02:
                        # A slow contender (over 20 ms a batch): one timed pass over the
                        # first 20 batches, so it does not hold the run for minutes.
                        gt = median_time(lambda: gather_all(c, idxs[:20]), repeat=1) / 20
                    else:
                        gather_all(c, idxs)
                        gt = median_time(lambda: gather_all(c, idxs), repeat=3) / batches
                c.close()
                results[c.name] = (wt, gt, disk_usage(path))
            except Exception as e:  # noqa: BLE001
                SKIPPED.append(f"{c.name} ({set_name}): {type(e).__name__}: {e}".splitlines()[0])
            finally:
                shutil.rmtree(work, ignore_errors=True)
        RESULTS[("store-cold" if args.cold else "store", set_name)] = dict(results, _bytes=data.nbytes)
        batch_mib = batch * data[0].nbytes / 2**20
        rows = []
        npy = results.get("npy memmap")
        for name, (wt, gt, du) in results.items():
            rw, rg, _ = results.get(reference(name), (None, None, None))
            rows.append([name, f"{mib / wt:.0f} MiB/s", f"{batch_mib / gt:.0f} MiB/s", f"{gt * 1e3:.2f} ms",
                         f"{du / 2**20:.1f} MiB", f"{data.nbytes / du:.2f}x",
                         f"{rw / wt:.2f}x" if rw else "-", f"{rg / gt:.2f}x" if rg else "-",
                         f"{npy[1] / gt:.2f}x" if npy else "-"])
        cache = ("cold page cache: files evicted before every batch, timed from opening" if args.cold
                 else "warm page cache")
        table(f"Store [{set_name}]: {n} x {desc}, {data[0].nbytes:,} B each, random batch {batch} x {batches}, {cache}",
              ["store", "write", "gather", "per batch", "on disk", "ratio", "write vs loaderx", "gather vs loaderx",
               "gather vs npy"], rows)


# ----------------------------------------------------------------------------- policy

POLICY_THRESHOLDS = (0.0, 0.05, 0.10, 0.125, 0.15, 0.20, 0.30)


def bench_policy(args):
    """What each `min_savings` costs in disk and buys in read speed, per data set: the
    numbers behind the default (docs/decisions/min-savings.md). Every threshold's store is written and
    gathered in the same process; speeds are relative to min_savings=0 (loaderx's rule)."""
    import zrecord
    from zrecord import tools

    for set_name in selected_sets(args):
        data, desc = load_set(set_name, args)
        if data is None:
            continue
        n = len(data)
        batch, batches, idxs = random_batches(data, args, seed=6)
        work = Path(tempfile.mkdtemp(prefix="zrbench-", dir=args.workdir))
        res = {}
        try:
            stores = {}
            for s in POLICY_THRESHOLDS:
                path = work / f"s{s}"
                zrecord.Dataset.write(path, data, codec="flate", min_savings=s).close()
                stores[s] = path
            raw = work / "raw"
            zrecord.Dataset.write(raw, data, codec="raw").close()
            # Interleave the thresholds over the repeats so load on the machine hits all alike.
            times = {s: [] for s in (*POLICY_THRESHOLDS, "raw")}
            dss = {s: zrecord.Dataset(p) for s, p in (*stores.items(), ("raw", raw))}
            for ds in dss.values():  # warm every store's pages, and the batch pool
                gather_all(_DsGather(ds), idxs)
            for _ in range(5 if not args.quick else 3):
                for s, ds in dss.items():
                    t = time.perf_counter()
                    gather_all(_DsGather(ds), idxs)
                    times[s].append((time.perf_counter() - t) / batches)
            for s, ds in dss.items():
                ins = tools.inspect(ds.path)
                res[s] = (float(np.median(times[s])), disk_usage(ds.path), ins.flate_records / max(1, ins.records))
                ds.close()
        finally:
            shutil.rmtree(work, ignore_errors=True)
        base_t, base_du, _ = res[0.0]
        batch_mib = batch * data[0].nbytes / 2**20
        rows = []
        for s, (gt, du, frac) in res.items():
            rows.append([s if s == "raw" else f"{s:.3f}", f"{frac * 100:.0f}%", f"{data.nbytes / du:.2f}x",
                         f"{(du - base_du) / base_du * 100:+.1f}%", f"{batch_mib / gt:.0f} MiB/s", f"{base_t / gt:.2f}x"])
        table(f"Codec policy [{set_name}]: {n} x {desc}, flate store per min_savings, random batch {batch} x {batches}, warm",
              ["min_savings", "records kept compressed", "ratio", "disk vs 0.0", "gather", "gather vs 0.0"], rows)


class _DsGather:
    def __init__(self, ds):
        self.ds = ds

    def gather(self, idx):
        return self.ds.__getitems__(idx)


def bench_pool(args):
    """`Dataset.__getitems__` against the engine's own speed on raw records, as a consumer
    holding the last k batches sees it (k = 0: each batch dropped before the next; a loader
    with prefetch, or a training step still using the previous batch, holds a few). Three
    ways to get a batch, timed in turn in the same process (best of interleaved rounds):
    `__getitems__` (pooled
    arrays), a fresh `np.empty` per batch filled by `Zrecord.gather` (what `__getitems__`
    did before the pool), and `Zrecord.gather` into one reused buffer (the ceiling)."""
    import collections

    import zrecord

    for set_name in selected_sets(args):
        data, desc = load_set(set_name, args)
        if data is None:
            continue
        batch, batches, idxs = random_batches(data, args, seed=7)
        work = Path(tempfile.mkdtemp(prefix="zrbench-", dir=args.workdir))
        rows = []
        try:
            ds = zrecord.Dataset.write(work / "raw", data, codec="raw")
            store, item = ds.store, data[0].nbytes
            reused = np.empty((batch, *data.shape[1:]), data.dtype)

            def fresh(ix):
                out = np.empty((batch, *data.shape[1:]), data.dtype)
                store.gather(ix, out, item)
                return out

            def into_reused(ix):
                store.gather(ix, reused, item)
                return None

            ways = {"Dataset.__getitems__": ds.__getitems__, "np.empty + gather (before)": fresh,
                    "gather into one buffer": into_reused}
            for held in (0, 1, 4):
                times = {w: [] for w in ways}
                for _ in range(7 if not args.quick else 5):
                    for w, f in ways.items():
                        live = collections.deque(maxlen=held or 1)
                        t = time.perf_counter()
                        for ix in idxs:
                            b = f(ix)
                            if held:
                                live.append(b)
                            del b
                        times[w].append((time.perf_counter() - t) / batches)
                        live.clear()
                # Best round of each: on a shared machine the minimum is the least disturbed.
                med = {w: float(np.min(v)) for w, v in times.items()}
                RESULTS[("pool", set_name, held)] = med
                ceiling = med["gather into one buffer"]
                for w, dt in med.items():
                    rows.append([held, w, f"{batch * item / dt / 2**20:.0f} MiB/s", f"{dt * 1e6:.0f} µs",
                                 f"{dt / ceiling:.2f}x"])
            ds.close()
        finally:
            shutil.rmtree(work, ignore_errors=True)
        table(f"Python path [{set_name}]: raw store, {desc}, random batch {batch} x {batches}, warm",
              ["batches held", "how", "gather", "per batch", "time vs one buffer"], rows)


def bench_checksums(args):
    """Per-record checksums: gather with verification on vs off, and write with checksums
    kept vs not (``checksums=False`` writes as zrecord did before it kept them), in the
    same run. On and off alternate, so drifting load on a shared machine hits both.

    The synthetic structured set barely compresses (ratio 1.06), so the default codec
    policy stores it raw; its flate row passes ``min_savings=0`` to measure DEFLATE on
    every record, and the token set's row measures it on data the policy does compress."""
    import zrecord
    batches = 200 if not args.quick else 40
    rounds = 7 if not args.quick else 2
    cases = [("structured", "flate", 0.0), ("structured", "raw", None)]
    if not args.quick:
        cases.append(("tokens", "flate", None))
    rows = []
    for set_name, codec, min_savings in cases:
        data, desc = load_set(set_name, args)
        if data is None:
            continue
        n = len(data)
        rng = np.random.default_rng(2)
        idxs = [rng.integers(0, n, 256) for _ in range(batches)]
        data = data.reshape(n, -1).view(np.uint8)
        item = data[0].nbytes
        mib = data.nbytes / 2**20
        step = max(1, (64 << 20) // item)
        kw = {} if min_savings is None else {"min_savings": min_savings}
        work = Path(tempfile.mkdtemp(prefix="zrbench-", dir=args.workdir))
        try:
            writes = {True: [], False: []}
            for r in range(rounds):
                for keep in (True, False) if r % 2 == 0 else (False, True):
                    path = work / f"w{int(keep)}{r}"
                    os.sync()  # start each timed write with no other writeback pending
                    t = time.perf_counter()
                    with zrecord.Zrecord(path, codec=codec, checksums=keep, **kw) as z:
                        for s in range(0, n, step):
                            k = min(step, n - s)
                            z.append(data[s:s + k], k, item)
                        z.sync()
                    writes[keep].append(time.perf_counter() - t)
                    if r < rounds - 1:
                        shutil.rmtree(path)
            path = work / f"w1{rounds - 1}"
            stores = {v: zrecord.Zrecord(path, create=False, verify=v) for v in ("auto", "never")}
            assert stores["auto"].checksums
            st = stores["auto"].stats()
            out = np.empty((256, item), np.uint8)

            def one_pass(z):
                for ix in idxs:
                    z.gather(ix, out, item)

            for z in stores.values():
                one_pass(z)  # warm the page cache
                z.gather(idxs[0], out, item)
                assert np.array_equal(out, data[idxs[0]])
            reads = {"auto": [], "never": []}
            for r in range(rounds * 2):
                for v in ("auto", "never") if r % 2 == 0 else ("never", "auto"):
                    t = time.perf_counter()
                    one_pass(stores[v])
                    reads[v].append((time.perf_counter() - t) / batches)
            for z in stores.values():
                z.close()
        finally:
            shutil.rmtree(work, ignore_errors=True)
        # Writes end in fsyncs, whose time on a shared disk varies far more than the work
        # does: the best of the rounds is the least disturbed measure of each.
        w_on, w_off = float(np.min(writes[True])), float(np.min(writes[False]))
        g_on, g_off = float(np.median(reads["auto"])), float(np.median(reads["never"]))
        batch_mib = 256 * item / 2**20
        stored = "every record DEFLATE" if min_savings == 0.0 else "default policy"
        ratio = data.nbytes / max(1, st["live_bytes"])
        RESULTS.setdefault(("checksums",), []).append(
            (f"{set_name}, {codec} ({stored})", codec, w_on / w_off - 1, g_on / g_off - 1))
        rows.append([f"{set_name}, {codec} ({stored}, ratio {ratio:.2f})",
                     f"{mib / w_on:.0f} MiB/s", f"{mib / w_off:.0f} MiB/s", f"{(w_on / w_off - 1) * 100:+.1f}%",
                     f"{batch_mib / g_on:.0f} MiB/s", f"{batch_mib / g_off:.0f} MiB/s",
                     f"{(g_on / g_off - 1) * 100:+.1f}%"])
    table(f"Checksums: random batch 256 x {batches}, best of {rounds} writes, median of {rounds * 2} gather passes, "
          f"on and off alternating (warm page cache)",
          ["set, store", "write, checksums kept", "write, not kept", "write cost", "gather, verify on",
           "gather, verify off", "gather cost"], rows)
