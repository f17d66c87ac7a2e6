"""The data sets every store and loader table runs over, built once and cached in
bench/.data so a rerun measures the same bytes.

Two are synthetic (`structured` and `noise`, kept so older figures compare); the realistic
ones are built offline from what the Python registry ships: scikit-image's bundled
photographs (`images64`, `images224`), the standard library's sources tokenized with a BPE
trained here by the `tokenizers` package (`tokens`, and the documents of the packing
section), and embedding-like float vectors (`features`).

(Not `datasets.py`: bench/ comes first on the script's import path, so that name would
shadow Hugging Face's `datasets` package for everything else in the process.)
"""

import os
from pathlib import Path

import numpy as np

from measure import SKIPPED

CACHE = Path(__file__).resolve().parent / ".data"
DATASETS = ("structured", "noise", "images64", "images224", "tokens", "features")


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
