"""The sandboxed host against the native one: `zr-wasm` (zr.wasm under wasmtime, one thread)
and `zr` (all cores) running `stats`, `verify` and `export` over the same store, in CPU
seconds (user + system of the process, so the native host's second core counts too).

The store is the one host-wasm/README.md quotes: 2^18 records of 64 bytes from a few
symbols (so DEFLATE keeps them, as static-Huffman streams), written by `zr convert`. Each
command runs in interleaved rounds, native then wasm; the figure is the median of the
rounds, the spread beside it. Target: zr-wasm within 3x of zr on each.
"""

import os
import resource
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from measure import RESULTS, SKIPPED, table

ROOT = Path(__file__).resolve().parents[1]
TARGET = 3.0
COMMANDS = ("stats", "verify", "export")


def _binary(env, default):
    path = Path(os.environ.get(env) or default)
    return path if path.exists() else None


def cpu_seconds(cmd):
    """User + system seconds of one run of `cmd` (stdout discarded)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def measure(zr, zr_wasm, work, records, rounds):
    """{command: (native seconds per round, wasm seconds per round)} over a new store."""
    rng = np.random.default_rng(0)
    npy = work / "records.npy"
    np.save(npy, rng.integers(0, 4, (records, 64), dtype=np.uint8))
    store = work / "store.zr"
    subprocess.run([str(zr), "convert", str(npy), str(store)], check=True, stdout=subprocess.DEVNULL)
    out = work / "out.npy"
    times = {c: ([], []) for c in COMMANDS}
    for _ in range(rounds):
        for c in COMMANDS:
            for k, binary in enumerate((zr, zr_wasm)):
                args = [str(binary), c, str(store)] + ([str(out)] if c == "export" else [])
                out.unlink(missing_ok=True)
                times[c][k].append(cpu_seconds(args))
    return times


def bench_wasm(args):
    """zr-wasm against zr, CPU seconds per command."""
    zr = _binary("ZR", ROOT / "target" / "release" / "zr") or shutil.which("zr")
    zr_wasm = _binary("ZR_WASM", ROOT / "target" / "release" / "zr-wasm")
    if zr is None or zr_wasm is None:
        SKIPPED.append("wasm: needs target/release/zr and target/release/zr-wasm (make build wasm-build)")
        return
    records = 1 << (14 if args.quick else 18)
    rounds = 3 if args.quick else 5
    with tempfile.TemporaryDirectory(dir=args.workdir) as d:
        times = measure(zr, zr_wasm, Path(d), records, rounds)
    rows = []
    for c in COMMANDS:
        native, wasm = (np.array(t) for t in times[c])
        ratio = float(np.median(wasm) / max(np.median(native), 1e-3))
        RESULTS[("wasm", c)] = ratio
        rows.append([f"`{c}`", f"{np.median(native):.3f} ({native.min():.2f}-{native.max():.2f})",
                     f"{np.median(wasm):.3f} ({wasm.min():.2f}-{wasm.max():.2f})", f"{ratio:.1f}x",
                     f"<= {TARGET:.0f}x", "met" if ratio <= TARGET else "**missed**"])
    table(f"zr-wasm against zr: {records:,} records of 64 bytes (flate), CPU seconds, median of {rounds} rounds",
          ["command", "zr", "zr-wasm", "zr-wasm / zr", "target", ""], rows)
