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


def s3_client(s3):
    """A boto3 client (moto[server]'s own dependency) of the `s3` fixture's server."""
    import boto3

    return boto3.client("s3", endpoint_url=s3["aws_endpoint"], region_name="us-east-1",
                        aws_access_key_id="testing", aws_secret_access_key="testing")


def bucket_objects(s3, prefix):
    """Every object under `prefix` in the test bucket: {key: bytes}."""
    client = s3_client(s3)
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
    keys = [o["Key"] for p in pages for o in p.get("Contents", [])]
    return {k: client.get_object(Bucket=BUCKET, Key=k)["Body"].read() for k in keys}


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

