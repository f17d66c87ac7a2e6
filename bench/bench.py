"""zrecord against its peers, side by side in one run on this machine.

    python bench/bench.py [sampler|store|checksums|loader|stream|fields|packing|remote|pool|policy|threads|scale|all]
                          [--quick] [--cold] [--sets a,b]

Every table carries a ratio column against the reference (loaderx 0.5.4) or the named
baseline, measured in the same run. Timings are medians of repeats on a warm page cache
(every store is read once before it is timed), or with --cold on files evicted from the
page cache before every timed pass. The store and loader tables run over every data set:
two synthetic ones (kept so older figures compare) and four built from real material that
the Python registry ships (see `dataset`). Contenders whose package is missing are
skipped with a note. Nothing here asserts a time: this prints tables, it does not test.
"""

import argparse
import functools
import gc
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

SKIPPED = []
# What each section measured, for the targets summary at the end of `all`.
RESULTS = {}


def optional(name):
    try:
        return __import__(name)
    except Exception as e:  # noqa: BLE001 - any import failure means "skip it"
        SKIPPED.append(f"{name}: {type(e).__name__}: {e}".splitlines()[0])
        return None


def median_time(fn, repeat=5, number=1):
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        for _ in range(number):
            fn()
        times.append((time.perf_counter() - t) / number)
    return float(np.median(times))


def disk_usage(path):
    path = Path(path)
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    return sum(os.stat(p).st_blocks * 512 for p in files)


def table(title, header, rows):
    print(f"\n### {title}\n")
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("---" for _ in header) + "|")
    for r in rows:
        print("| " + " | ".join(str(c) for c in r) + " |")
    sys.stdout.flush()


# ---------------------------------------------------------------------------- sampler

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


# ------------------------------------------------------------------------------ store

def make_records(n, noise_only=False, seed=0):
    """uint8(3,64,64) samples: a smooth image-like field plus a little noise."""
    rng = np.random.default_rng(seed)
    if noise_only:
        return rng.integers(0, 256, (n, 3, 64, 64), dtype=np.uint8)
    yy, xx = np.mgrid[0:64, 0:64]
    out = np.empty((n, 3, 64, 64), np.uint8)
    for s in range(0, n, 1000):
        k = min(1000, n - s)
        phase = rng.uniform(0, 6.28, (k, 3, 1, 1))
        freq = rng.uniform(0.02, 0.15, (k, 3, 1, 1))
        field = 127 + 100 * np.sin(freq * xx[None, None] + phase) * np.cos(freq * yy[None, None] - phase)
        out[s:s + k] = np.clip(field + rng.normal(0, 4, (k, 3, 64, 64)), 0, 255).astype(np.uint8)
    return out


# ------------------------------------------------------------------------- data sets
#
# Every table runs over every set. The realistic ones are built offline from what the
# Python registry ships (scikit-image's bundled photographs, the standard library's
# sources, tokenized with a BPE trained here by the `tokenizers` package) and cached under
# --cache, so a rerun measures the same bytes.

CACHE = Path(__file__).resolve().parent / ".data"
DATASETS = ("structured", "noise", "images64", "images224", "tokens", "features")


def _photos():
    """scikit-image's bundled colour photographs as (H, W, 3) uint8 arrays."""
    import skimage
    from PIL import Image

    root = Path(skimage.__file__).parent / "data"
    out = []
    drawn = {"chessboard_RGB", "color", "logo"}  # test patterns, not photographs
    for p in sorted([*root.glob("*.png"), *root.glob("*.jpg")]):
        if p.stem in drawn:
            continue
        img = np.asarray(Image.open(p))
        # Colour photographs only: grey scans, masks and logos are not what users store.
        if img.ndim == 3 and img.shape[2] in (3, 4) and min(img.shape[:2]) >= 256:
            img = img[..., :3]
            if np.ptp(img[..., 0].astype(np.int16) - img[..., 1]) > 8:  # not grey saved as RGB
                out.append(np.ascontiguousarray(img))
    if not out:
        raise RuntimeError(f"no colour photographs found in {root}")
    return out


def make_images(n, side, seed=3):
    """Random crops (and flips) of the bundled photographs, uint8 (3, side, side)."""
    rng = np.random.default_rng(seed)
    photos = _photos()
    out = np.empty((n, 3, side, side), np.uint8)
    for k in range(n):
        img = photos[rng.integers(len(photos))]
        h, w = img.shape[:2]
        y, x = rng.integers(0, h - side + 1), rng.integers(0, w - side + 1)
        crop = img[y:y + side, x:x + side]
        if rng.random() < 0.5:
            crop = crop[:, ::-1]
        out[k] = crop.transpose(2, 0, 1)
    return out


TOKEN_WINDOW = 2048
BPE_VOCAB = 32000


def _stdlib_text(limit_bytes):
    import sysconfig

    root = Path(sysconfig.get_paths()["stdlib"])
    parts, total = [], 0
    for p in sorted(root.rglob("*.py")):
        if "site-packages" in p.parts or "test" in p.parts:
            continue
        try:
            t = p.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        parts.append(t)
        total += len(t)
        if total >= limit_bytes:
            break
    return parts


def _bpe():
    """(tokenizer, texts): a byte-level BPE with a 32,000-token vocabulary (the size of
    LLaMA's), trained here with the `tokenizers` package on the Python standard library's
    sources, and those sources."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers, decoders

    texts = _stdlib_text(24 << 20)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=BPE_VOCAB, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts[: max(1, len(texts) // 3)], trainer=trainer)
    return tok, texts


def make_tokens(n, seed=4):
    """uint16 windows of 2,048 BPE tokens of the Python standard library's sources; windows
    start at random token offsets."""
    tok, texts = _bpe()
    ids = np.concatenate([np.asarray(e.ids, np.uint16) for e in tok.encode_batch(texts)])
    rng = np.random.default_rng(seed)
    starts = rng.integers(0, len(ids) - TOKEN_WINDOW, n)
    return np.stack([ids[s:s + TOKEN_WINDOW] for s in starts])


def token_documents():
    """One uint16 BPE document per standard library source file, ids shifted up by one so
    that 0 is free for an end-of-text id; built once and cached."""
    path = CACHE / "token-documents.npz"
    if path.is_file():
        with np.load(path) as z:
            values, offsets = z["values"], z["offsets"]
    else:
        tok, texts = _bpe()
        docs = [np.asarray(e.ids, np.uint16) + np.uint16(1) for e in tok.encode_batch(texts)]
        docs = [d for d in docs if len(d)]
        values = np.concatenate(docs)
        offsets = np.concatenate([[0], np.cumsum([len(d) for d in docs])])
        CACHE.mkdir(exist_ok=True)
        tmp = path.with_suffix(".tmp.npz")
        np.savez(tmp, values=values, offsets=offsets)
        os.replace(tmp, path)
    return [values[a:b] for a, b in zip(offsets[:-1], offsets[1:])]


def make_features(n, dim=768, seed=5):
    """float32 embedding-like vectors: a mixture of 256 clusters in a rank-64 subspace,
    per-dimension scale and offset, a few outlier dimensions, isotropic noise, then
    layer-normalised, as a transformer's pooled output looks. Full-precision floats:
    their low mantissa bytes are as random as real embeddings'."""
    rng = np.random.default_rng(seed)
    rank, clusters = 64, 256
    basis = rng.normal(0, 1, (rank, dim)) * (np.arange(1, rank + 1) ** -0.5)[:, None]
    centres = rng.normal(0, 1.5, (clusters, rank))
    scale = rng.lognormal(0, 0.3, dim)
    offset = rng.normal(0, 0.2, dim)
    outliers = rng.choice(dim, 6, replace=False)
    out = np.empty((n, dim), np.float32)
    for s in range(0, n, 4096):
        k = min(4096, n - s)
        z = centres[rng.integers(clusters, size=k)] + rng.normal(0, 0.7, (k, rank))
        x = (z @ basis) * scale + offset + rng.normal(0, 0.15, (k, dim))
        x[:, outliers] *= 8
        x = (x - x.mean(1, keepdims=True)) / x.std(1, keepdims=True)
        out[s:s + k] = x
    return out


def dataset(name, quick):
    """(array, description) of data set `name`, built once and cached."""
    sizes = {  # about 240 MiB each in a full run (tokens and features less), 1/5 quick
        "structured": 20000, "noise": 20000, "images64": 20000, "images224": 1600,
        "tokens": 20000, "features": 40000,
    }
    n = sizes[name] // (5 if quick else 1)
    desc = {
        "structured": "synthetic uint8(3,64,64): smooth field + noise",
        "noise": "synthetic uint8(3,64,64): uniform noise",
        "images64": "photo crops uint8(3,64,64) (scikit-image data)",
        "images224": "photo crops uint8(3,224,224) (scikit-image data)",
        "tokens": f"uint16 windows of {TOKEN_WINDOW} BPE-{BPE_VOCAB} tokens (Python stdlib source)",
        "features": "float32(768) embedding-like vectors",
    }[name]
    path = CACHE / f"{name}-{n}.npy"
    if path.is_file():
        return np.load(path), desc
    if name in ("structured", "noise"):
        data = make_records(n, noise_only=name == "noise")
    elif name == "images64":
        data = make_images(n, 64)
    elif name == "images224":
        data = make_images(n, 224)
    elif name == "tokens":
        data = make_tokens(n)
    else:
        data = make_features(n)
    CACHE.mkdir(exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as f:
        np.save(f, data)
    os.replace(tmp, path)
    return data, desc


def load_set(name, args):
    """`dataset(name)`, or (None, None) with a note when a package it is built from is
    missing (the test venv that runs `make bench-smoke` has no scikit-image or tokenizers)."""
    try:
        return dataset(name, args.quick)
    except ImportError as e:
        SKIPPED.append(f"data set {name}: {type(e).__name__}: {e} (pip install -r bench/requirements.txt)")
        return None, None


def batch_size_for(data):
    """Samples per batch: 256, or 64 for samples over 64 KiB (images224)."""
    return 256 if data[0].nbytes <= 64 << 10 else 64


def random_batches(data, args, seed):
    """(batch size, number of batches, the batches' random indices) for the policy and
    pool sections: 100 batches (20 with --quick), drawn with `seed`."""
    batch = batch_size_for(data)
    batches = 100 if not args.quick else 20
    rng = np.random.default_rng(seed)
    return batch, batches, [rng.integers(0, len(data), batch) for _ in range(batches)]


def selected_sets(args):
    names = DATASETS if args.sets == "all" else tuple(args.sets.split(","))
    bad = [s for s in names if s not in DATASETS]
    if bad:
        raise SystemExit(f"unknown data set(s) {bad}; choose from {DATASETS}")
    return names


def evict(paths):
    """Drops `paths` (files, or every file under a directory) from the page cache.

    fsync first (dirty pages are not dropped), then POSIX_FADV_DONTNEED, which needs no
    privileges on files this process can open. Pages some process still maps are kept by
    the kernel, so every contender is closed (unmapped) before this runs.
    """
    for root in paths:
        root = Path(root)
        for p in [root] if root.is_file() else [q for q in root.rglob("*") if q.is_file()]:
            fd = os.open(p, os.O_RDONLY)
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


class Contender:
    name = "?"

    def write(self, data, path): ...
    def open(self, path): ...
    def gather(self, idx): ...
    def close(self): ...


class ZrecordStore(Contender):
    def __init__(self, mod, label, codec, **write_kw):
        self.mod, self.name, self.codec, self.write_kw = mod, label, codec, write_kw

    def write(self, data, path):
        self.mod.Dataset.write(path, data, codec=self.codec, **self.write_kw).close()

    def open(self, path):
        self.ds = self.mod.Dataset(path)

    def gather(self, idx):
        return self.ds.__getitems__(idx)

    def close(self):
        self.ds.close()


class ZrecordGatherInto(ZrecordStore):
    """`Zrecord.gather` into one buffer reused for every batch: the engine's own speed,
    with no allocation per batch (what `Dataset.__getitems__` is measured against)."""

    def open(self, path):
        super().open(path)
        self.out = None

    def gather(self, idx):
        ds = self.ds
        if self.out is None or len(self.out) != len(idx):
            self.out = np.empty((len(idx), *ds.shape), ds.dtype)
        ds.store.gather(idx, self.out, self.out[0].nbytes)
        return self.out


class NpyMemmap(Contender):
    name = "npy memmap"

    def write(self, data, path):
        with open(path, "wb") as f:  # np.save(path) would add a ".npy" suffix
            np.save(f, data)

    def open(self, path):
        self.arr = np.load(path, mmap_mode="r")

    def gather(self, idx):
        return self.arr[idx]

    def close(self):
        del self.arr


class H5(Contender):
    def __init__(self, h5py, gzip):
        self.h5py, self.gzip = h5py, gzip
        self.name = "h5py-gzip" if gzip else "h5py"

    def write(self, data, path):
        with self.h5py.File(path, "w") as f:
            kw = dict(compression="gzip", compression_opts=1, chunks=(1, *data.shape[1:])) if self.gzip else {}
            f.create_dataset("x", data=data, **kw)

    def open(self, path):
        self.f = self.h5py.File(path, "r")
        self.x = self.f["x"]

    def gather(self, idx):
        # h5py needs increasing indices; sort, read, and put back in the asked order.
        order = np.argsort(idx, kind="stable")
        srt = idx[order]
        uniq, inv = np.unique(srt, return_inverse=True)
        got = self.x[uniq][inv]
        out = np.empty_like(got)
        out[order] = got
        return out

    def close(self):
        self.f.close()


class Lmdb(Contender):
    name = "lmdb"

    def __init__(self, lmdb):
        self.lmdb = lmdb

    def write(self, data, path):
        env = self.lmdb.open(str(path), map_size=max(4 << 30, 2 * data.nbytes), subdir=True, lock=False)
        with env.begin(write=True) as txn:
            for i in range(len(data)):
                txn.put(i.to_bytes(8, "big"), data[i].tobytes())
        env.close()
        self.dtype, self.shape = data.dtype, data.shape[1:]

    def open(self, path):
        self.env = self.lmdb.open(str(path), readonly=True, lock=False, subdir=True)

    def gather(self, idx):
        out = np.empty((len(idx), *self.shape), self.dtype)
        with self.env.begin(buffers=True) as txn:
            for k, i in enumerate(idx):
                out[k] = np.frombuffer(txn.get(int(i).to_bytes(8, "big")), self.dtype).reshape(self.shape)
        return out

    def close(self):
        self.env.close()


class ArrayRecord(Contender):
    name = "array_record"

    def __init__(self, mods):
        self.writer_mod, self.reader_mod = mods

    def write(self, data, path):
        w = self.writer_mod.ArrayRecordWriter(str(path), "group_size:1")
        for i in range(len(data)):
            w.write(data[i].tobytes())
        w.close()
        self.dtype, self.shape = data.dtype, data.shape[1:]

    def open(self, path):
        self.r = self.reader_mod.ArrayRecordDataSource([str(path)])

    def gather(self, idx):
        recs = self.r.__getitems__([int(i) for i in idx])
        return np.stack([np.frombuffer(b, self.dtype).reshape(self.shape) for b in recs])

    def close(self):
        r, self.r = self.r, None
        if hasattr(r, "__exit__"):
            r.__exit__(None, None, None)


def gather_all(c, idxs):
    """One pass over the batches; each batch is dropped before the next, as a loader does."""
    for ix in idxs:
        c.gather(ix)


@functools.cache
def has_zstd():
    """Whether this zrecord build writes the opt-in zstd codec (record tag 2)."""
    import zrecord
    work = Path(tempfile.mkdtemp(prefix="zrbench-"))
    try:
        zrecord.Dataset.write(work / "z", np.zeros((2, 64), np.uint8), codec="zstd").close()
        return True
    except (ValueError, TypeError) as e:
        SKIPPED.append(f"zrecord zstd: {e}".splitlines()[0])
        return False
    finally:
        shutil.rmtree(work, ignore_errors=True)


def store_contenders():
    import zrecord
    out = [
        ZrecordStore(zrecord, "zrecord flate", "flate"),
        ZrecordStore(zrecord, "zrecord raw", "raw"),
        ZrecordGatherInto(zrecord, "zrecord raw, gather into one buffer", "raw"),
    ]
    if "min_savings" in getattr(zrecord.Dataset.write, "__doc__", ""):
        out.insert(1, ZrecordStore(zrecord, "zrecord flate, min_savings=0", "flate", min_savings=0.0))
    if has_zstd():
        out.insert(2, ZrecordStore(zrecord, "zrecord zstd (opt-in)", "zstd"))
    loaderx = optional("loaderx")
    if loaderx is not None:
        out += [ZrecordStore(loaderx, "loaderx flate", "flate"), ZrecordStore(loaderx, "loaderx raw", "raw")]
    out.append(NpyMemmap())
    h5py = optional("h5py")
    if h5py is not None:
        out += [H5(h5py, False), H5(h5py, True)]
    lmdb = optional("lmdb")
    if lmdb is not None:
        out.append(Lmdb(lmdb))
    try:
        from array_record.python import array_record_data_source, array_record_module
        out.append(ArrayRecord((array_record_module, array_record_data_source)))
    except Exception as e:  # noqa: BLE001
        SKIPPED.append(f"array_record: {type(e).__name__}: {e}".splitlines()[0])
    return out


def _reference(name):
    if "gzip" in name or "flate" in name or "zstd" in name:
        return "loaderx flate"
    return "loaderx raw"


def bench_store(args):
    for set_name in selected_sets(args):
        data, desc = load_set(set_name, args)
        if data is None:
            continue
        n = len(data)
        batch = 256
        batches = (200 if not args.quick else 40) if not args.cold else (20 if not args.quick else 5)
        rng = np.random.default_rng(1)
        idxs = [rng.integers(0, n, batch) for _ in range(batches)]
        mib = data.nbytes / 2**20
        results = {}
        for c in store_contenders():
            if args.only and not any(o in c.name for o in args.only.split(",")):
                continue
            work = Path(tempfile.mkdtemp(prefix="zrbench-", dir=args.workdir))
            path = work / "store"
            try:
                # Best of up to three writes: each ends in an fsync whose time on a shared
                # disk varies more than the work does. Slow writers (over 8 s) get one.
                wts = []
                while len(wts) < 3 and (not wts or max(wts) < 8):
                    if wts:
                        shutil.rmtree(path, ignore_errors=True)
                        if path.exists():
                            path.unlink()
                    os.sync()  # start each timed write with no other writeback pending
                    t = time.perf_counter()
                    c.write(data, path)
                    wts.append(time.perf_counter() - t)
                wt = min(wts)
                c.open(path)
                # Check the contents once (this also warms the page cache).
                got = c.gather(idxs[0])
                assert np.array_equal(got, data[idxs[0]]), c.name
                if args.cold:
                    # Every batch from a cold cache, as in a data set far larger than memory:
                    # close (a mapped page is never dropped), evict, reopen, then time the
                    # batch alone. Evicting once per pass instead would let readahead-based
                    # readers warm the rest of a small file and time mostly cached reads.
                    def cold_pass():
                        total = 0.0
                        for ix in idxs:
                            c.close()
                            evict([path])
                            c.open(path)
                            t = time.perf_counter()
                            c.gather(ix)
                            total += time.perf_counter() - t
                        return total
                    gt = float(np.median([cold_pass() for _ in range(3)])) / batches
                else:
                    t = time.perf_counter()
                    c.gather(idxs[1])
                    if time.perf_counter() - t > 0.02:
                        # A slow contender (over 20 ms a batch): one timed pass over the
                        # first 20 batches, so it does not hold the run for minutes.
                        gt = median_time(lambda: gather_all(c, idxs[:20]), repeat=1) / 20
                    else:
                        gather_all(c, idxs)
                        gt = median_time(lambda: gather_all(c, idxs), repeat=3) / batches
                c.close()
                results[c.name] = (wt, gt, disk_usage(path))
            except Exception as e:  # noqa: BLE001
                SKIPPED.append(f"{c.name} ({set_name}): {type(e).__name__}: {e}".splitlines()[0])
            finally:
                shutil.rmtree(work, ignore_errors=True)
        RESULTS[("store-cold" if args.cold else "store", set_name)] = dict(results, _bytes=data.nbytes)
        batch_mib = batch * data[0].nbytes / 2**20
        rows = []
        npy = results.get("npy memmap")
        for name, (wt, gt, du) in results.items():
            rw, rg, _ = results.get(_reference(name), (None, None, None))
            rows.append([name, f"{mib / wt:.0f} MiB/s", f"{batch_mib / gt:.0f} MiB/s", f"{gt * 1e3:.2f} ms",
                         f"{du / 2**20:.1f} MiB", f"{data.nbytes / du:.2f}x",
                         f"{rw / wt:.2f}x" if rw else "-", f"{rg / gt:.2f}x" if rg else "-",
                         f"{npy[1] / gt:.2f}x" if npy else "-"])
        cache = "cold page cache: files evicted before every batch" if args.cold else "warm page cache"
        table(f"Store [{set_name}]: {n} x {desc}, {data[0].nbytes:,} B each, random batch {batch} x {batches}, {cache}",
              ["store", "write", "gather", "per batch", "on disk", "ratio", "write vs loaderx", "gather vs loaderx",
               "gather vs npy"], rows)


# ----------------------------------------------------------------------------- policy

POLICY_THRESHOLDS = (0.0, 0.05, 0.10, 0.125, 0.15, 0.20, 0.30)


def bench_policy(args):
    """What each `min_savings` costs in disk and buys in read speed, per data set: the
    numbers behind the default (docs/codecs.md). Every threshold's store is written and
    gathered in the same process; speeds are relative to min_savings=0 (loaderx's rule)."""
    import zrecord
    from zrecord import tools

    for set_name in selected_sets(args):
        data, desc = load_set(set_name, args)
        if data is None:
            continue
        n = len(data)
        batch, batches, idxs = random_batches(data, args, seed=6)
        work = Path(tempfile.mkdtemp(prefix="zrbench-", dir=args.workdir))
        res = {}
        try:
            stores = {}
            for s in POLICY_THRESHOLDS:
                path = work / f"s{s}"
                zrecord.Dataset.write(path, data, codec="flate", min_savings=s).close()
                stores[s] = path
            raw = work / "raw"
            zrecord.Dataset.write(raw, data, codec="raw").close()
            # Interleave the thresholds over the repeats so load on the machine hits all alike.
            times = {s: [] for s in (*POLICY_THRESHOLDS, "raw")}
            dss = {s: zrecord.Dataset(p) for s, p in (*stores.items(), ("raw", raw))}
            for ds in dss.values():  # warm every store's pages, and the batch pool
                gather_all(_DsGather(ds), idxs)
            for _ in range(5 if not args.quick else 3):
                for s, ds in dss.items():
                    t = time.perf_counter()
                    gather_all(_DsGather(ds), idxs)
                    times[s].append((time.perf_counter() - t) / batches)
            for s, ds in dss.items():
                ins = tools.inspect(ds.path)
                res[s] = (float(np.median(times[s])), disk_usage(ds.path), ins.flate_records / max(1, ins.records))
                ds.close()
        finally:
            shutil.rmtree(work, ignore_errors=True)
        base_t, base_du, _ = res[0.0]
        batch_mib = batch * data[0].nbytes / 2**20
        rows = []
        for s, (gt, du, frac) in res.items():
            rows.append([s if s == "raw" else f"{s:.3f}", f"{frac * 100:.0f}%", f"{data.nbytes / du:.2f}x",
                         f"{(du - base_du) / base_du * 100:+.1f}%", f"{batch_mib / gt:.0f} MiB/s", f"{base_t / gt:.2f}x"])
        table(f"Codec policy [{set_name}]: {n} x {desc}, flate store per min_savings, random batch {batch} x {batches}, warm",
              ["min_savings", "records kept compressed", "ratio", "disk vs 0.0", "gather", "gather vs 0.0"], rows)


class _DsGather:
    def __init__(self, ds):
        self.ds = ds

    def gather(self, idx):
        return self.ds.__getitems__(idx)


# ------------------------------------------------------------------------------- pool

def bench_pool(args):
    """`Dataset.__getitems__` against the engine's own speed on raw records, as a consumer
    holding the last k batches sees it (k = 0: each batch dropped before the next; a loader
    with prefetch, or a training step still using the previous batch, holds a few). Three
    ways to get a batch, timed in turn in the same process (best of interleaved rounds):
    `__getitems__` (pooled
    arrays), a fresh `np.empty` per batch filled by `Zrecord.gather` (what `__getitems__`
    did before the pool), and `Zrecord.gather` into one reused buffer (the ceiling)."""
    import collections

    import zrecord

    for set_name in selected_sets(args):
        data, desc = load_set(set_name, args)
        if data is None:
            continue
        batch, batches, idxs = random_batches(data, args, seed=7)
        work = Path(tempfile.mkdtemp(prefix="zrbench-", dir=args.workdir))
        rows = []
        try:
            ds = zrecord.Dataset.write(work / "raw", data, codec="raw")
            store, item = ds.store, data[0].nbytes
            reused = np.empty((batch, *data.shape[1:]), data.dtype)

            def fresh(ix):
                out = np.empty((batch, *data.shape[1:]), data.dtype)
                store.gather(ix, out, item)
                return out

            def into_reused(ix):
                store.gather(ix, reused, item)
                return None

            ways = {"Dataset.__getitems__": ds.__getitems__, "np.empty + gather (before)": fresh,
                    "gather into one buffer": into_reused}
            for held in (0, 1, 4):
                times = {w: [] for w in ways}
                for _ in range(7 if not args.quick else 5):
                    for w, f in ways.items():
                        live = collections.deque(maxlen=held or 1)
                        t = time.perf_counter()
                        for ix in idxs:
                            b = f(ix)
                            if held:
                                live.append(b)
                            del b
                        times[w].append((time.perf_counter() - t) / batches)
                        live.clear()
                # Best round of each: on a shared machine the minimum is the least disturbed.
                med = {w: float(np.min(v)) for w, v in times.items()}
                RESULTS[("pool", set_name, held)] = med
                ceiling = med["gather into one buffer"]
                for w, dt in med.items():
                    rows.append([held, w, f"{batch * item / dt / 2**20:.0f} MiB/s", f"{dt * 1e6:.0f} µs",
                                 f"{dt / ceiling:.2f}x"])
            ds.close()
        finally:
            shutil.rmtree(work, ignore_errors=True)
        table(f"Python path [{set_name}]: raw store, {desc}, random batch {batch} x {batches}, warm",
              ["batches held", "how", "gather", "per batch", "time vs one buffer"], rows)


# ---------------------------------------------------------------------------- threads

def bench_threads(args):
    """Gather and loader throughput on 1 core and on all of them: the same script run
    under `taskset` (rayon and the loader size their pools from the process's CPU
    affinity), zrecord flate and raw only."""
    cpus = sorted(os.sched_getaffinity(0))
    if not shutil.which("taskset"):
        SKIPPED.append("threads: taskset not found")
        return
    base = [sys.executable, "-W", "ignore", str(Path(__file__).resolve())]
    common = ["--sets", args.sets, "--workers", str(args.workers), "--no-torch"] + (["--quick"] if args.quick else [])
    if args.workdir:
        common += ["--workdir", args.workdir]
    for label, cpu_list in (("1 core", str(cpus[0])), (f"{len(cpus)} cores", ",".join(map(str, cpus)))):
        print(f"\n#### {label} (taskset -c {cpu_list})")
        sys.stdout.flush()
        for part in ("store", "loader"):
            extra = ["--only", "zrecord flate,zrecord raw"] if part == "store" else ["--only-loader", "zrecord"]
            subprocess.run(["taskset", "-c", cpu_list, *base, part, *common, *extra], check=False)


# -------------------------------------------------------------------------- checksums

def bench_checksums(args):
    """Per-record checksums: gather with verification on vs off, and write with checksums
    kept vs not (``checksums=False`` writes as zrecord did before it kept them), in the
    same run. On and off alternate, so drifting load on a shared machine hits both.

    The synthetic structured set barely compresses (ratio 1.06), so the default codec
    policy stores it raw; its flate row passes ``min_savings=0`` to measure DEFLATE on
    every record, and the token set's row measures it on data the policy does compress."""
    import zrecord
    batches = 200 if not args.quick else 40
    rounds = 7 if not args.quick else 2
    cases = [("structured", "flate", 0.0), ("structured", "raw", None)]
    if not args.quick:
        cases.append(("tokens", "flate", None))
    rows = []
    for set_name, codec, min_savings in cases:
        data, desc = load_set(set_name, args)
        if data is None:
            continue
        n = len(data)
        rng = np.random.default_rng(2)
        idxs = [rng.integers(0, n, 256) for _ in range(batches)]
        data = data.reshape(n, -1).view(np.uint8)
        item = data[0].nbytes
        mib = data.nbytes / 2**20
        step = max(1, (64 << 20) // item)
        kw = {} if min_savings is None else {"min_savings": min_savings}
        work = Path(tempfile.mkdtemp(prefix="zrbench-", dir=args.workdir))
        try:
            writes = {True: [], False: []}
            for r in range(rounds):
                for keep in (True, False) if r % 2 == 0 else (False, True):
                    path = work / f"w{int(keep)}{r}"
                    os.sync()  # start each timed write with no other writeback pending
                    t = time.perf_counter()
                    with zrecord.Zrecord(path, codec=codec, checksums=keep, **kw) as z:
                        for s in range(0, n, step):
                            k = min(step, n - s)
                            z.append(data[s:s + k], k, item)
                        z.sync()
                    writes[keep].append(time.perf_counter() - t)
                    if r < rounds - 1:
                        shutil.rmtree(path)
            path = work / f"w1{rounds - 1}"
            stores = {v: zrecord.Zrecord(path, create=False, verify=v) for v in ("auto", "never")}
            assert stores["auto"].checksums
            st = stores["auto"].stats()
            out = np.empty((256, item), np.uint8)

            def one_pass(z):
                for ix in idxs:
                    z.gather(ix, out, item)

            for z in stores.values():
                one_pass(z)  # warm the page cache
                z.gather(idxs[0], out, item)
                assert np.array_equal(out, data[idxs[0]])
            reads = {"auto": [], "never": []}
            for r in range(rounds * 2):
                for v in ("auto", "never") if r % 2 == 0 else ("never", "auto"):
                    t = time.perf_counter()
                    one_pass(stores[v])
                    reads[v].append((time.perf_counter() - t) / batches)
            for z in stores.values():
                z.close()
        finally:
            shutil.rmtree(work, ignore_errors=True)
        # Writes end in fsyncs, whose time on a shared disk varies far more than the work
        # does: the best of the rounds is the least disturbed measure of each.
        w_on, w_off = float(np.min(writes[True])), float(np.min(writes[False]))
        g_on, g_off = float(np.median(reads["auto"])), float(np.median(reads["never"]))
        batch_mib = 256 * item / 2**20
        stored = "every record DEFLATE" if min_savings == 0.0 else "default policy"
        ratio = data.nbytes / max(1, st["live_bytes"])
        RESULTS.setdefault(("checksums",), []).append(
            (f"{set_name}, {codec} ({stored})", codec, w_on / w_off - 1, g_on / g_off - 1))
        rows.append([f"{set_name}, {codec} ({stored}, ratio {ratio:.2f})",
                     f"{mib / w_on:.0f} MiB/s", f"{mib / w_off:.0f} MiB/s", f"{(w_on / w_off - 1) * 100:+.1f}%",
                     f"{batch_mib / g_on:.0f} MiB/s", f"{batch_mib / g_off:.0f} MiB/s",
                     f"{(g_on / g_off - 1) * 100:+.1f}%"])
    table(f"Checksums: random batch 256 x {batches}, best of {rounds} writes, median of {rounds * 2} gather passes, "
          f"on and off alternating (warm page cache)",
          ["set, store", "write, checksums kept", "write, not kept", "write cost", "gather, verify on",
           "gather, verify off", "gather cost"], rows)


# ----------------------------------------------------------------------------- loader

#: Rounds of every loader per data set; the median counts.
LOADER_ROUNDS = 3


def bench_loader(args):
    import zrecord
    loaderx = optional("loaderx")
    torch = None if args.no_torch else optional("torch")
    workers = args.workers
    for set_name in selected_sets(args):
        data, desc = load_set(set_name, args)
        if data is None:
            continue
        n = len(data)
        batch = batch_size_for(data)
        steps = 300 if not args.quick else 60
        if data[0].nbytes * batch * steps > 1 << 30:
            steps = max(20, (1 << 30) // (data[0].nbytes * batch))
        if args.cold:
            steps = min(steps, max(10, n // (2 * batch)))  # about half the set: mostly first touches
        labels = np.arange(n, dtype=np.int64)
        work = Path(tempfile.mkdtemp(prefix="zrbench-", dir=args.workdir))
        res = {}
        try:
            def run_loader(name, make, files):
                # Cold: evict before the loader opens anything, and time everything from the
                # constructor to the last batch: the cold first epoch as a job sees it
                # (opening, the first batch's wait, any background warming), per batch.
                if args.cold:
                    evict(files)
                    t = time.perf_counter()
                    loader = make()
                    it = iter(loader)
                    for _ in range(steps):
                        b = next(it)
                    return loader, b, (time.perf_counter() - t) / steps
                loader = make()
                it = iter(loader)
                for _ in range(20):
                    b = next(it)
                t = time.perf_counter()
                for _ in range(steps):
                    b = next(it)
                elapsed = (time.perf_counter() - t) / steps
                return loader, b, elapsed

            # (package, module, codec, Dataset.write keywords, DataLoader keywords)
            variants = [("zrecord", zrecord, "flate", {}, {}), ("zrecord", zrecord, "raw", {}, {})]
            if "min_savings" in (zrecord.Dataset.write.__doc__ or ""):
                variants.insert(1, ("zrecord", zrecord, "flate", {"min_savings": 0.0}, {}))
            if has_zstd():
                variants.insert(2, ("zrecord", zrecord, "zstd", {}, {}))
            if args.cold and "warm" in (zrecord.DataLoader.__doc__ or ""):
                # The loader warms a store that fits in memory by default; this row is what
                # a store too large to warm gets: every record read from disk on its own.
                variants.insert(1, ("zrecord", zrecord, "flate", {}, {"warm": False}))
            if loaderx is not None:
                variants += [("loaderx", loaderx, "flate", {}, {}), ("loaderx", loaderx, "raw", {}, {})]
            # Every store is written first; then each loader runs once per round, in turn,
            # and its median round counts: a loader's figure moved by a third between runs
            # when each ran once, so one slow spell of the machine could decide a ratio.
            contenders = []  # (name, make, files, close)
            written = {}
            for label, mod, codec, kw, loader_kw in variants:
                tag = f"{label} {codec}" + (", min_savings=0" if kw else "") + (", warm=False" if loader_kw else "")
                if args.only_loader and args.only_loader not in tag:
                    continue
                key = (label, codec, tuple(sorted(kw.items())))
                if key not in written:
                    dpath, lpath = work / f"{len(written)}-d", work / f"{len(written)}-l"
                    mod.Dataset.write(dpath, data, codec=codec, **kw).close()
                    mod.Dataset.write(lpath, labels, codec=codec).close()
                    written[key] = (dpath, lpath)
                dpath, lpath = written[key]
                holder = {}

                def make(mod=mod, dpath=dpath, lpath=lpath, holder=holder, loader_kw=loader_kw):
                    holder["d"], holder["l"] = mod.Dataset(dpath), mod.Dataset(lpath)
                    return mod.DataLoader(holder["d"], holder["l"], num_workers=workers, batch_size=batch, **loader_kw)

                def close(loader, holder=holder):
                    loader.close()
                    holder["d"].close()
                    holder["l"].close()

                contenders.append((tag, make, [dpath, lpath], close))
            if torch is not None and not args.only_loader:
                np.save(work / "d.npy", data)
                np.save(work / "l.npy", labels)
                from torch.utils.data import DataLoader as TorchLoader

                def make_torch():
                    ds = _TorchNpy(str(work / "d.npy"), str(work / "l.npy"))
                    sampler = torch.utils.data.BatchSampler(
                        torch.utils.data.RandomSampler(ds, replacement=True, num_samples=10**9), batch, False)
                    return TorchLoader(ds, batch_sampler=sampler, num_workers=4, collate_fn=_identity,
                                       prefetch_factor=4, persistent_workers=True)

                contenders.append(("torch (npy memmap, 4 procs)", make_torch, [work / "d.npy", work / "l.npy"],
                                   lambda loader: None))
            rounds = {name: [] for name, *_ in contenders}
            for _ in range(LOADER_ROUNDS if not args.quick else 1):
                for name, make, files, close in contenders:
                    loader, b, elapsed = run_loader(name, make, files)
                    if "torch" not in name:
                        assert b["data"].shape == (batch, *data.shape[1:])
                    close(loader)
                    del loader
                    rounds[name].append(elapsed)
            res = {name: float(np.median(times)) for name, times in rounds.items()}
        finally:
            shutil.rmtree(work, ignore_errors=True)
        RESULTS[("loader-cold" if args.cold else "loader", set_name)] = res
        batch_mib = batch * data[0].nbytes / 2**20
        rows = []
        torch_t = res.get("torch (npy memmap, 4 procs)")
        for name, dt in res.items():
            ref = res.get(_reference(name) if "torch" not in name else "loaderx flate")
            rows.append([name, f"{1 / dt:.1f}", f"{dt * 1e3:.2f} ms", f"{batch / dt:,.0f}", f"{batch_mib / dt:.0f} MiB/s",
                         f"{ref / dt:.2f}x" if ref else "-", f"{torch_t / dt:.2f}x" if torch_t else "-"])
        cache = ("cold page cache: files evicted before each loader starts, timed from its constructor to the last "
                 "batch" if args.cold else "warm page cache")
        rounds_note = f"median of {LOADER_ROUNDS} rounds" if not args.quick else "one round"
        table(f"Loader [{set_name}]: {desc}, batches of {batch} with labels, {workers} workers, {steps} steps "
              f"({rounds_note}), {cache}",
              ["loader", "batches/s", "per batch", "samples/s", "throughput", "vs loaderx (same codec)", "vs torch"],
              rows)


def _identity(x):
    return x


class _TorchNpy:
    """Map-style torch dataset over .npy memmaps, batched through __getitems__."""

    def __init__(self, data, labels):
        self.data_path, self.label_path = data, labels
        self.data = self.labels = None
        self.n = len(np.load(data, mmap_mode="r"))

    def __len__(self):
        return self.n

    def _open(self):
        if self.data is None:
            self.data = np.load(self.data_path, mmap_mode="r")
            self.labels = np.load(self.label_path, mmap_mode="r")

    def __getitem__(self, i):
        self._open()
        return self.data[i], self.labels[i]

    def __getitems__(self, idxs):
        import torch
        self._open()
        idx = np.asarray(idxs)
        return {"data": torch.from_numpy(self.data[idx]), "label": torch.from_numpy(self.labels[idx])}


# ----------------------------------------------------------------------------- fields

def bench_fields(args):
    """Named fields, ragged samples and shards against what they replace (bench/fields.py)."""
    import fields

    fields.bench_fields(args, table, RESULTS)


def bench_packing(args):
    """Packed token batches against nanoGPT's random windows and Grain's packing
    (bench/packing.py)."""
    import packing

    def documents():
        try:
            return token_documents()
        except ImportError as e:
            if not args.quick:
                raise
            # The smoke run's venv has no tokenizers: synthetic documents keep the code run.
            SKIPPED.append(f"packing on real documents: {e}; --quick used synthetic ones")
            rng = np.random.default_rng(0)
            return [rng.integers(1, BPE_VOCAB, int(n), dtype=np.uint16) for n in rng.lognormal(7, 1.2, 4000)]

    try:
        packing.bench_packing(args, table, RESULTS, documents, optional)
    except ImportError as e:
        SKIPPED.append(f"packing: {type(e).__name__}: {e} (pip install -r bench/requirements.txt)")


def bench_remote(args):
    """Datasets in a local S3-compatible server: the cache the stream plans (bench/remote.py)."""
    import remote

    remote.bench_remote(args, table, RESULTS, load_set, optional)


# ----------------------------------------------------------------------------- stream

def bench_stream(args):
    """Issue 9's budgets, as ratios measured in this run: SHUFFLE against IID sampling at
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


# ------------------------------------------------------------------------------ scale

def bench_scale(args):
    import zrecord
    rows = []
    sizes = (20_000, 200_000, 2_000_000) if not args.quick else (20_000, 200_000)
    rng = np.random.default_rng(2)
    work = Path(tempfile.mkdtemp(prefix="zrbench-", dir=args.workdir))
    try:
        for n in sizes:
            d = work / f"s{n}"
            rec = 256
            with zrecord.Zrecord(d) as z:
                step = 100_000
                for s in range(0, n, step):
                    k = min(step, n - s)
                    block = (np.arange(k * rec, dtype=np.uint32) // 97 + s).astype(np.uint8)
                    z.append(block, k, rec)
                z.sync()
            t = median_time(lambda: zrecord.Zrecord(d).close(), repeat=5)
            with zrecord.Zrecord(d) as z:
                out = np.empty((256, rec), np.uint8)
                idx = [rng.integers(0, n, 256).astype(np.uint64) for _ in range(200)]
                for ix in idx:
                    z.gather(ix, out, rec)
                g = median_time(lambda: [z.gather(ix, out, rec) for ix in idx], repeat=3) / len(idx)
            rows.append([f"{n:,}", f"{g * 1e6:.1f} µs", f"{t * 1e3:.2f} ms"])
            shutil.rmtree(d, ignore_errors=True)
        table("Scale: random gather of 256 x 256-byte flate records, and open() time",
              ["records", "gather per batch", "open()"], rows)
        if not args.quick:
            rss_rows = []
            big = work / "big.npy"
            n = (4 << 30) // 12288
            arr = np.lib.format.open_memmap(big, mode="w+", dtype=np.uint8, shape=(n, 3, 64, 64))
            block = make_records(4096)
            for s in range(0, n, 4096):
                e = min(n, s + 4096)
                arr[s:e] = block[: e - s]
            arr.flush()
            del arr
            for mod in ("zrecord", "loaderx"):
                code = (f"import numpy as np, {mod} as m;"
                        f"m.Dataset.write({str(work / ('w-' + mod))!r}, np.load({str(big)!r}, mmap_mode='r')).close()")
                t = time.perf_counter()
                p = subprocess.run(["/usr/bin/time", "-f", "%M", sys.executable, "-c", code], capture_output=True, text=True)
                dt = time.perf_counter() - t
                if p.returncode != 0:
                    SKIPPED.append(f"{mod} 4 GiB write: {p.stderr.strip().splitlines()[-1]}")
                    continue
                peak = int(p.stderr.strip().splitlines()[-1])
                rss_rows.append([mod, f"{peak / 1024:.0f} MiB", f"{4096 / dt:.0f} MiB/s"])
                shutil.rmtree(work / ("w-" + mod), ignore_errors=True)
            table("Dataset.write of a 4 GiB np.load(mmap_mode='r') array", ["package", "peak RSS", "write"], rss_rows)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def bench_summary(args):
    """One table of the targets (issues 10 and 12), each ratio from this run's sections."""
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
    import fields
    import packing

    import remote

    fields.summary_rows(RESULTS, row)
    packing.summary_rows(RESULTS, row)
    remote.summary_rows(RESULTS, row)
    if rows:
        table("Targets: every ratio above, against its target (same run)",
              ["what", "measured", "target", "", "note"], rows)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", nargs="?", default="all",
                    choices=["sampler", "store", "checksums", "loader", "stream", "fields", "packing", "remote", "pool",
                             "policy", "threads", "scale", "all"])
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
    for part in ("sampler", "store", "checksums", "loader", "stream", "fields", "packing", "remote", "pool", "policy",
                 "threads", "scale"):
        if args.what in (part, "all"):
            gc.collect()
            globals()[f"bench_{part}"](args)
    if args.what == "all" and not args.cold:
        # The cold-cache rows of the targets: the token set (and photo crops) from disk.
        cold = argparse.Namespace(**{**vars(args), "cold": True, "sets": "tokens,images64",
                                     "only": "zrecord flate,zrecord raw,loaderx flate,npy memmap,array_record"})
        print("\n## Cold page cache")
        bench_store(cold)
        bench_loader(argparse.Namespace(**{**vars(cold), "sets": "tokens"}))
        bench_summary(args)
    load = os.getloadavg()
    print(f"\nload average at end {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}")
    if SKIPPED:
        print("\nskipped:")
        for s in dict.fromkeys(SKIPPED):
            print(f"- {s}")


if __name__ == "__main__":
    main()
