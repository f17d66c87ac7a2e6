"""The seed's headline: a raw random batch gather from Python, against loaderx 0.5.4 and a
memory-mapped ``.npy`` indexed by numpy, in one process.

20,000 records of ``uint8 (3, 64, 64)`` smooth images (12 KiB each), raw codec; each round
reads 200 batches of 256 random indices through every reader in turn (the same indices),
and the table gives each round, the median of three and the ratios of the medians. Two
consumers: one that drops each batch before the next (a training step), and one that keeps
all 200 (a list of batches, or a prefetch queue: every batch is then new memory). Beside
them ``Zrecord.gather`` into one reused buffer, and a plain copy of the same bytes between
two buffers (the memory's rate, the ceiling). Checksums are checked on every zrecord read.

Then the same records stored with DEFLATE on both sides (``min_savings=0``, loaderx's rule):
write and gather against loaderx.
"""

import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from measure import RESULTS, SKIPPED, table

N, SHAPE, BATCH, BATCHES, ROUNDS = 20_000, (3, 64, 64), 256, 200, 3
TARGETS = {"loaderx": 1.3, "numpy": 1.1}


def _images(n, rng):
    base = np.linspace(0, 255, int(np.prod(SHAPE))).reshape(SHAPE)
    return (base[None] + rng.integers(0, 8, (n, *SHAPE))).astype(np.uint8)


def _rate(fn, idxs, keep):
    held = []
    t = time.perf_counter()
    for ix in idxs:
        out = fn(ix)
        if keep:
            held.append(out)
    dt = time.perf_counter() - t
    del held
    return len(idxs) * BATCH * int(np.prod(SHAPE)) / 2**20 / dt


def bench_headline(args):
    """Raw gather from Python: zrecord, loaderx 0.5.4 and numpy memmap, one process."""
    import zrecord

    try:
        import loaderx
    except ImportError:
        SKIPPED.append("headline: loaderx is not installed")
        return
    n = 4000 if args.quick else N
    batches = 20 if args.quick else BATCHES
    rng = np.random.default_rng(0)
    work = Path(tempfile.mkdtemp(prefix="zrecord-bench-headline-", dir=args.workdir))
    try:
        data = _images(n, rng)
        np.save(work / "x.npy", data)
        zrecord.Dataset.write(work / "z", data, codec="raw").close()
        loaderx.Dataset.write(str(work / "l"), data, codec="raw")
        z = zrecord.Dataset(work / "z")
        lx = loaderx.Dataset(str(work / "l"))
        mm = np.load(work / "x.npy", mmap_mode="r")
        store = z.store
        item = int(np.prod(SHAPE))
        reused = np.empty((BATCH, *SHAPE), np.uint8)
        src, dst = np.empty_like(reused), np.empty_like(reused)
        src[:] = 1

        def into_reused(ix):
            store.gather(ix, reused, item)
            return reused

        def copy(ix):
            np.copyto(dst, src)
            return dst

        readers = {
            "zrecord ds[idx], dropped": (z.__getitems__, False),
            "loaderx 0.5.4, dropped": (lx.__getitems__, False),
            "numpy memmap mm[idx], dropped": (lambda ix: mm[ix], False),
            "zrecord ds[idx], kept": (z.__getitems__, True),
            "loaderx 0.5.4, kept": (lx.__getitems__, True),
            "numpy memmap mm[idx], kept": (lambda ix: mm[ix], True),
            "zrecord Zrecord.gather into one buffer": (into_reused, False),
            "memory copy of the same bytes (np.copyto)": (copy, False),
        }
        idxs = [rng.integers(0, n, BATCH) for _ in range(batches)]
        for fn, _ in readers.values():
            fn(idxs[0])
        got = {name: [] for name in readers}
        for _ in range(1 if args.quick else ROUNDS):
            for name, (fn, keep) in readers.items():
                got[name].append(_rate(fn, idxs, keep))
        for a, b in [(z[idxs[1]], mm[idxs[1]]), (lx.__getitems__(idxs[1]), mm[idxs[1]])]:
            np.testing.assert_array_equal(a, b)
        z.close()
        lx.close()
        med = {k: float(np.median(v)) for k, v in got.items()}
        rows = []
        verdicts = {}
        for name, values in got.items():
            cells = [name, " / ".join(f"{v:,.0f}" for v in values), f"{med[name]:,.0f}"]
            if name.startswith("zrecord ds"):
                kind = name.split(", ")[1]
                ratios = []
                for peer, target in TARGETS.items():
                    peer_name = next(k for k in got if k.startswith(peer) and k.endswith(kind))
                    r = med[name] / med[peer_name]
                    verdicts[f"{kind} vs {peer}"] = (r, target)
                    ratios.append(f"{r:.2f}x {peer} (target {target}x: {'met' if r >= target else '**not met**'})")
                cells.append("; ".join(ratios))
            elif name.startswith("zrecord Zrecord.gather"):
                r = med[name] / med["memory copy of the same bytes (np.copyto)"]
                cells.append(f"{r:.2f}x the memory copy")
            else:
                cells.append("")
            rows.append(cells)
        table(f"Raw random batch gather from Python ({n:,} records of uint8 {SHAPE}, {batches} batches of {BATCH}, "
              f"MiB/s per round and median of {1 if args.quick else ROUNDS}; checksums checked on every zrecord read)",
              ["reader", "MiB/s each round", "median", "vs peers"], rows)
        RESULTS[("headline",)] = verdicts
        _deflate(args, zrecord, loaderx, data, work, idxs)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _deflate(args, zrecord, loaderx, data, work, idxs):
    """DEFLATE on both sides, min_savings=0: write and gather against loaderx."""
    times = {"write": {"zrecord": [], "loaderx": []}, "gather": {"zrecord": [], "loaderx": []}}
    for r in range(1 if args.quick else ROUNDS):
        for who in ("zrecord", "loaderx"):
            path = work / f"{who}-flate-{r}"
            t = time.perf_counter()
            if who == "zrecord":
                zrecord.Dataset.write(path, data, codec="flate", min_savings=0.0).close()
            else:
                loaderx.Dataset.write(str(path), data, codec="flate")
            times["write"][who].append(time.perf_counter() - t)
        for who in ("zrecord", "loaderx"):
            path = work / f"{who}-flate-{r}"
            ds = zrecord.Dataset(path) if who == "zrecord" else loaderx.Dataset(str(path))
            ds.__getitems__(idxs[0])
            t = time.perf_counter()
            for ix in idxs:
                ds.__getitems__(ix)
            times["gather"][who].append(time.perf_counter() - t)
            ds.close()
    rows = []
    flate = {}
    for what, target in (("write", 2.0), ("gather", 3.0)):
        z, lx = (float(np.median(times[what][w])) for w in ("zrecord", "loaderx"))
        r = lx / z
        flate[what] = (r, target)
        spread = lambda w: "-".join(f"{x:.3f}" for x in (min(times[what][w]), max(times[what][w])))  # noqa: E731
        rows.append([what, f"{z:.3f} s ({spread('zrecord')})", f"{lx:.3f} s ({spread('loaderx')})", f"{r:.2f}x",
                     f">= {target}x", "met" if r >= target else "**not met**"])
    table("DEFLATE on both sides (min_savings=0): the same records, written and gathered (median, min-max)",
          ["step", "zrecord", "loaderx 0.5.4", "zrecord vs loaderx", "target", ""], rows)
    RESULTS[("headline", "flate")] = flate


def summary_rows(row):
    """The headline's targets, for the targets table."""
    got = RESULTS.get(("headline",))
    if got:
        for name, (r, target) in got.items():
            row(f"raw gather from Python, batches {name}", f"{r:.2f}x", f">= {target}x", r >= target)
    flate = RESULTS.get(("headline", "flate"))
    if flate:
        for what, (r, target) in flate.items():
            row(f"DEFLATE {what} vs loaderx (min_savings=0), the headline's images", f"{r:.2f}x", f">= {target}x",
                r >= target)
