"""Per-field codecs and the dataset card: `Dataset.write(path, fields, codec={...},
metadata={...})`, kept in dataset.json, read back as `Dataset.metadata`, shown by `zr
inspect`, and carried by push to an S3-compatible server (moto's, on 127.0.0.1)."""

import json
import os
import subprocess

import numpy as np
import pytest

import zrecord
from zrecord import Dataset

from _support import BUCKET

ZR = os.environ.get("ZR")

CARD = {
    "description": "64px crops with captions' token ids",
    "license": "CC-BY-4.0",
    "source": ["https://example.org/crops", "internal:run-17"],
    "tokenizer": "gpt2",
    "classes": ["cat", "dog", "bird"],
    "version": 3,
}


def fields(n, seed=0):
    rng = np.random.default_rng(seed)
    return {
        "image": rng.integers(0, 255, (n, 3, 8, 8), dtype=np.uint8),
        "label": rng.integers(0, 3, n).astype(np.int64),
        "tokens": [np.arange(int(k), dtype=np.uint16) for k in rng.integers(1, 200, n)],
    }


def manifest(path):
    return json.loads((path / "dataset.json").read_text())


def test_each_field_gets_its_codec(tmp_path):
    data = fields(300)
    # The report asked for exactly this, and got a TypeError.
    ds = Dataset.write(tmp_path / "ds", data, codec={"image": "raw", "tokens": "zstd"}, shard_records=100)
    assert [(f["name"], f["codec"]) for f in manifest(tmp_path / "ds")["fields"]] == [
        ("image", "raw"), ("label", "flate"), ("tokens", "zstd")]
    image = zrecord.inspect(tmp_path / "ds" / "shard-000001" / "image")
    assert image.raw_records == 100 and image.flate_records == 0
    tokens = zrecord.inspect(tmp_path / "ds" / "shard-000001" / "tokens")
    assert tokens.zstd_records > 50, tokens
    for i in (0, 150, 299):
        np.testing.assert_array_equal(ds[i]["tokens"], data["tokens"][i])
        np.testing.assert_array_equal(ds[i]["image"], data["image"][i])
    ds.close()
    with pytest.raises(ValueError, match="caption"):
        Dataset.write(tmp_path / "other", data, codec={"caption": "raw"})
    with pytest.raises(ValueError, match="'lz4' for field 'image'"):
        Dataset.write(tmp_path / "other", data, codec={"image": "lz4"})
    with pytest.raises(TypeError, match="one codec name"):
        Dataset.write(tmp_path / "single", data["image"], codec={"data": "raw"})
    assert not (tmp_path / "other").exists() and not (tmp_path / "single").exists()


def test_the_card_is_kept_shown_and_replaced(tmp_path):
    path = tmp_path / "ds"
    data = fields(200)
    Dataset.write(path, data, shard_records=100).close()
    m = manifest(path)
    assert m["version"] == 1 and "metadata" not in m  # without a card: readable by earlier builds
    assert Dataset(path).metadata == {}

    Dataset.write(path, fields(50, seed=1), metadata=CARD, mode="append").close()
    m = manifest(path)
    # The append also records the identity the dataset grew from (version 4).
    assert m["version"] == 4 and m["metadata"] == CARD and len(m["grown_from"]) == 1
    Dataset.write(tmp_path / "fresh", fields(50, seed=1), metadata=CARD).close()
    assert manifest(tmp_path / "fresh")["version"] == 2  # a card alone: builds that know version 2 read it
    ds = Dataset(path)
    assert ds.metadata == CARD and len(ds) == 250
    ds.close()
    # A write without metadata keeps the card; one with it replaces it.
    Dataset.write(path, fields(10, seed=2), mode="append").close()
    assert Dataset(path).metadata == CARD
    Dataset.write(path, fields(10, seed=3), metadata={"license": "MIT"}, mode="append").close()
    assert Dataset(path).metadata == {"license": "MIT"}
    if ZR:
        out = subprocess.run([ZR, "inspect", str(path)], capture_output=True, text=True, check=True).stdout
        assert 'metadata      {"license":"MIT"}' in out, out
        report = json.loads(subprocess.run([ZR, "inspect", str(path), "--json"], capture_output=True, text=True,
                                           check=True).stdout)
        assert report["dataset"]["metadata"] == {"license": "MIT"}


def test_bad_cards_are_refused_before_anything_is_written(tmp_path):
    data = fields(20)
    with pytest.raises(TypeError, match="not JSON"):
        Dataset.write(tmp_path / "a", data, metadata={"when": object()})
    with pytest.raises(TypeError, match="dict"):
        Dataset.write(tmp_path / "a", data, metadata=["not", "a", "dict"])
    with pytest.raises(ValueError, match="limit"):
        Dataset.write(tmp_path / "a", data, metadata={"blob": "x" * (1 << 20)})
    with pytest.raises(TypeError, match="named fields"):
        Dataset.write(tmp_path / "b", data["image"], metadata=CARD)
    assert not (tmp_path / "b").exists()
    assert not (tmp_path / "a" / "dataset.json").exists()


def test_a_pushed_dataset_keeps_its_card(tmp_path, s3):
    path = tmp_path / "ds"
    Dataset.write(path, fields(120), metadata=CARD, shard_records=50).close()
    url = f"s3://{BUCKET}/cards/ds"
    zrecord.push(path, url, storage_options=s3)
    far = Dataset(url, storage_options=s3)
    assert far.metadata == CARD and len(far) == 120
    far.close()
