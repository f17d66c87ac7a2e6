"""Datasets of named fields: what fields, ragged samples and shards cost, each against the
loaderx-style baseline it replaces, measured in the same run.

- the 3-field loader (image, label, ragged tokens) against the 2-field loaderx-style loader
  (a data Dataset and a label Dataset) on the same images and labels, in bytes moved per
  second (budget: within 10%);
- a ragged token field against a fixed field of the same total size, through the loader
  (budget: >= 80% of the fixed field's bytes/s);
- a dataset of 8 shards against the same records in one store, gathering random batches
  (budget: within 5%);
- SHUFFLE index generation against IID, per batch, at N = 2^24 and N = 2^32 (budget:
  within 2x).

Stores are raw, so what is compared is the machinery, not a codec. Every figure is the
median of interleaved rounds.
"""

import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from measure import RESULTS, median_time, table


def _throughput(make_loader, batches, rounds, nbytes_of, warmup):
    """Median bytes/s of `batches` batches from a fresh loader, over `rounds` rounds, each
    timed after `warmup` batches: by then the threads run and the buffer pool holds a
    buffer per field of every batch in flight, so what is timed is the steady state."""
    rates = []
    for _ in range(rounds):
        with make_loader() as loader:
            for _ in range(warmup):
                next(loader)
            moved = 0
            t = time.perf_counter()
            for _ in range(batches):
                moved += nbytes_of(next(loader))
            rates.append(moved / (time.perf_counter() - t))
    return float(np.median(rates)), rates


def _interleaved(contenders, rounds):
    """Each contender once per round, rounds times: median and all values per name."""
    values = {name: [] for name in contenders}
    for _ in range(rounds):
        for name, run in contenders.items():
            values[name].append(run())
    return {name: (float(np.median(v)), v) for name, v in values.items()}


def bench_fields(args):
    """Named fields, ragged samples and shards against what they replace."""
    import zrecord

    quick = args.quick
    n = 4000 if quick else 20000
    # Rounds of about half a second each: shorter ones spread 30-40% on a 2-core machine.
    batches = 20 if quick else 800
    rounds = 3 if quick else 5
    warmup = 4 if quick else 30
    batch = 256
    workers = args.workers
    shuffle, iid = zrecord.Sampler.Mode.SHUFFLE, zrecord.Sampler.Mode.IID
    rng = np.random.default_rng(7)
    base = np.add.outer(np.arange(64, dtype=np.uint16), np.arange(64, dtype=np.uint16)).astype(np.uint8)
    images = (base[None, None] + rng.integers(0, 32, (n, 3, 1, 1), dtype=np.uint8)).astype(np.uint8)
    images = np.ascontiguousarray(np.broadcast_to(images, (n, 3, 64, 64)))
    labels = np.arange(n, dtype=np.int64)
    lengths = rng.integers(256, 769, n)
    docs = [rng.integers(0, 32000, int(k), dtype=np.uint16) for k in lengths]
    work = Path(tempfile.mkdtemp(prefix="zrbench-fields-", dir=args.workdir))
    out = {}
    try:
        three = zrecord.Dataset.write(work / "three", {"image": images, "label": labels, "tokens": docs}, codec="raw")
        data = zrecord.Dataset.write(work / "data.zr", images, codec="raw")
        label = zrecord.Dataset.write(work / "label.zr", labels, codec="raw")
        fixed_tokens = np.ascontiguousarray(rng.integers(0, 32000, (n, int(lengths.mean())), dtype=np.uint16))
        ragged = zrecord.Dataset.write(work / "ragged", {"tokens": docs}, codec="raw")
        fixed = zrecord.Dataset.write(work / "fixed", {"tokens": fixed_tokens}, codec="raw")
        one = zrecord.Dataset.write(work / "one", {"image": images}, codec="raw")
        eight = zrecord.Dataset.write(work / "eight", {"image": images}, codec="raw", shard_records=-(-n // 8))
        # The kernel writes the new stores back 30 s later, in the middle of whichever round
        # runs then: written back now, before any round.
        os.sync()

        def nbytes(b):
            return sum(v.nbytes for k, v in b.items() if not k.endswith("_offsets"))

        def loader_rate(make):
            return lambda: _throughput(make, batches, 1, nbytes, warmup)[0]

        rates = _interleaved({
            "3 fields (image, label, ragged tokens)": loader_rate(
                lambda: zrecord.DataLoader(three, batch_size=batch, mode=shuffle, num_workers=workers, warm=False)),
            "2 fields, loaderx style (data, label)": loader_rate(
                lambda: zrecord.DataLoader(data, label, batch_size=batch, mode=shuffle, num_workers=workers, warm=False)),
        }, rounds)
        a, b = rates["3 fields (image, label, ragged tokens)"], rates["2 fields, loaderx style (data, label)"]
        table(f"Fields: DataLoader bytes/s, SHUFFLE, {batch} per batch, {workers} workers, median of {rounds} rounds",
              ["loader", "MiB/s", "rounds (MiB/s)", "vs 2 fields"],
              [[name, f"{m / 2**20:,.0f}", ", ".join(f"{x / 2**20:,.0f}" for x in v), f"{m / b[0]:.2f}x"]
               for name, (m, v) in rates.items()])
        out["three_vs_two"] = a[0] / b[0]

        rates = _interleaved({
            "ragged tokens (256-768 per sample)": loader_rate(
                lambda: zrecord.DataLoader(ragged, batch_size=batch, mode=shuffle, num_workers=workers, warm=False)),
            f"fixed tokens ({fixed_tokens.shape[1]} per sample)": loader_rate(
                lambda: zrecord.DataLoader(fixed, batch_size=batch, mode=shuffle, num_workers=workers, warm=False)),
        }, rounds)
        (ra, rv), (fa, fv) = rates.values()
        table("Fields: a ragged token field against a fixed one of the same total size (DataLoader bytes/s)",
              ["field", "MiB/s", "rounds (MiB/s)", "vs fixed"],
              [[name, f"{m / 2**20:,.0f}", ", ".join(f"{x / 2**20:,.0f}" for x in v), f"{m / fa:.2f}x"]
               for name, (m, v) in rates.items()])
        out["ragged_vs_fixed"] = ra / fa

        idx = [np.sort(rng.choice(n, batch, replace=False)) for _ in range(20 if quick else 200)]
        dst = np.empty((batch, 3, 64, 64), np.uint8)
        gathers = {}
        for name, d in (("1 store", one), ("8 shards", eight)):
            native = d._native

            def run(native=native):
                t = time.perf_counter()
                for i in idx:
                    native.gather(0, i, dst)
                return len(idx) * dst.nbytes / (time.perf_counter() - t)
            gathers[name] = run
        gather_rounds = 3 if quick else 9
        rates = _interleaved(gathers, gather_rounds)
        (oa, _), (ea, _) = rates["1 store"], rates["8 shards"]
        table(f"Fields: gathering {batch} random images of 12 KiB, one dataset of 8 shards against one store "
              f"(median of {gather_rounds} rounds)", ["dataset", "MiB/s", "rounds (MiB/s)", "vs 1 store"],
              [[name, f"{m / 2**20:,.0f}", ", ".join(f"{x / 2**20:,.0f}" for x in v), f"{m / oa:.2f}x"]
               for name, (m, v) in rates.items()])
        out["eight_vs_one"] = ea / oa

        rows = []
        for space in (1 << 24, 1 << 32):
            for size in (256, 8192):
                number = 200 if quick else 2000
                times = {}
                for name, mode in (("IID", iid), ("SHUFFLE", shuffle)):
                    s = zrecord.Sampler(space, size, int(mode), 42)  # the stream at world size 1
                    s.next()
                    times[name] = median_time(s.next, repeat=7, number=number)
                ratio = times["SHUFFLE"] / times["IID"]
                rows.append([f"2^{space.bit_length() - 1}", f"{size:,}", f"{times['IID'] * 1e6:.1f} µs",
                             f"{times['SHUFFLE'] * 1e6:.1f} µs", f"{ratio:.2f}x",
                             f"{times['SHUFFLE'] / size * 1e9:.1f} ns"])
                out[f"shuffle_vs_iid_{space.bit_length() - 1}_{size}"] = ratio
        table("Fields: stream index generation, SHUFFLE against IID (budget: within 2x)",
              ["N", "batch", "IID per batch", "SHUFFLE per batch", "SHUFFLE / IID", "SHUFFLE per index"], rows)
        for d in (three, data, label, ragged, fixed, one, eight):
            d.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    RESULTS[("fields",)] = out


def summary_rows(row):
    """The fields section's budgets, for the targets table."""
    f = RESULTS.get(("fields",))
    if not f:
        return
    r = f["three_vs_two"]
    row("fields: 3-field loader vs loaderx-style 2-field loader (bytes/s)", f"{r:.2f}x", ">= 0.9x", r >= 0.9)
    r = f["ragged_vs_fixed"]
    row("fields: ragged token field vs fixed field of the same size (bytes/s)", f"{r:.2f}x", ">= 0.8x", r >= 0.8)
    r = f["eight_vs_one"]
    row("fields: 8 shards vs 1 store, random gathers (bytes/s)", f"{r:.2f}x", ">= 0.95x", r >= 0.95)
    for key, value in sorted(f.items()):
        if key.startswith("shuffle_vs_iid_"):
            _, _, _, bits, size = key.split("_")
            row(f"stream: SHUFFLE vs IID per batch, N = 2^{bits}, batch {int(size):,}", f"{value:.2f}x the time",
                "<= 2x", value <= 2)
