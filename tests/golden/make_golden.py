"""Regenerate the golden stores written by the reference wheel (loaderx 0.5.4).

A store is 256 MiB of sparse meta.zr plus 4 GiB sparse chunks, so the checked-in form keeps
only the used bytes: `meta.zr.head` (header + live table entries), `<id>.zr.head` (chunk
bytes up to the frontier) and `schema.json`, beside `expected.npy` (what the store holds,
in index order). Tests rebuild the full sparse files from these. Run with a venv that has
loaderx==0.5.4:  .venv/bin/python tests/golden/make_golden.py
"""

import shutil
import struct
import tempfile
from pathlib import Path

import numpy as np
import loaderx

HERE = Path(__file__).resolve().parent / "loaderx-0.5.4"


def sample(n, seed):
    rng = np.random.default_rng(seed)
    base = np.linspace(0, 255, 4 * 16 * 16).reshape(4, 16, 16)
    return (base[None] + rng.integers(0, 6, (n, 4, 16, 16))).astype(np.uint8)


def shrink(store: Path, out: Path):
    out.mkdir(parents=True, exist_ok=True)
    meta = (store / "meta.zr").read_bytes()[:16]
    _, _, tail_chunk, tail_offset, length = struct.unpack("<4sHHII", meta)
    with open(store / "meta.zr", "rb") as f:
        (out / "meta.zr.head").write_bytes(f.read(16 + 16 * length))
    for cid in range(tail_chunk + 1):
        with open(store / f"{cid}.zr", "rb") as f:
            used = tail_offset if cid == tail_chunk else 1 << 32
            (out / f"{cid}.zr.head").write_bytes(f.read(used))
    if (store / "schema.json").exists():
        shutil.copy(store / "schema.json", out / "schema.json")


def main():
    shutil.rmtree(HERE, ignore_errors=True)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        data = sample(40, 1)
        for codec in ("flate", "raw"):
            ds = loaderx.Dataset.write(tmp / codec, data, codec=codec)
            ds.close()
            shrink(tmp / codec, HERE / codec)
            np.save(HERE / codec / "expected.npy", data)
        # After delete + compact: the table order is loaderx's swap-last order.
        ds = loaderx.Dataset.write(tmp / "compacted", data, codec="flate")
        ds.delete([0, 7, 39, 12, 7])
        ds.compact()
        expected = ds[np.arange(len(ds))]
        ds.close()
        shrink(tmp / "compacted", HERE / "compacted")
        np.save(HERE / "compacted" / "expected.npy", expected)
        # Ragged records, no schema: expected is the concatenation plus lengths.
        rng = np.random.default_rng(2)
        lens = rng.integers(1, 3000, 25).astype(np.uint32)
        recs = [np.full(int(n), i, np.uint8) if i % 2 else rng.integers(0, 256, int(n), dtype=np.uint8) for i, n in enumerate(lens)]
        src = np.concatenate(recs)
        offs = np.concatenate([[0], np.cumsum(lens)[:-1]]).astype(np.uint64)
        z = loaderx.Zrecord(tmp / "ragged")
        z.append_var(src, offs, lens)
        z.close()
        shrink(tmp / "ragged", HERE / "ragged")
        np.save(HERE / "ragged" / "expected.npy", src)
        np.save(HERE / "ragged" / "lengths.npy", lens)


if __name__ == "__main__":
    main()
