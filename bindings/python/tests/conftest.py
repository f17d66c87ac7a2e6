import os
import struct
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[3]
GOLDEN = REPO / "tests" / "golden" / "loaderx-0.5.4"

META_LEN = 16 + (1 << 24) * 16
CHUNK_LEN = 1 << 32


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


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


# -- loaderx, the reference wheel -------------------------------------------------------

#: Set by `make test`: interop tests must run there, so a missing loaderx is a failure.
REQUIRE_INTEROP = "ZRECORD_REQUIRE_INTEROP"


@pytest.fixture(scope="session")
def loaderx():
    """The reference wheel, loaderx 0.5.4. Without it the test is skipped, with the reason in
    the summary (`pytest -rs`), unless ZRECORD_REQUIRE_INTEROP=1, where it is an error."""
    try:
        import loaderx as module
    except ImportError as e:
        why = f"loaderx 0.5.4 cannot be imported ({e}); `pip install loaderx==0.5.4` (make setup-python does)"
        if os.environ.get(REQUIRE_INTEROP) == "1":
            pytest.fail(f"{REQUIRE_INTEROP}=1 but {why}", pytrace=False)
        pytest.skip(f"interop not tested: {why}")
    return module
