"""Upkeep of a dataset in an object store, as of a local one: `zr compact URL` merges the
small shards appends leave (values, order and saved states kept), `zr inspect|verify URL`
list the objects interrupted changes left and `zr clean URL` removes the old ones, and
`zr copy URL URL` copies one state of a dataset between prefixes. Against a real S3 server
(moto) on 127.0.0.1."""

import os
import subprocess
from pathlib import Path

import numpy as np

import zrecord
from zrecord import DataLoader, Dataset

from _support import BUCKET, bucket_objects, s3_client

ZR = os.environ.get("ZR") or str(Path(__file__).resolve().parents[3] / "target" / "release" / "zr")


def zr_with(s3):
    env = {**os.environ, "AWS_ENDPOINT": s3["aws_endpoint"], "AWS_ALLOW_HTTP": "true",
           "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1"}

    def run(*args, ok=True):
        p = subprocess.run([ZR, *map(str, args)], capture_output=True, text=True, timeout=300, env=env)
        if ok:
            assert p.returncode == 0, p.stderr + p.stdout
        return p

    return run


def appended(path, shards, rows=40):
    """A dataset of named fields grown by `shards - 1` appends: one shard each."""
    for k in range(shards):
        part = {"label": np.arange(rows, dtype=np.int64) + rows * k,
                "caption": [f"row {rows * k + i}" for i in range(rows)],
                "quality": np.linspace(k, k + 1, rows, dtype=np.float32)}
        Dataset.write(path, part, mode="create" if k == 0 else "append").close()


def state_at(ds, step, seed=3, batch=16):
    loader = DataLoader(ds, batch_size=batch, seed=seed)
    for _ in range(step):
        next(loader)
    state = loader.state_dict()
    rest = [next(loader)["label"] for _ in range(12)]
    loader.close()
    return state, rest


def test_zr_compact_by_url_merges_shards_exactly_and_a_state_resumes_across_it(s3, tmp_path):
    run = zr_with(s3)
    appended(tmp_path / "ds", 12)
    url = f"s3://{BUCKET}/upkeep/compact"
    zrecord.push(tmp_path / "ds", url, storage_options=s3)
    before = Dataset(url, storage_options=s3)
    assert before.shards == 12
    want = before[np.arange(len(before))]
    state, rest = state_at(before, 9)
    before.close()
    objects_before = set(bucket_objects(s3, "upkeep/compact/"))

    p = run("compact", url, "--target-rows", 200)
    assert "12 shards -> 3" in p.stdout, p.stdout
    after = Dataset(url, storage_options=s3)
    assert after.shards == 3 and len(after) == 480
    got = after[np.arange(480)]
    for name in ("label", "quality"):
        np.testing.assert_array_equal(got[name], want[name])
    assert [after[i]["caption"] for i in (0, 199, 479)] == ["row 0", "row 199", "row 479"]
    resumed = DataLoader(after, batch_size=16, seed=3, state=state)
    for k, labels in enumerate(rest):
        np.testing.assert_array_equal(next(resumed)["label"], labels, err_msg=f"batch {k} after the resume")
    resumed.close()
    assert zrecord.verify(url, storage_options=s3).ok
    # The old shards' objects are gone: nothing of them is paid for, nothing is left over.
    now = set(bucket_objects(s3, "upkeep/compact/"))
    assert not {o for o in objects_before if "/shard-000001/" in o} & now
    assert "leftover" not in run("verify", url).stdout
    # Nothing more to merge at that size; a bad size is refused naming the flag.
    assert "3 shards -> 3" in run("compact", url, "--target-rows", 200).stdout
    p = run("compact", url, "--target-rows", 0, ok=False)
    assert p.returncode == 2 and "--target-rows" in p.stderr, p.stderr


def test_objects_of_interrupted_changes_in_a_bucket_are_listed_and_young_ones_kept(s3, tmp_path):
    run = zr_with(s3)
    appended(tmp_path / "ds", 2)
    url = f"s3://{BUCKET}/upkeep/leftovers"
    zrecord.push(tmp_path / "ds", url, storage_options=s3)
    # What an append killed after its uploads leaves: a shard no listing names.
    client = s3_client(s3)
    stray = "upkeep/leftovers/shard-000007-0123456789abcdef/label/meta.zr"
    client.put_object(Bucket=BUCKET, Key=stray, Body=b"x" * 100)
    for command in ("verify", "inspect"):
        p = run(command, url)
        assert f"leftover: {url}/shard-000007-0123456789abcdef/label/meta.zr (100 bytes)" in p.stdout, p.stdout
        assert "1 leftovers of interrupted writes (100 bytes)" in p.stdout, p.stdout
        assert f"zr clean {url}" in p.stdout
    # A second ago it may be a change in flight: clean keeps it and says so.
    p = run("clean", url)
    assert "removed 0 leftovers" in p.stdout and "kept 1 unlisted objects" in p.stdout, p.stdout
    assert stray in bucket_objects(s3, "upkeep/leftovers/")
    assert len(Dataset(url, storage_options=s3)) == 80
    # Told that nothing is in flight, it removes it, and only it.
    listed = set(bucket_objects(s3, "upkeep/leftovers/")) - {stray}
    p = run("clean", url, "--older-than", 0)
    assert "removed 1 leftovers of interrupted writes (100 bytes)" in p.stdout, p.stdout
    assert set(bucket_objects(s3, "upkeep/leftovers/")) == listed
    assert "leftover" not in run("verify", url).stdout
    assert len(Dataset(url, storage_options=s3)) == 80
    p = run("clean", url, "--older-than", "soon", ok=False)
    assert p.returncode == 2 and "--older-than takes a number of seconds" in p.stderr, p.stderr


def test_zr_copy_from_one_prefix_to_another_copies_the_dataset(s3, tmp_path):
    run = zr_with(s3)
    appended(tmp_path / "ds", 3)
    src = f"s3://{BUCKET}/upkeep/copy-from"
    dst = f"s3://{BUCKET}/upkeep/copy-to"
    zrecord.push(tmp_path / "ds", src, storage_options=s3)
    p = run("copy", src, dst)
    assert f"copied {src} to {dst}" in p.stdout, p.stdout
    a, b = Dataset(src, storage_options=s3), Dataset(dst, storage_options=s3)
    np.testing.assert_array_equal(a[np.arange(120)]["quality"], b[np.arange(120)]["quality"])
    assert b[119]["caption"] == "row 119"
    # A copy keeps the identity: a state saved on the source resumes on the copy.
    state, rest = state_at(a, 4)
    resumed = DataLoader(b, batch_size=16, seed=3, state=state)
    np.testing.assert_array_equal(next(resumed)["label"], rest[0])
    resumed.close()
    p = run("copy", src, dst, ok=False)
    assert p.returncode == 2 and "a copy writes a new location" in p.stderr, p.stderr


def test_zr_inspects_and_verifies_a_dataset_a_change_in_the_bucket_rewrote(s3, tmp_path):
    """After a change in a bucket the manifest lives in remote.json (listing version 2),
    not in a dataset.json object: zr read the latter only, and took the dataset for a
    single store that was not there ("meta.zr is missing")."""
    run = zr_with(s3)
    appended(tmp_path / "ds", 2)
    url = f"s3://{BUCKET}/upkeep/changed"
    zrecord.push(tmp_path / "ds", url, storage_options=s3)
    run("delete", url, 0, 41)
    p = run("verify", url)
    assert "78" in p.stdout and "0 bad" in p.stdout, p.stdout
    p = run("inspect", url)
    assert "caption" in p.stdout and "78" in p.stdout, p.stdout
