"""zrecord against its peers, side by side in one run on this machine.

    python bench/bench.py [sampler|headline|store|checksums|loader|stream|fields|living|appends|packing|tokenize|vision|remote|latency|smallcache|pool|policy|threads|scale|all]
                          [--quick] [--cold] [--sets a,b]

Every table carries a ratio column against the reference (loaderx 0.5.4) or the named
baseline, measured in the same run. Timings are medians of repeats on a warm page cache
(every store is read once before it is timed), or with --cold on files evicted from the
page cache before every timed pass. The store and loader tables run over every data set:
two synthetic ones (kept so older figures compare) and four built from real material that
the Python registry ships (data_sets.py). Contenders whose package is missing are
skipped with a note. Nothing here asserts a time: this prints tables, it does not test.

This file parses the arguments, runs the chosen sections and prints the run as Markdown on
stdout: a published run is that output kept in bench/results/ (`make bench >
bench/results/DATE.md`), and bench/report.py turns the newest full one into
docs/benchmarks.md (`make bench-doc`). The sections are stream.py (sampler, stream),
store.py (store, checksums, pool, policy), loader.py (loader, threads), fields.py, living.py,
packing.py, tokenizing.py, remote.py and scale.py; the data sets are made in data_sets.py, the peers they
measure are in contenders.py, the targets table is in summary.py.
"""

import argparse
import gc
import os
import platform
import time

# OpenBLAS's threads spin for a while after each numpy call that uses them, and on a machine
# of few cores they take the cores the readers measured here need (a profile of the raw
# gather put 6% of its time in them). No table here times a BLAS call, so one thread
# changes no reader's work; set before numpy is first imported, and only when unset.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

import fields
import headline
import living
import loader
import packing
import remote
import scale
import store
import tokenizing
import stream
import vision
import wasm
import summary
from data_sets import DATASETS
from measure import SKIPPED

# Every section, in the order `all` runs them.
SECTIONS = {
    "sampler": stream.bench_sampler,
    "headline": headline.bench_headline,
    "store": store.bench_store,
    "checksums": store.bench_checksums,
    "loader": loader.bench_loader,
    "stream": stream.bench_stream,
    "fields": fields.bench_fields,
    "living": living.bench_living,
    "appends": living.bench_appends,
    "packing": packing.bench_packing,
    "tokenize": tokenizing.bench_tokenize,
    "vision": vision.bench_vision,
    "remote": remote.bench_remote,
    "latency": remote.bench_latency,
    "smallcache": remote.bench_small_cache,
    "pool": store.bench_pool,
    "policy": store.bench_policy,
    "threads": loader.bench_threads,
    "scale": scale.bench_scale,
    "wasm": wasm.bench_wasm,
}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", nargs="?", default="all", choices=[*SECTIONS, "all"])
    ap.add_argument("--quick", action="store_true", help="small sizes: a smoke run, not a measurement")
    ap.add_argument("--only", default=None, help="comma-separated name fragments of the store contenders to run")
    ap.add_argument("--workdir", default=None, help="where stores are written (default: the temp dir; "
                    "--cold needs a disk-backed one, not tmpfs)")
    ap.add_argument("--sets", default="all", help=f"comma-separated data sets of {', '.join(DATASETS)} (default all)")
    ap.add_argument("--cold", action="store_true",
                    help="evict every store's files from the page cache (posix_fadvise DONTNEED) before each timed run")
    ap.add_argument("--workers", type=int, default=4, help="loader workers for zrecord and loaderx (default 4)")
    ap.add_argument("--no-torch", action="store_true", help="leave torch's DataLoader out of the loader table")
    ap.add_argument("--only-loader", default=None, help="name fragment of the loader contenders to run")
    args = ap.parse_args()
    import zrecord
    print(f"# zrecord {zrecord.__version__} benchmarks, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    load = os.getloadavg()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores ({len(os.sched_getaffinity(0))} usable), "
          f"Python {platform.python_version()}, numpy {np.__version__}; "
          f"{'cold' if args.cold else 'warm'} page cache; load average at start {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}")
    for part, run in SECTIONS.items():
        if args.what in (part, "all"):
            gc.collect()
            run(args)
    if args.what == "all" and not args.cold:
        # The cold-cache rows of the targets: the token set (and photo crops) from disk.
        cold = argparse.Namespace(**{**vars(args), "cold": True, "sets": "tokens,images64",
                                     "only": "zrecord flate,zrecord raw,loaderx flate,npy memmap,array_record"})
        print("\n## Cold page cache")
        store.bench_store(cold)
        loader.bench_loader(argparse.Namespace(**{**vars(cold), "sets": "tokens"}))
        summary.bench_summary(args)
    load = os.getloadavg()
    print(f"\nload average at end {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}")
    if SKIPPED:
        print("\nskipped:")
        for s in dict.fromkeys(SKIPPED):
            print(f"- {s}")


if __name__ == "__main__":
    main()
