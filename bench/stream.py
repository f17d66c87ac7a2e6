"""The sample stream: index generation against numpy's and loaderx's samplers, SHUFFLE
against IID, the cost of a loader's state and of resuming from it, and a rank's throughput
against an unsharded loader's (the budgets of docs/stream.md).
"""

import json
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from data_sets import make_records
from measure import RESULTS, median_time, optional, table


def bench_sampler(args):
    import zrecord
    loaderx = optional("loaderx")
    space = 1_000_000
    rows = []
    for batch in (256, 1024, 8192):
        number = 2000 if not args.quick else 200
        contenders = []
        rng = np.random.default_rng(0)
        contenders.append(("numpy randint", lambda: np.random.randint(0, space, batch)))
        contenders.append(("numpy default_rng", lambda: rng.integers(0, space, batch)))
        if loaderx is not None:
            from loaderx._sampler import Sampler as LxSampler
            lx = LxSampler(space, batch, 1, 42)
            contenders.append(("loaderx", lx.next))
        zs = zrecord.Sampler(space, batch, zrecord.Sampler.Mode.IID, 42)
        contenders.append(("zrecord", zs.next))
        res = {name: median_time(fn, repeat=7, number=number) for name, fn in contenders}
        base = res["numpy default_rng"]
        for name, t in res.items():
            ref = res.get("loaderx")
            rows.append([name, batch, f"{t * 1e6:.2f} µs", f"{batch / t / 1e6:.0f} M/s",
                         f"{base / t:.2f}x", f"{ref / t:.2f}x" if ref else "-"])
    table("Sampler: IID indices over a 1M space, through the Python binding",
          ["sampler", "batch", "per batch", "indices", "vs default_rng", "vs loaderx"], rows)


def bench_stream(args):
    """The stream's budgets, as ratios measured in this run: SHUFFLE against IID sampling at
    N = 2^24, state_dict(), a resumed loader's first batch at step 10^6 against a fresh
    one's, and a rank's throughput against an unsharded loader of the same batch."""
    import zrecord
    shuffle, iid = zrecord.Sampler.Mode.SHUFFLE, zrecord.Sampler.Mode.IID
    space = 1 << 24
    rows = []
    for batch in (256, 1024, 8192):
        number = 2000 if not args.quick else 200
        times = {}
        for name, mode in (("IID", iid), ("SHUFFLE", shuffle)):
            s = zrecord.Sampler(space, batch, mode, 42)
            times[name] = median_time(s.next, repeat=7, number=number)
        rows.append([f"{batch:,}", f"{times['IID'] * 1e6:.1f} µs", f"{times['SHUFFLE'] * 1e6:.1f} µs",
                     f"{times['SHUFFLE'] / times['IID']:.2f}x", f"{times['SHUFFLE'] / batch * 1e9:.1f} ns"])
        RESULTS.setdefault(("sampler",), []).append((batch, times["SHUFFLE"] / times["IID"]))
    table("Stream: Sampler.next() at N = 2^24, SHUFFLE against IID (budget: within 2x)",
          ["batch", "IID per batch", "SHUFFLE per batch", "SHUFFLE / IID", "SHUFFLE per index"], rows)

    work = Path(tempfile.mkdtemp(prefix="zrbench-", dir=args.workdir))
    try:
        # A store of N tiny records: what is timed is the stream and the threads, not I/O.
        n = space if not args.quick else 1 << 18
        # 4-byte records (each its own index) in a raw dataset: the stream, not the gather.
        tiny = zrecord.Dataset.write(work / "tiny", np.arange(n, dtype=np.uint32), codec="raw")
        tiny_a = zrecord.Dataset.write(work / "mix-a", np.arange(100_000, dtype=np.uint32))
        tiny_b = zrecord.Dataset.write(work / "mix-b", np.arange(30_000, dtype=np.uint32))
        repeat = 7 if not args.quick else 3

        rows = []
        for name, make in (
            ("SHUFFLE", lambda **kw: zrecord.DataLoader(tiny, tiny, batch_size=256, mode=shuffle, num_workers=2, **kw)),
            ("IID", lambda **kw: zrecord.DataLoader(tiny, tiny, batch_size=256, mode=iid, num_workers=2, **kw)),
            ("mixture of 2", lambda **kw: zrecord.DataLoader(
                zrecord.Mixture([(tiny_a, tiny_a), (tiny_b, tiny_b)], [0.7, 0.3]), batch_size=256, num_workers=2, **kw)),
        ):
            with make() as loader:
                next(loader)
                state = loader.state_dict()
                per_call = median_time(loader.state_dict, repeat=repeat, number=2000)
            far = dict(state, step=10**6)

            def first_batch(**kw):
                t = time.perf_counter()
                loader = make(**kw)
                next(loader)
                dt = time.perf_counter() - t
                loader.close()
                return dt

            def loaded_first_batch():
                t = time.perf_counter()
                loader = make()
                loader.load_state_dict(far)
                next(loader)
                dt = time.perf_counter() - t
                loader.close()
                return dt

            fresh = float(np.median([first_batch() for _ in range(repeat)]))
            resumed = float(np.median([first_batch(state=far) for _ in range(repeat)]))
            loaded = float(np.median([loaded_first_batch() for _ in range(repeat)]))
            rows.append([name, f"{per_call * 1e6:.1f} µs", f"{len(json.dumps(state))} B", f"{fresh * 1e3:.2f} ms",
                         f"{resumed * 1e3:.2f} ms", f"{resumed / fresh:.2f}x", f"{loaded * 1e3:.2f} ms",
                         f"{loaded / fresh:.2f}x"])
        table(f"Stream: state_dict() and the first batch of a loader resumed at step 10^6 (N = {n:,}, "
              "batch 256, 2 workers; budgets: state_dict under 20 µs, resumed within 2x of fresh)",
              ["stream", "state_dict()", "state size", "fresh: first batch", "state=: first batch",
               "vs fresh", "load_state_dict + first batch", "vs fresh"], rows)

        # Sharded against unsharded, same per-rank batch, image-like records.
        m = 20000 if not args.quick else 4000
        steps = 300 if not args.quick else 60
        d = zrecord.Dataset.write(work / "img-d", make_records(m))
        l = zrecord.Dataset.write(work / "img-l", np.arange(m, dtype=np.int64))
        res = {}
        # Rounds alternate the loaders, and each keeps its best round: on a shared machine
        # that compares the loaders rather than the moments they happened to run in.
        for _ in range(3):
            for name, kw in (("unsharded (world 1)", dict(world_size=1)),
                             ("rank 1 of 4", dict(rank=1, world_size=4)),
                             ("rank 3 of 8", dict(rank=3, world_size=8))):
                with zrecord.DataLoader(d, l, batch_size=256, mode=shuffle, num_workers=4, **kw) as loader:
                    for _ in range(10):
                        next(loader)
                    t = time.perf_counter()
                    for _ in range(steps):
                        next(loader)
                    dt = (time.perf_counter() - t) / steps
                res[name] = min(res.get(name, dt), dt)
        base = res["unsharded (world 1)"]
        rows = [[name, f"{256 / dt:,.0f}", f"{dt * 1e3:.2f} ms", f"{base / dt:.2f}x"] for name, dt in res.items()]
        table(f"Stream: per-rank throughput, SHUFFLE, 256 images of 12 KiB per rank, 4 workers, best of 3 "
              f"rounds of {steps} steps (budget: within 10% of unsharded)", ["loader", "samples/s", "per batch", "vs unsharded"], rows)
        d.close()
        l.close()
        tiny.close()
        tiny_a.close()
        tiny_b.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
