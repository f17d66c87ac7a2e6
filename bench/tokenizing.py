"""Tokenization: text in, token documents out, in MB of text per second on this machine.

- zrecord: `zr convert corpus.jsonl OUT --tokenizer tokenizer.json` (the wheel's `zr`), and
  `zrecord.tokenize` from Python, both the Rust `tokenizers` crate's batch encode on every
  core, writing the dataset.
- Python `tokenizers` (the baseline a preparation script uses): the JSON Lines read and
  parsed in Python, `encode_batch` of 8,192 documents at a time with its own parallelism,
  the ids made numpy arrays; nothing written (target: zrecord >= 1.5x of it).
- LitData's `optimize` with the same tokenizer, where litdata installs.

The corpus is the Python standard library's sources (one document per file, as in the
token data set, data_sets.py) with the same byte-level BPE of 32,000 tokens, trained here.
Every figure is the median of interleaved rounds.
"""

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

import numpy as np

from data_sets import _bpe
from measure import RESULTS, SKIPPED, table

TARGET = 1.5


def bench_tokenize(args):
    """zr convert --tokenizer and zrecord.tokenize against Python tokenizers."""
    try:
        tok, texts = _bpe()
    except ImportError as e:
        SKIPPED.append(f"tokenize: {type(e).__name__}: {e} (pip install tokenizers)")
        return
    import zrecord

    if args.quick:
        texts = texts[: len(texts) // 4]
    work = Path(tempfile.mkdtemp(prefix="zr-tok-", dir=args.workdir))
    try:
        tok.save(str(work / "tokenizer.json"))
        with open(work / "corpus.jsonl", "w") as f:
            for t in texts:
                f.write(json.dumps({"text": t}) + "\n")
        mb = sum(len(t.encode()) for t in texts) / 1e6
        zr = Path(sysconfig.get_path("scripts")) / "zr"
        zr = str(zr) if zr.exists() else shutil.which("zr")

        def zr_convert():
            out = work / "zr-out"
            shutil.rmtree(out, ignore_errors=True)
            subprocess.run([zr, "convert", str(work / "corpus.jsonl"), str(out), "--tokenizer",
                            str(work / "tokenizer.json"), "--eos", "0"], check=True, capture_output=True)

        def zr_python():
            out = work / "py-out"
            shutil.rmtree(out, ignore_errors=True)
            zrecord.tokenize(work / "corpus.jsonl", out, tokenizer=work / "tokenizer.json", eos=0)

        def hf_python():
            from tokenizers import Tokenizer

            t = Tokenizer.from_file(str(work / "tokenizer.json"))
            ids = []
            with open(work / "corpus.jsonl") as f:
                block = []
                for line in f:
                    block.append(json.loads(line)["text"])
                    if len(block) == 8192:
                        ids.extend(np.asarray(e.ids, np.uint16) for e in t.encode_batch(block))
                        block = []
                ids.extend(np.asarray(e.ids, np.uint16) for e in t.encode_batch(block))
            return ids

        contenders = [("zrecord: zr convert --tokenizer", zr_convert),
                      ("zrecord: zrecord.tokenize", zr_python),
                      ("Python tokenizers encode_batch (baseline)", hf_python)]
        lit = _litdata(work)
        if lit is not None:
            contenders.append(("LitData optimize", lit))
        rounds = {name: [] for name, _ in contenders}
        for _ in range(3 if not args.quick else 1):
            for name, fn in contenders:
                t0 = time.perf_counter()
                fn()
                rounds[name].append(mb / (time.perf_counter() - t0))
        base = float(np.median(rounds["Python tokenizers encode_batch (baseline)"]))
        rows = []
        for name, _ in contenders:
            med = float(np.median(rounds[name]))
            target = f">= {TARGET}x" if name.startswith("zrecord") else ""
            met = "" if not target else ("met" if med / base >= TARGET else "**missed**")
            rows.append([name, f"{med:.2f}", ", ".join(f"{r:.2f}" for r in rounds[name]), f"{med / base:.2f}x",
                         f"{target} {met}".strip()])
        table(f"Tokenization: {mb:.1f} MB of text ({len(texts)} documents), byte-level BPE of 32,000 tokens, "
              f"{os.cpu_count()} cores", ["contender", "MB of text/s", "rounds", "vs Python tokenizers", "target"], rows)
        RESULTS["tokenize"] = {name: float(np.median(r)) / base for name, r in rounds.items()}
        if lit is not None:
            lit_med = float(np.median(rounds["LitData optimize"]))
            table("Tokenization against LitData's optimize (same tokenizer, same corpus, every core)",
                  ["contender", "vs LitData optimize", "target"],
                  [[name, f"{float(np.median(rounds[name])) / lit_med:.2f}x",
                    ">= 1x " + ("met" if float(np.median(rounds[name])) >= lit_med else "**missed**")]
                   for name, _ in contenders if name.startswith("zrecord")])
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _litdata(work):
    try:
        import litdata  # noqa: F401
    except Exception as e:  # noqa: BLE001 - any import failure means "skip it"
        SKIPPED.append(f"tokenize: LitData: {type(e).__name__}: {e}".splitlines()[0])
        return None

    def run():
        from litdata import optimize

        out = work / "lit-out"
        shutil.rmtree(out, ignore_errors=True)
        with open(work / "corpus.jsonl") as f:
            lines = f.readlines()
        optimize(fn=_LitEncode(str(work / "tokenizer.json")), inputs=lines, output_dir=str(out), chunk_bytes="64MB",
                 num_workers=os.cpu_count(), item_loader=None, mode="overwrite")

    return run


class _LitEncode:
    """LitData's `fn`: LitData starts its workers by spawn, so it is pickled (a module-level
    class); each worker process loads the tokenizer once, on its first line."""

    def __init__(self, path):
        self.path = path
        self.tok = None

    def __getstate__(self):
        return {"path": self.path, "tok": None}

    def __call__(self, line):
        if self.tok is None:
            from tokenizers import Tokenizer

            self.tok = Tokenizer.from_file(self.path)
        yield np.asarray(self.tok.encode(json.loads(line)["text"]).ids, np.uint16)


if __name__ == "__main__":
    sys.exit("run through bench.py: python bench.py tokenize")
