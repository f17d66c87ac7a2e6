"""The targets table at the end of `bench.py all`: every ratio a section measured, against the
target set for it, with a note where the figure needs one. The sections record what they
measured in `measure.RESULTS`; fields.py, packing.py and remote.py add their own rows.

Why a target is missed is written down in misses.py, which bench/report.py reads to write
docs/benchmarks.md.
"""

import fields
import headline
import living
import packing
import vision
import remote
from data_sets import DATASETS
from measure import RESULTS, table


def bench_summary(args):
    """One table of the targets of the store, loader, stream, checksums, fields, packing and
    remote sections, each ratio from this run's sections."""
    rows = []

    def row(what, value, target, ok, note=""):
        rows.append([what, value, target, "met" if ok else "**not met**", note])

    def both_raw(st):
        z, lx = st.get("zrecord flate"), st.get("loaderx flate")
        if not (z and lx):
            return False
        return st["_bytes"] / z[2] < 1.02 and st["_bytes"] / lx[2] < 1.02

    zstd_bar = []
    for set_name in DATASETS:
        st = RESULTS.get(("store", set_name))
        if st:
            z, lx = st.get("zrecord flate"), st.get("loaderx flate")
            note = "both store it raw (DEFLATE does not save enough): a copy, bound by memory" if both_raw(st) else ""
            if z and lx:
                row(f"[{set_name}] write flate vs loaderx", f"{lx[0] / z[0]:.2f}x", ">= 2x", lx[0] / z[0] >= 2)
                stored = st["_bytes"] / z[2] < 1.02 and st["_bytes"] / lx[2] >= 1.02
                if stored:
                    note = "zrecord's policy stores it raw while loaderx keeps DEFLATE: see the same-codec row"
                row(f"[{set_name}] gather flate vs loaderx (default policy)", f"{lx[1] / z[1]:.2f}x", ">= 3x",
                    lx[1] / z[1] >= 3, note)
                same = st.get("zrecord flate, min_savings=0")
                if same:
                    # Both decode DEFLATE on every record: the codec work compared like for like.
                    row(f"[{set_name}] gather flate vs loaderx, same codec (min_savings=0)",
                        f"{lx[1] / same[1]:.2f}x", ">= 3x", lx[1] / same[1] >= 3, "every record DEFLATE on both sides")
            ar = st.get("array_record")
            if z and ar:
                ratio = st["_bytes"] / z[2]
                row(f"[{set_name}] gather flate vs array_record (zstd)", f"{ar[1] / z[1]:.2f}x", "> 1x",
                    ar[1] / z[1] > 1, f"default codec policy, ratio {ratio:.2f} vs {st['_bytes'] / ar[2]:.2f}")
            zs = st.get("zrecord zstd (opt-in)")
            if zs and ar:
                row(f"[{set_name}] gather zstd (opt-in) vs array_record (zstd)", f"{ar[1] / zs[1]:.2f}x", "> 1x",
                    ar[1] / zs[1] > 1, f"ratio {st['_bytes'] / zs[2]:.2f} vs {st['_bytes'] / ar[2]:.2f}")
            pool = RESULTS.get(("pool", set_name, 1))
            if pool:
                # The pool section's interleaved rounds, one batch held (as a training step
                # holds the batch it works on): steadier than the store table's passes.
                r = pool["Dataset.__getitems__"] / pool["gather into one buffer"]
                row(f"[{set_name}] raw Dataset.__getitems__ vs Zrecord.gather into one buffer",
                    f"{r:.2f}x the time", "<= 1.5x", r <= 1.5, "one batch held")
        ld = RESULTS.get(("loader", set_name))
        if ld:
            for codec, target in (("flate", 3.0), ("raw", 1.5)):
                z, lx = ld.get(f"zrecord {codec}"), ld.get(f"loaderx {codec}")
                if z and lx:
                    note = "both store it raw" if codec == "flate" and st and both_raw(st) else ""
                    row(f"[{set_name}] loader {codec} vs loaderx", f"{lx / z:.2f}x", f">= {target:g}x",
                        lx / z >= target, note)
            zs, zf = ld.get("zrecord zstd"), ld.get("zrecord flate")
            if zs and zf and set_name in ("images64", "images224", "tokens"):
                zstd_bar.append((set_name, zf / zs))
            tt = ld.get("torch (npy memmap, 4 procs)")
            if set_name == "images64" and tt and ld.get("zrecord flate"):
                z = ld["zrecord flate"]
                row("[images64] loader flate vs torch DataLoader over npy memmap", f"{tt / z:.2f}x", ">= 1x", tt / z >= 1)
    if zstd_bar:
        # The bar for adding the opt-in codec: 1.5x DEFLATE's loader on images or tokens.
        best = max(r for _, r in zstd_bar)
        row("loader zstd (opt-in) vs loader flate, on images or tokens",
            ", ".join(f"{name} {r:.2f}x" for name, r in zstd_bar), ">= 1.5x on one", best >= 1.5,
            "the bar for adding the opt-in codec")
    for set_name in ("tokens", "images64"):
        cold = RESULTS.get(("store-cold", set_name))
        if not (cold and cold.get("zrecord flate")):
            continue
        z = cold["zrecord flate"][1]
        if cold.get("npy memmap"):
            r = cold["npy memmap"][1] / z
            row(f"[{set_name}, cold cache] gather flate vs npy memmap fancy indexing", f"{r:.2f}x", ">= 1.5x", r >= 1.5)
        if cold.get("array_record"):
            # The peer a team would pick instead, from the same cold cache.
            r = cold["array_record"][1] / z
            row(f"[{set_name}, cold cache] gather flate vs array_record", f"{r:.2f}x", ">= 1x", r >= 1)
        if cold.get("loaderx flate"):
            r = cold["loaderx flate"][1] / z
            row(f"[{set_name}, cold cache] gather flate vs loaderx", f"{r:.2f}x", ">= 1x", r >= 1)
    for set_name, ld in ((k[1], v) for k, v in RESULTS.items() if k[0] == "loader-cold"):
        z, lx = ld.get("zrecord flate"), ld.get("loaderx flate")
        if z and lx:
            row(f"[{set_name}, cold cache] loader flate vs loaderx, constructor to last batch", f"{lx / z:.2f}x",
                ">= 1x", lx / z >= 1, "the cold first epoch, warming included")
    sampler = RESULTS.get(("sampler",))
    if sampler:
        for batch, ratio in sampler:
            row(f"stream: SHUFFLE vs IID Sampler.next(), N = 2^24, batch {batch:,}", f"{ratio:.2f}x the time",
                "<= 2x", ratio <= 2)
    for label, codec, wcost, gcost in RESULTS.get(("checksums",), []):
        limit = 0.03 if codec == "flate" else 0.25
        row(f"checksums [{label}]: gather, verify on vs off", f"{gcost * 100:+.1f}%", f"<= +{limit * 100:g}%",
            gcost <= limit)
        row(f"checksums [{label}]: write, kept vs not", f"{wcost * 100:+.1f}%", "<= +5%", wcost <= 0.05)
    headline.summary_rows(row)
    fields.summary_rows(row)
    living.summary_rows(row)
    packing.summary_rows(row)
    vision.summary_rows(row)
    remote.summary_rows(row)
    if rows:
        table("Targets: every ratio above, against its target (same run)",
              ["what", "measured", "target", "", "note"], rows)
