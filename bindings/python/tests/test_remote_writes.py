"""`Dataset.write` straight into an object store: the modes of a local write (create,
append, overwrite), a failed write that leaves nothing, and appenders side by side in
several processes, each landing its rows whole and once. Against a real S3 server (moto)
on 127.0.0.1."""

import json
import subprocess
import sys

import numpy as np
import pytest

import zrecord
from zrecord import DataLoader, Dataset

from _support import BUCKET, bucket_objects


def rows(start, n):
    return {"label": np.arange(start, start + n, dtype=np.int64),
            "caption": [f"row {i}" for i in range(start, start + n)],
            "quality": (np.arange(start, start + n) % 7).astype(np.float32)}


def test_a_write_to_a_url_creates_appends_and_overwrites(s3):
    url = f"s3://{BUCKET}/writes/modes"
    ds = Dataset.write(url, rows(0, 100), storage_options=s3)
    assert len(ds) == 100 and ds[99]["caption"] == "row 99"
    before = dict(bucket_objects(s3, "writes/modes/"))
    # The default refuses a dataset that is there, naming the modes, and uploads nothing.
    with pytest.raises(zrecord.ZrecordError, match='mode="append".*mode="overwrite"'):
        Dataset.write(url, rows(100, 50), storage_options=s3)
    assert bucket_objects(s3, "writes/modes/") == before

    # An append grows it; a state saved before resumes on the grown dataset.
    loader = DataLoader(ds, batch_size=10, seed=4)
    for _ in range(3):
        next(loader)
    state = loader.state_dict()
    loader.close()
    grown = Dataset.write(url, rows(100, 50), storage_options=s3, mode="append")
    assert len(grown) == 150
    np.testing.assert_array_equal(grown[np.arange(150)]["label"], np.arange(150))
    assert grown[120]["caption"] == "row 120"
    DataLoader(grown, batch_size=10, seed=4, state=state).close()

    # An overwrite replaces it whole, of other fields; the old objects go.
    new = Dataset.write(url, {"score": np.linspace(0, 1, 30, dtype=np.float32)}, storage_options=s3,
                        mode="overwrite")
    assert len(new) == 30 and [f.name for f in new.fields] == ["score"]
    now = bucket_objects(s3, "writes/modes/")
    assert not set(before) - {"writes/modes/remote.json"} & set(now), "an old object was left"
    assert zrecord.verify(url, storage_options=s3).ok
    # Its identity is new: a state of the old dataset is refused.
    with pytest.raises(ValueError):
        DataLoader(new, batch_size=10, seed=4, state=state)


def test_a_write_to_a_url_that_fails_leaves_nothing_and_bad_calls_say_why(s3):
    url = f"s3://{BUCKET}/writes/failed"
    Dataset.write(url, rows(0, 20), storage_options=s3)
    before = dict(bucket_objects(s3, "writes/failed/"))
    # Fields that differ from the dataset's: refused at the commit; the uploads are deleted.
    with pytest.raises(ValueError, match="differ"):
        Dataset.write(url, {"label": np.arange(5, dtype=np.int64)}, storage_options=s3, mode="append")
    assert bucket_objects(s3, "writes/failed/") == before
    with pytest.raises(TypeError, match="write it locally and zrecord.push"):
        Dataset.write(url, np.arange(10), storage_options=s3)
    with pytest.raises(TypeError, match="metadata"):
        Dataset.write(url, rows(0, 5), storage_options=s3, metadata={"a": 1}, mode="append")
    with pytest.raises(ValueError, match="storage_options apply to a URL"):
        Dataset.write("/tmp/not-a-url", rows(0, 5), storage_options=s3)
    assert len(Dataset(url, storage_options=s3)) == 20


APPENDER = """
import json, sys, numpy as np, zrecord
url, options, k = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
for j in range(2):
    start = 1000 * k + 100 * j
    zrecord.Dataset.write(url, {"label": np.arange(start, start + 40, dtype=np.int64),
                                "caption": [f"w{k}.{j}"] * 40}, storage_options=options, mode="append")
"""


def test_appenders_side_by_side_to_a_url_each_land_their_rows_once(s3, tmp_path):
    url = f"s3://{BUCKET}/writes/side-by-side"
    script = tmp_path / "append.py"
    script.write_text(APPENDER)
    procs = [subprocess.Popen([sys.executable, str(script), url, json.dumps(s3), str(k)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for k in range(3)]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    ds = Dataset(url, storage_options=s3)
    assert len(ds) == 240
    got = ds[np.arange(240)]
    labels = got["label"]
    assert sorted(labels.tolist()) == sorted(1000 * k + 100 * j + i for k in range(3) for j in range(2)
                                             for i in range(40))
    # Each write's rows stay together and in order.
    for start in range(0, 240, 40):
        np.testing.assert_array_equal(np.diff(labels[start:start + 40]), np.ones(39))
    assert zrecord.verify(url, storage_options=s3).ok
