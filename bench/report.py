"""Writes docs/benchmarks.md from a published run in bench/results/.

    python3 bench/report.py [RUN.md] [--out docs/benchmarks.md]     (make bench-doc)

The run is RUN.md, or else the newest full run by file name: the newest results file with
a targets table (a partial run, one section of bench.py, has none). Sections kept from
results files newer than that run follow it, each under its own file's name. Every figure
in the document is copied from those files; the prose around them is here, and why a
target is missed is in misses.py. Standard library only, so it runs without the bench venv.
"""

import argparse
import os
import re
import sys
import textwrap
from pathlib import Path

from misses import cause_of

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
RESULTS = BENCH / "results"

INTRO = """\
zrecord against its peers (loaderx 0.5.4, the reference; ArrayRecord, h5py, lmdb, numpy
memmaps, torch's DataLoader, Grain over ArrayRecord; nanoGPT's batches and Grain's packers
for packed tokens), every
ratio measured in the same run, and every target against the ratio it asks for. Nothing
here is a test: a benchmark prints tables, it does not assert times.

## How to run them

`make bench` builds its own venv (`bench/.venv`: loaderx 0.5.4, h5py, lmdb, array-record,
Grain, torch, MosaicML Streaming, scikit-image, tokenizers, moto) and runs every section of `bench/bench.py`
(sampler, store, checksums, loader, stream, fields, packing, remote, latency, pool, policy, threads,
scale, then the store and loader from a cold page cache), ending with the targets table. It
takes about 40 minutes; its output, kept as `bench/results/DATE.md`, is a published run.
`make bench-doc` writes this page from the newest one (`bench/report.py`).

One section alone, once `make bench` made the venv: `bench/.venv/bin/python bench/bench.py
SECTION`, with `--quick` for a small version (`make test` runs the quick ones so the script
cannot rot), `--sets` for some of the data sets, `--cold` to read from a cold page cache.
`make bench-codecs` compares DEFLATE with zstd and LZ4 on one core
([decisions/zstd.md](decisions/zstd.md)), and `cargo bench -p zrecord --bench hot_paths` runs Criterion
benches of the hot paths.

## What is measured

Six data sets ([decisions/](decisions/README.md#the-data-sets) says how each is made): `structured`
and `noise` (synthetic uint8 3x64x64, a smooth field plus noise and uniform noise, kept so
older figures compare), `images64` and `images224` (crops of the photographs in
scikit-image's wheel), `tokens` (uint16 windows of 2,048 byte-pair tokens of the Python
standard library's sources) and `features` (float32 768-vectors, embedding-like).

Timings are medians of repeats on a warm page cache (every store is read once before it is
timed) unless a row says cold: then the files are evicted before every batch (store: timed
from opening it, where the full run of 2026-12-01 timed the batch alone) or before each
loader starts, timed from its constructor to its last batch (loader: the cold first epoch,
warming included). "flate" is the default policy: a record is stored raw when
DEFLATE does not shrink it by 12.5%, so `structured`, `noise` and `features` end up raw,
while loaderx keeps DEFLATE whenever it shrinks a record at all; the `min_savings=0` rows
force DEFLATE on every record so that both sides decode the same codec.
"""


class Run:
    """One results file: its command, header lines and tables, in order."""

    def __init__(self, path):
        self.path = Path(path)
        self.command = None  # bench.py and its arguments, as the make line ran it
        self.title = self.machine = self.load_end = None
        self.tables = []  # (title, header, rows)
        title = table = None
        for line in self.path.read_text(encoding="utf-8").splitlines():
            if line.startswith("|") and title is not None:
                cells = [c.strip() for c in line.strip().strip("|").split("|")]
                if table is None:
                    table = (title, cells, [])
                    self.tables.append(table)
                elif set("".join(cells)) - {"-"}:  # not the |---| line
                    table[2].append(cells)
                continue
            if line.strip():  # anything else ends a table
                title = table = None
            if line.startswith("### "):
                title = line[4:].strip()
            elif line.startswith("# zrecord") and self.title is None:
                self.title = line[2:].strip()
            elif line.startswith("machine:") and self.machine is None:
                self.machine = line[len("machine:"):].strip()
            elif line.startswith("load average at end"):
                self.load_end = line[len("load average at end"):].strip()
            elif "bench/bench.py" in line and self.command is None and not line.startswith("#"):
                self.command = line[line.index("bench/bench.py"):].strip()

    def first(self, prefix, warm=True):
        """The first table whose title starts with `prefix`: the main run's, not a threads
        sub-run's (those come later in the file). `warm` False asks for a cold one."""
        for t in self.tables:
            if t[0].startswith(prefix) and ("cold page cache" in t[0]) != warm:
                return t
        return None

    def targets(self):
        return next((t for t in self.tables if t[0].startswith("Targets:")), None)

    def when(self):
        m = re.search(r"(\d{4}-\d\d-\d\d \d\d:\d\d UTC)", self.title or "")
        return m.group(1) if m else self.path.stem

    def version(self):
        m = re.search(r"zrecord (\S+) benchmarks", self.title or "")
        return m.group(1) if m else "?"


def full_run(paths):
    """The newest results file by name that holds a targets table."""
    for p in sorted(paths, key=lambda p: p.name, reverse=True):
        if Run(p).targets():
            return p
    raise SystemExit(f"no results file in {RESULTS} has a targets table (a run of `bench.py all`)")


def prose(text):
    """A paragraph wrapped as the hand-written docs are."""
    return textwrap.fill(text, width=92, break_long_words=False, break_on_hyphens=False)


def md_table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


def shown(path):
    """`path` as the document names it: from the repository's root when it is inside it."""
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def link(path):
    return f"[`{shown(path)}`](../{shown(path)})" if path.is_relative_to(ROOT) else f"`{path}`"


def data_set_table(run, name):
    """One table for data set `name`: its store rows (write, gather, ratio) beside its
    loader rows (throughput), joined by contender; None if the run has neither."""
    store, loader = run.first(f"Store [{name}]"), run.first(f"Loader [{name}]")
    if not (store or loader):
        return None
    rows = {}

    def cell(table, row, column):
        return row[table[1].index(column)] if column in table[1] else "-"

    if store:
        for r in store[2]:
            rows[r[0]] = {"write": cell(store, r, "write"), "gather": cell(store, r, "gather"),
                          "ratio": cell(store, r, "ratio"), "gather vs loaderx": cell(store, r, "gather vs loaderx")}
    if loader:
        for r in loader[2]:
            # The store table names the opt-in codec "zrecord zstd (opt-in)", the loader table
            # "zrecord zstd": one contender.
            key = next((k for k in rows if k.replace(" (opt-in)", "") == r[0]), r[0])
            rows.setdefault(key, {}).update({"loader": cell(loader, r, "throughput"),
                                               "loader vs loaderx": cell(loader, r, "vs loaderx (same codec)"),
                                               "loader vs torch": cell(loader, r, "vs torch")})
    columns = ["write", "gather", "ratio", "gather vs loaderx", "loader", "loader vs loaderx", "loader vs torch"]
    lines = [f"### {name}", ""]
    for t, what in ((store, "store"), (loader, "loader")):
        if t:
            lines.append(prose(f"- The {what}: {t[0].split(']: ', 1)[-1]}.").replace("\n", "\n  "))
    lines.append("")
    lines.append(md_table(["contender", *columns], [[k, *(v.get(c, "-") for c in columns)] for k, v in rows.items()]))
    return "\n".join(lines)


def misses_section(targets):
    """Every "not met" row under its cause (misses.py), the unexplained ones last."""
    what, measured, target, met, note = (targets[1].index(c) for c in ("what", "measured", "target", "", "note"))
    groups, unknown = {}, []
    for r in targets[2]:
        if "not met" not in r[met]:
            continue
        line = f"  - {r[what]}: {r[measured]} (target {r[target]})"
        found = cause_of(r[what], r[note])
        if found:
            groups.setdefault(found, []).append(line)
        else:
            unknown.append(line)
    if not (groups or unknown):
        return "Every target is met in this run."
    out = []
    for (title, text), lines in groups.items():
        out += [prose(f"- **{title}.** {text}").replace("\n", "\n  "), *lines]
    if unknown:
        out += ["- **No cause recorded** in bench/misses.py:", *unknown]
    return "\n".join(out)


def render(run, later):
    cmd = f" (`{run.command}`)" if run.command else ""
    parts = [
        "# Benchmarks",
        "",
        f"<!-- Written by bench/report.py from {shown(run.path)}: edit bench/report.py or "
        "bench/misses.py and run `make bench-doc`, not this file. -->",
        "",
        INTRO,
        f"## The run of {run.when()}",
        "",
        prose(f"The figures below are from one run{cmd} of zrecord {run.version()}, started {run.when()}; its "
              f"whole output, with the tables of every section, is {link(run.path)}. Machine: {run.machine}"
              + (f"; load average at end {run.load_end}." if run.load_end else ".")),
        "",
        "## One table per data set",
        "",
        prose("Random batches gathered from each store (write and gather in MiB/s; ratio: the data's size "
              "over the store's; gather against loaderx with the same codec), beside the loader over the "
              "same store (MiB/s of samples with labels, against loaderx with the same codec and against "
              "torch's DataLoader over an npy memmap). A dash: not in that table."),
    ]
    sets = []
    for t in run.tables:
        m = re.match(r"(?:Store|Loader) \[(\w+)\]", t[0])
        if m and m.group(1) not in sets and "cold page cache" not in t[0]:
            sets.append(m.group(1))
    for name in sets:
        parts += ["", data_set_table(run, name)]
    targets = run.targets()
    parts += ["", "## Targets", "",
              prose("Every target against the ratio this run measured for it; the tables each row comes from "
                    "are in the run's output."), "", md_table(targets[1], targets[2]),
              "", "## The misses", "",
              prose("Each target this run did not meet, under what causes it. A miss stays a miss until a run "
                    "meets its target; none is put down to noise."), "", misses_section(targets)]
    if later:
        parts += ["", "## Sections run since", "",
                  prose("Results files newer than the run above that hold only some sections. Where one of "
                        "them measures a target of the table above, its figure here is the current one "
                        "(the table keeps the full run's until the next full run).")]
        for r in later:
            parts += ["", f"### {', '.join(sorted({t[0].split(':')[0] for t in r.tables}))}, {r.when()}", "",
                      prose(f"{link(r.path)}" + (f" (`{r.command}`)" if r.command else "")
                            + f", zrecord {r.version()}; machine: {r.machine}.")]
            for title, header, rows in r.tables:
                parts += ["", prose(f"{title}."), "", md_table(header, rows)]
    return "\n".join(parts).rstrip("\n") + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", nargs="?", help="the results file (default: the newest full run in bench/results/)")
    ap.add_argument("--out", default=str(ROOT / "docs" / "benchmarks.md"), help="where to write (default: %(default)s)")
    args = ap.parse_args()
    paths = sorted(RESULTS.glob("*.md"), key=lambda p: p.name)
    main_path = Path(args.run).resolve() if args.run else full_run(paths)
    run = Run(main_path)
    if not run.targets():
        raise SystemExit(f"{main_path} has no targets table: name a run of `bench.py all`")
    later = [Run(p) for p in paths if p.name > main_path.name and not Run(p).targets()] if not args.run else []
    text = render(run, later)
    out = Path(args.out)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, out)  # a failed run leaves the old page, never half a new one
    names = ", ".join(p.path.name for p in later)
    print(f"wrote {out} from {main_path.name}" + (f" and {names}" if later else ""), file=sys.stderr)


if __name__ == "__main__":
    main()
