"""Helpers shared by the test modules (`from _support import ...`).

A module of its own, not conftest.py: pytest runs tests/python too, whose conftest.py would
otherwise be the `conftest` a test module imports, depending on argument order.
"""

import struct
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[3]
GOLDEN = REPO / "tests" / "golden" / "loaderx-0.5.4"

META_LEN = 16 + (1 << 24) * 16
CHUNK_LEN = 1 << 32

# The bucket the `s3` fixture (conftest.py) creates on its moto server.
BUCKET = "zrecord-test"


def images(n, seed=0, shape=(3, 8, 8)):
    """Mildly compressible uint8 samples, distinct per index."""
    rng = np.random.default_rng(seed)
    base = np.linspace(0, 200, int(np.prod(shape))).reshape(shape)
    return (base[None] + rng.integers(0, 40, (n, *shape))).astype(np.uint8)


def rebuild_golden(name: str, dest: Path) -> Path:
    """Expand a checked-in golden store (used bytes only) into a full sparse store."""
    src = GOLDEN / name
    dest.mkdir(parents=True)
    head = (src / "meta.zr.head").read_bytes()
    _, _, tail_chunk, _, _ = struct.unpack("<4sHHII", head[:16])
    with open(dest / "meta.zr", "wb") as f:
        f.write(head)
        f.truncate(META_LEN)
    for cid in range(tail_chunk + 1):
        with open(dest / f"{cid}.zr", "wb") as f:
            f.write((src / f"{cid}.zr.head").read_bytes())
            f.truncate(CHUNK_LEN)
    if (src / "schema.json").exists():
        (dest / "schema.json").write_bytes((src / "schema.json").read_bytes())
    return dest

