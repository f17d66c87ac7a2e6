"""Packed token batches: zrecord's packing loader against what a pretraining team runs
instead, in finished (B, L) batches of tokens per second, measured in the same run.

- nanoGPT-style random windows: B random offsets into an `np.memmap` of the same tokens
  (the whole corpus back to back, an end-of-text id after each document), each window
  copied and widened to int64 as nanoGPT's `get_batch` does. It neither shuffles
  documents nor packs them nor resumes: the floor of what a batch can cost
  (target: zrecord's packed SHUFFLE batches >= 0.8x of it; shuffled concat rows above it
  and within 20% of sequential rows).
- Grain's packing (`grain.experimental` ConcatThenSplit, FirstFit and BestFit packers) of
  the same documents, held in memory as a list of arrays: no storage read at all
  (target: zrecord >= 5x; best fit's padding no worse than Grain's first fit).

The documents are the Python standard library's source files, BPE-tokenised (32,000-token
vocabulary) as in the token data set (data_sets.py): real lengths, from a few tokens to
tens of thousands. Every figure is the median of interleaved rounds.

Spread: how many distinct documents one 32-row global batch at L=256 holds (median over 40
batches) over ~500 of those documents, each token replaced by its document's number, for
shuffled rows, sequential rows and nanoGPT's windows over the same tokens (target:
shuffled rows >= 0.8x the windows).
"""

import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from data_sets import BPE_VOCAB, token_documents
from measure import RESULTS, SKIPPED, optional, table

SEQ = 2048
ROWS = 16
EOT = 0  # the BPE's first id, kept free as end-of-text


def _token_documents(args):
    try:
        return token_documents()
    except ImportError as e:
        if not args.quick:
            raise
        # The smoke run's venv has no tokenizers: synthetic documents keep the code run.
        SKIPPED.append(f"packing on real documents: {e}; --quick used synthetic ones")
        rng = np.random.default_rng(0)
        return [rng.integers(1, BPE_VOCAB, int(n), dtype=np.uint16) for n in rng.lognormal(7, 1.2, 4000)]


def _documents(args):
    docs = _token_documents(args)
    if args.quick:
        docs = docs[: len(docs) // 5]
    return docs


def _rate(make_iter, batches, rounds_out, tokens_per_batch, seconds=0.0):
    """Batches per second after the first, over `batches` batches and at least `seconds`: a
    loader's read-ahead holds batches made before the clock starts, so a round of a few
    milliseconds measures that queue, not the loader (20 batches of a packed loader took
    about 2 ms and its rounds spread 3x)."""
    it = make_iter()
    next(it)  # started; timed from the second batch
    t = time.perf_counter()
    n = 0
    while n < batches or time.perf_counter() - t < seconds:
        next(it)
        n += 1
    rounds_out.append(n * tokens_per_batch / (time.perf_counter() - t))
    close = getattr(it, "close", None)
    if close:
        close()


def bench_packing(args):
    """Packed token batches against nanoGPT's random windows and Grain's packing."""
    try:
        _packed_batches(args)
    except ImportError as e:
        SKIPPED.append(f"packing: {type(e).__name__}: {e} (pip install -r bench/requirements.txt)")


def _packed_batches(args):
    import zrecord

    docs = _documents(args)
    total = sum(len(d) + 1 for d in docs)
    batches = 20 if args.quick else 150
    rounds = 3
    work = Path(tempfile.mkdtemp(prefix="zr-pack-", dir=args.workdir))
    out = {}
    try:
        flat = np.concatenate([np.append(d, np.uint16(EOT)) for d in docs])
        flat.tofile(work / "train.bin")
        zrecord.Dataset.write(work / "docs", {"tokens": docs}, codec="raw")
        ds = zrecord.Dataset(work / "docs")

        def zr(mode, row_order=None):
            def make():
                pack = zrecord.Pack(seq_len=SEQ, mode=mode, eos=EOT, row_order=row_order)
                return zrecord.DataLoader(ds, batch_size=ROWS, mode=zrecord.Sampler.Mode.SHUFFLE, seed=1,
                                          num_workers=args.workers, pack=pack)
            return make

        def nanogpt():
            data = np.memmap(work / "train.bin", dtype=np.uint16, mode="r")
            rng = np.random.default_rng(0)

            def batches_():
                while True:
                    ix = rng.integers(len(data) - SEQ, size=ROWS)
                    yield np.stack([data[i:i + SEQ].astype(np.int64) for i in ix])
            return batches_()

        contenders = {
            "zrecord packed SHUFFLE, concat": zr("concat"),
            "zrecord packed SHUFFLE, concat, sequential rows": zr("concat", "sequential"),
            "zrecord packed SHUFFLE, best_fit": zr("best_fit"),
            "nanoGPT random windows (np.memmap)": nanogpt,
        }
        grain = optional("grain")
        if grain is not None:
            import grain.experimental as ge

            # The same documents with their end-of-text id; the packers that keep documents
            # whole take them cut into pieces of at most L, as zrecord's best fit cuts them.
            whole = [np.append(d, np.uint16(EOT)) for d in docs]
            pieces = [w[i:i + SEQ] for w in whole for i in range(0, len(w), SEQ)]

            def grain_pipe(packer):
                def make():
                    items = whole if packer == "concat" else pieces
                    src = grain.MapDataset.source(items).shuffle(seed=1).map(lambda d: {"tokens": d})
                    it = src.repeat().to_iter_dataset()
                    if packer == "concat":
                        packed = ge.ConcatThenSplitIterDataset(it, length_struct={"tokens": SEQ})
                    elif packer == "first_fit":
                        packed = ge.FirstFitPackIterDataset(it, length_struct={"tokens": SEQ},
                                                            num_packing_bins=ROWS, shuffle_bins=False)
                    else:
                        packed = ge.BestFitPackIterDataset(it, length_struct={"tokens": SEQ},
                                                           num_packing_bins=ROWS, shuffle_bins=False)
                    return iter(packed.batch(ROWS))
                return make

            contenders["Grain ConcatThenSplit (in memory)"] = grain_pipe("concat")
            contenders["Grain FirstFitPack (in memory)"] = grain_pipe("first_fit")
            if hasattr(ge, "BestFitPackIterDataset"):
                contenders["Grain BestFitPack (in memory)"] = grain_pipe("best_fit")
        rates = {name: [] for name in contenders}
        per_batch = ROWS * SEQ
        for _ in range(rounds):
            for name, make in contenders.items():
                fast = name.startswith(("zrecord", "nanoGPT"))
                _rate(make, batches if fast else max(5, batches // 10), rates[name], per_batch,
                      seconds=(1.0 if args.quick else 3.0) if fast else 0.0)
        med = {name: float(np.median(v)) for name, v in rates.items()}

        # Padding: zrecord's best fit from its own count; Grain's from the segment ids.
        padding = {"zrecord packed SHUFFLE, concat": 0.0, "zrecord packed SHUFFLE, concat, sequential rows": 0.0}
        with zr("best_fit")() as dl:
            for _ in range(batches):
                next(dl)
            padding["zrecord packed SHUFFLE, best_fit"] = dl.stats["padding_fraction"]
        for name in [n for n in contenders if n.startswith("Grain") and "Pack" in n]:
            it = contenders[name]()
            pads = cells = 0
            for _ in range(max(5, batches // 10)):
                b = next(it)
                seg = b["tokens_segment_ids"]
                pads += int((seg == 0).sum())
                cells += seg.size
            padding[name] = pads / cells
        base = med["nanoGPT random windows (np.memmap)"]
        rows = []
        for name, m in med.items():
            pad = padding.get(name)
            rows.append([name, f"{m / 1e6:,.2f}", ", ".join(f"{x / 1e6:,.2f}" for x in rates[name]),
                         f"{m / base:.2f}x", "-" if pad is None else f"{pad * 100:.2f}%"])
        table(f"Packing: finished ({ROWS}, {SEQ}) token batches per second, {len(docs):,} documents of "
              f"{total:,} tokens (median of {rounds} rounds)",
              ["contender", "M tokens/s", "rounds", "vs nanoGPT windows", "padding"], rows)
        out["concat_vs_nanogpt"] = med["zrecord packed SHUFFLE, concat"] / base
        out["shuffled_vs_sequential"] = med["zrecord packed SHUFFLE, concat"] / med[
            "zrecord packed SHUFFLE, concat, sequential rows"]
        out.update(_spread(docs, work, zrecord))
        out["best_fit_vs_nanogpt"] = med["zrecord packed SHUFFLE, best_fit"] / base
        out["best_fit_padding"] = padding["zrecord packed SHUFFLE, best_fit"]
        if "Grain FirstFitPack (in memory)" in med:
            out["best_fit_vs_grain_first_fit"] = med["zrecord packed SHUFFLE, best_fit"] / med[
                "Grain FirstFitPack (in memory)"]
            out["concat_vs_grain_concat"] = med["zrecord packed SHUFFLE, concat"] / med[
                "Grain ConcatThenSplit (in memory)"]
            out["grain_first_fit_padding"] = padding["Grain FirstFitPack (in memory)"]
        ds.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    RESULTS[("packing",)] = out


def _spread(docs, work, zrecord, rows=32, seq=256, n=500, batches=40):
    """Median distinct documents per global batch: shuffled rows, sequential rows, windows."""
    picked = docs[:n]
    marked = [np.full(len(d), i + 1, dtype=np.uint32) for i, d in enumerate(picked)]  # 0 stays end-of-text
    zrecord.Dataset.write(work / "marked", {"tokens": marked}, codec="raw")
    ds = zrecord.Dataset(work / "marked")
    counts = {}
    for order in ("shuffled", "sequential"):
        pack = zrecord.Pack(seq_len=seq, eos=EOT, row_order=order)
        with zrecord.DataLoader(ds, batch_size=rows, seed=1, num_workers=0, pack=pack) as dl:
            counts[order] = [len(np.unique(b[b != EOT])) for b in (next(dl)["tokens"] for _ in range(batches))]
    ds.close()
    flat = np.concatenate([np.append(d, np.uint32(EOT)) for d in marked])
    rng = np.random.default_rng(0)
    windows = []
    for _ in range(batches):
        ix = rng.integers(len(flat) - seq, size=rows)
        b = np.stack([flat[i:i + seq] for i in ix])
        windows.append(len(np.unique(b[b != EOT])))
    med = {k: float(np.median(v)) for k, v in counts.items()}
    w = float(np.median(windows))
    table(f"Packing spread: distinct documents per ({rows}, {seq}) global batch over {len(picked)} documents "
          f"(median of {batches} batches)",
          ["reader", "documents per batch", "vs nanoGPT windows", "target"],
          [["zrecord shuffled rows", f"{med['shuffled']:.0f}", f"{med['shuffled'] / w:.2f}x", ">= 0.8x"],
           ["zrecord sequential rows", f"{med['sequential']:.0f}", f"{med['sequential'] / w:.2f}x", "-"],
           ["nanoGPT random windows", f"{w:.0f}", "1.00x", "-"]])
    return {"spread_vs_windows": med["shuffled"] / w}


def summary_rows(row):
    """The packing section's targets, for the targets table."""
    p = RESULTS.get(("packing",))
    if not p:
        return
    for mode in ("concat", "best_fit"):
        r = p[f"{mode}_vs_nanogpt"]
        row(f"packing: {mode} SHUFFLE batches vs nanoGPT random windows (tokens/s)", f"{r:.2f}x", ">= 0.8x", r >= 0.8)
    r = p["shuffled_vs_sequential"]
    row("packing: shuffled concat rows vs sequential rows (tokens/s)", f"{r:.2f}x", ">= 0.8x", r >= 0.8)
    r = p["concat_vs_nanogpt"]
    row("packing: shuffled concat rows vs nanoGPT windows (tokens/s)", f"{r:.2f}x", "> 1x", r > 1)
    r = p["spread_vs_windows"]
    row("packing: documents per 32x256 batch, shuffled rows vs nanoGPT windows", f"{r:.2f}x", ">= 0.8x", r >= 0.8)
    if "best_fit_vs_grain_first_fit" in p:
        r = p["best_fit_vs_grain_first_fit"]
        row("packing: best_fit vs Grain FirstFitPack (tokens/s)", f"{r:.2f}x", ">= 5x", r >= 5)
        r = p["concat_vs_grain_concat"]
        row("packing: concat vs Grain ConcatThenSplit (tokens/s)", f"{r:.2f}x", ">= 5x", r >= 5)
        ours, theirs = p["best_fit_padding"], p["grain_first_fit_padding"]
        row("packing: best_fit padding vs Grain first fit", f"{ours * 100:.2f}% vs {theirs * 100:.2f}%",
            "no more", ours <= theirs)
