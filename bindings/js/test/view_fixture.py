"""Data for test/view.test.js: two datasets and an S3-compatible server holding one of them.

`python view_fixture.py WORK` writes into WORK
  - `small`: 240 samples of an image (a 32 x 32 PNG square in the colour of its label),
    a caption, tokens, a label (`i % 3`, so the label histogram is 80 / 80 / 80) and
    `encoded`, a text's ids from a byte-level BPE trained here (`tokenizer.json`), and
    `pixels`, a 16 x 24 x 3 uint8 array of the next label's colour, with a dataset card;
  - `big`: 10^6 samples of a caption, tokens and a label;
then starts moto's S3 server on 127.0.0.1 (a free port), makes a bucket whose objects anyone may
read and whose CORS rules allow ranged GETs and HEADs from any origin, pushes `small` to it with zrecord, prints one
line, `view-fixture: ` and JSON (the paths, the dataset's URL on the server, the datasets' sizes) and serves
until its stdin closes.
"""

import io
import json
import sys
from pathlib import Path

import boto3
import numpy as np
from moto.server import ThreadedMotoServer
from PIL import Image

import zrecord

COLOURS = [(220, 30, 30), (30, 180, 30), (30, 30, 220)]


def caption(i: int) -> str:
    return f"sample {i}: a {['red', 'green', 'blue'][i % 3]} square"


def text(i: int) -> str:
    return f"{caption(i)} — naïve café №{i}"


def tokenizer(path: Path):
    """A byte-level BPE (as GPT-2's and Llama 3's) trained on the texts, saved as JSON."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, show_progress=False, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([text(i) for i in range(240)], trainer=trainer)
    tok.save(str(path))
    return tok


def small(path: Path, tok) -> None:
    images, photos, tokens = [], [], []
    for i in range(240):
        out = io.BytesIO()
        Image.new("RGB", (32, 32), COLOURS[i % 3]).save(out, format="PNG")
        images.append(out.getvalue())
        out = io.BytesIO()
        Image.new("RGB", (24, 24), COLOURS[i % 3]).save(out, format="JPEG", quality=95)
        photos.append(out.getvalue())
        tokens.append(np.arange(i % 9 + 1, dtype=np.uint16) + i)
    zrecord.Dataset.write(path, {
        "image": zrecord.vision.Images(images),
        "caption": [caption(i) for i in range(240)],
        "tokens": tokens,
        "label": np.arange(240, dtype=np.int64) % 3,
        "encoded": [np.asarray(tok.encode(text(i)).ids, dtype=np.uint16) for i in range(240)],
        # Pixels as a uint8 (H, W, 3) array: the label's colour again, upside down.
        "pixels": np.stack([np.full((16, 24, 3), COLOURS[(i + 1) % 3], np.uint8) for i in range(240)]),
        # JPEGs written as a plain list of bytes: a bytes field, shown as pictures all the same.
        "photo": photos,
    }, metadata={"description": "the viewer test's small dataset", "classes": ["red", "green", "blue"]})


def big(path: Path, n: int = 10**6) -> None:
    # Raw records: a write of 3 x 10^6 records takes 3 s instead of 11 with DEFLATE (the
    # small dataset's flate records test the page's decoding).
    offsets = np.concatenate([[0], np.cumsum(np.arange(n) % 7 + 1)])
    zrecord.Dataset.write(path, {
        "caption": [caption(i) for i in range(n)],
        "tokens": (np.arange(int(offsets[-1]), dtype=np.uint32) % 50_000, offsets),
        "label": np.arange(n, dtype=np.int64) % 7,
    }, codec="raw")


def size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def main() -> None:
    work = Path(sys.argv[1])
    small(work / "small", tokenizer(work / "tokenizer.json"))
    big(work / "big")

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    options = {"aws_endpoint": endpoint, "aws_access_key_id": "testing", "aws_secret_access_key": "testing",
               "aws_region": "us-east-1", "aws_allow_http": "true"}
    s3 = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="testing", aws_secret_access_key="testing",
                      region_name="us-east-1")
    s3.create_bucket(Bucket="view")
    s3.put_bucket_cors(Bucket="view", CORSConfiguration={"CORSRules": [{
        "AllowedOrigins": ["*"], "AllowedMethods": ["GET", "HEAD"], "AllowedHeaders": ["*"],
        "ExposeHeaders": ["Content-Length", "Content-Range", "ETag"]}]})
    zrecord.push(work / "small", "s3://view/data/small", storage_options=options)
    # Public reads, as the page sends no credentials: each object public-read (moto applies
    # object ACLs to anonymous requests; it does not evaluate bucket policies).
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket="view", Prefix="data/small/"):
        for obj in page.get("Contents", []):
            s3.put_object_acl(Bucket="view", Key=obj["Key"], ACL="public-read")

    print("view-fixture:", json.dumps({"small": str(work / "small"), "tokenizer": str(work / "tokenizer.json"), "big": str(work / "big"), "url": f"{endpoint}/view/data/small/",
                      "small_bytes": size(work / "small"), "big_bytes": size(work / "big")}), flush=True)
    sys.stdin.read()
    server.stop()


if __name__ == "__main__":
    main()
