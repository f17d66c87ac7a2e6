"""Datasets that live: what changing a written dataset costs, against rewriting it.

A dataset of three fields (64x64x3 images, an int64 label, ragged uint16 tokens; about
1 GB, 40 MB with --quick) in shards of 2^16 samples, written once per round; then, each
timed against that write in the same round:

- appending 1% more rows (target: under 2% of the write);
- adding one int64 field to every row with ``Dataset.add_field`` (target: under 5%), with
  the default codec and raw;
- deleting 1% of the rows and compacting, spread over the dataset (every shard copied), and
  the same number from one shard, each beside the full rewrite (reported, no target: the
  spread delete copies every shard, which is a rewrite without the encode of new input; a
  dataset of named fields removes the bytes in the delete, so ``compact()`` finds nothing
  left and the pair costs what the delete does).

Every figure is the median of three rounds; the spread is printed beside it.
"""

import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from measure import RESULTS, table


def _fields(n, start, rng):
    return {
        "image": rng.integers(0, 256, (n, 64, 64, 3), dtype=np.uint8),
        "label": np.arange(start, start + n, dtype=np.int64),
        "tokens": [rng.integers(0, 50_000, int(k), dtype=np.uint16) for k in rng.integers(16, 512, n)],
    }


def _timed(fn):
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def bench_living(args):
    """Append, add_field and delete against a full write of the same dataset."""
    import zrecord

    n = 3000 if args.quick else 80_000
    shard = 1000 if args.quick else 1 << 16
    rng = np.random.default_rng(7)
    data = _fields(n, 0, rng)
    extra = _fields(max(1, n // 100), n, rng)
    scores = np.arange(n, dtype=np.int64)
    spread = np.arange(0, n, 100)
    bunched = np.arange(len(spread))
    rounds = 1 if args.quick else 3
    work = Path(tempfile.mkdtemp(prefix="zrecord-bench-living-", dir=args.workdir))
    times = {k: [] for k in ("write", "append 1%", "add_field int64", "add_field int64, raw", "delete + compact 1% spread",
                             "delete + compact 1% one shard")}
    size = 0
    try:
        for r in range(rounds):
            path = work / f"r{r}"
            times["write"].append(_timed(lambda: zrecord.Dataset.write(path, data, shard_records=shard).close()))
            size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
            times["append 1%"].append(
                _timed(lambda: zrecord.Dataset.write(path, extra, shard_records=shard, mode="append").close())
            )
            times["add_field int64"].append(
                _timed(lambda: zrecord.Dataset.add_field(path, "score", np.append(scores, scores[: len(extra["label"])])).close())
            )
            # The same column stored raw: what the per-record DEFLATE attempt on 8-byte
            # records costs (the default policy tries it, then stores them raw).
            times["add_field int64, raw"].append(
                _timed(lambda: zrecord.Dataset.add_field(path, "score_raw", np.append(scores, scores[: len(extra["label"])]),
                                                         codec="raw").close())
            )
            ds = zrecord.Dataset(path)
            times["delete + compact 1% spread"].append(_timed(lambda: (ds.delete(spread), ds.compact())))
            times["delete + compact 1% one shard"].append(_timed(lambda: (ds.delete(bunched), ds.compact())))
            ds.close()
            shutil.rmtree(path, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    med = {k: float(np.median(v)) for k, v in times.items()}
    targets = {"append 1%": 0.02, "add_field int64": 0.05}
    rows = []
    for name, values in times.items():
        share = med[name] / med["write"]
        target = targets.get(name)
        verdict = "" if target is None else ("met" if share < target else "**not met**")
        rows.append([name, f"{med[name]:.3f} s", f"{min(values):.3f}-{max(values):.3f} s",
                     "" if name == "write" else f"{share * 100:.1f}%",
                     "" if target is None else f"< {target * 100:g}%", verdict])
    table(f"Living datasets: changes against writing the dataset ({n:,} samples, {size / 1e6:,.0f} MB on disk, "
          f"shards of {shard:,}; median of {rounds})",
          ["change", "median", "spread", "share of the write", "target", ""], rows)
    RESULTS[("living",)] = {k: med[k] / med["write"] for k in med if k != "write"}


def bench_appends(args):
    """Many small appends, then compaction: an append's time after 1, 50 and 200 appends
    (target: the 200th within 1.3x of the first), and compaction's rate, rows/s and MB/s."""
    import zrecord

    appends = 40 if args.quick else 200
    rows = 10
    rng = np.random.default_rng(11)

    def chunk(k):
        return {
            "image": rng.integers(0, 256, (rows, 32, 32, 3), dtype=np.uint8),
            "caption": [f"a picture numbered {k * rows + i}" for i in range(rows)],
            "quality": rng.random(rows).astype(np.float32),
            "label": np.arange(k * rows, (k + 1) * rows, dtype=np.int64),
        }

    work = Path(tempfile.mkdtemp(prefix="zrecord-bench-appends-", dir=args.workdir))
    path = work / "ds"
    times = []
    try:
        zrecord.Dataset.write(path, chunk(0)).close()
        for k in range(1, appends + 1):
            data = chunk(k)
            times.append(_timed(lambda: zrecord.Dataset.write(path, data, mode="append").close()))
        # The same comparison with the drift of a busy machine taken out: appends to a
        # dataset of 2 shards and to this one, in turn.
        few = work / "few"
        zrecord.Dataset.write(few, chunk(0)).close()
        zrecord.Dataset.write(few, chunk(1), mode="append").close()
        paired_few, paired_many = [], []
        for j in range(10 if args.quick else 30):
            for target, into in ((few, paired_few), (path, paired_many)):
                data = chunk(appends + 1 + j)
                into.append(_timed(lambda: zrecord.Dataset.write(target, data, mode="append").close()))
        size = sum(f.stat().st_blocks * 512 for f in path.rglob("*") if f.is_file())
        files = sum(1 for f in path.rglob("*") if f.is_file())
        ds = zrecord.Dataset(path)
        shards = ds.shards
        samples = len(ds)
        compact_s = _timed(lambda: ds.compact(target_rows=1 << 20))
        after = ds.shards
        ds.close()
        size_after = sum(f.stat().st_blocks * 512 for f in path.rglob("*") if f.is_file())
        append_after = [_timed(lambda: zrecord.Dataset.write(path, chunk(appends + 1 + j), mode="append").close())
                        for j in range(5)]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    # Each figure the median of the five appends around it (noise on a 2-core machine).
    def around(k):
        lo = max(0, k - 3)
        return float(np.median(times[lo:lo + 5]))

    first, at50, last = around(0), around(min(49, appends - 1)), around(appends - 1)
    ratio = last / first
    verdict = "met" if ratio <= 1.3 else "**not met**"
    table(f"Many small appends ({rows} rows each, 4 fields; {shards} shards, {files:,} files, {size / 1e6:.1f} MB on disk "
          f"before compaction; each figure the median of 5 appends around it)",
          ["append", "time", "vs the first", "target", ""],
          [["after 1", f"{first * 1000:.0f} ms", "1.00x", "", ""],
           [f"after {min(50, appends)}", f"{at50 * 1000:.0f} ms", f"{at50 / first:.2f}x", "", ""],
           [f"after {appends}", f"{last * 1000:.0f} ms", f"{ratio:.2f}x", "<= 1.3x", verdict],
           [f"in turn with a 2-shard dataset's ({len(paired_many)} each, medians)",
            f"{np.median(paired_many) * 1000:.0f} ms vs {np.median(paired_few) * 1000:.0f} ms",
            f"{np.median(paired_many) / np.median(paired_few):.2f}x", "<= 1.3x",
            "met" if np.median(paired_many) <= 1.3 * np.median(paired_few) else "**not met**"],
           [f"after compaction ({after} shard{'s' if after != 1 else ''})", f"{np.median(append_after) * 1000:.0f} ms",
            f"{np.median(append_after) / first:.2f}x", "", ""]])
    table("Compaction of the appended dataset (every shard merged)",
          ["samples", "shards", "time", "rows/s", "MB/s (on disk before)", "on disk after"],
          [[f"{samples:,}", f"{shards} -> {after}", f"{compact_s:.2f} s", f"{samples / compact_s:,.0f}",
            f"{size / 1e6 / compact_s:.1f}", f"{size_after / 1e6:.1f} MB"]])
    RESULTS[("appends",)] = {"ratio": ratio, "first": first, "last": last,
                             "paired": float(np.median(paired_many) / np.median(paired_few))}


def summary_rows(row):
    """The living section's targets, for the targets table."""
    got = RESULTS.get(("living",))
    if not got:
        return
    row("living: append 1% of rows vs writing the dataset", f"{got['append 1%'] * 100:.1f}%", "< 2%",
        got["append 1%"] < 0.02)
    row("living: add_field of one int64 column vs writing the dataset", f"{got['add_field int64'] * 100:.1f}%",
        "< 5%", got["add_field int64"] < 0.05)
    appends = RESULTS.get(("appends",))
    if appends:
        row("living: an append after 200 small appends vs the first", f"{appends['ratio']:.2f}x", "<= 1.3x",
            appends["ratio"] <= 1.3)
    row("living: delete + compact 1% of rows (spread) vs writing the dataset",
        f"{got['delete + compact 1% spread'] * 100:.1f}%",
        "reported", True, "every shard is copied: a rewrite without encoding new input")
