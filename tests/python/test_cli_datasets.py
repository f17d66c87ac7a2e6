"""`zr` on datasets of named fields: deletes and compaction of the whole dataset, store
changes that would break one refused, and a verify that checks the stores against the
manifest and lists what interrupted writes left."""

import json
import shutil
import subprocess

import numpy as np
import pytest

import zrecord
from zrecord import Dataset

from test_cli import run


def curated(path, n=2000, shard_records=None):
    rng = np.random.default_rng(1)
    fields = {
        "label": np.arange(n, dtype=np.int64),
        "caption": [f"a photo of thing {i}" for i in range(n)],
        "quality": rng.random(n).astype(np.float32),
    }
    kw = {} if shard_records is None else {"shard_records": shard_records}
    Dataset.write(path, fields, **kw).close()
    return fields


def test_zr_delete_of_a_field_store_is_refused_naming_the_dataset_command(zr, tmp_path):
    t1 = tmp_path / "t1"
    curated(t1)
    p = run(zr, "delete", t1 / "shard-000000" / "caption", 5, ok=False)
    assert p.returncode == 2
    assert "zr delete" in p.stderr and str(t1) in p.stderr and "every field" in p.stderr, p.stderr
    assert len(Dataset(t1)) == 2000, "nothing changed"
    p = run(zr, "compact", t1 / "shard-000000" / "caption", ok=False)
    assert p.returncode == 2 and "zr compact" in p.stderr, p.stderr
    # The same from inside the dataset, by a relative path.
    p = subprocess.run([zr, "delete", "shard-000000/caption", "5"], cwd=t1, capture_output=True, text=True)
    assert p.returncode == 2 and "zr delete" in p.stderr, p.stderr
    # --force does what it is told, and verify then says the dataset is broken.
    run(zr, "delete", t1 / "shard-000000" / "caption", 5, "--force")
    p = run(zr, "verify", t1, ok=False)
    assert p.returncode == 1, p.stdout
    assert "broken: shard-000000/caption holds 1999 records but dataset.json lists 2000" in p.stdout, p.stdout


def test_zr_delete_of_a_dataset_deletes_every_field_of_those_samples(zr, tmp_path):
    t1 = tmp_path / "t1"
    fields = curated(t1, shard_records=700)
    (tmp_path / "gone.txt").write_text("# takedown list\n5\n6, 1500\n\n699 700\n")
    p = run(zr, "delete", t1, 3, 5, "--from-file", tmp_path / "gone.txt")
    assert "deleted 6 samples" in p.stdout and "1994 remain" in p.stdout, p.stdout
    keep = np.setdiff1d(np.arange(2000), [3, 5, 6, 699, 700, 1500])
    ds = Dataset(t1)
    got = ds[np.arange(len(ds))]
    np.testing.assert_array_equal(got["label"], keep)
    np.testing.assert_array_equal(got["quality"], fields["quality"][keep])
    assert [ds[i]["caption"] for i in (0, 3, 1000)] == [fields["caption"][keep[i]] for i in (0, 3, 1000)]
    assert run(zr, "verify", t1).returncode == 0
    p = run(zr, "delete", t1, 1994, ok=False)
    assert p.returncode == 2 and "out of range" in p.stderr
    (tmp_path / "bad.txt").write_text("1\nx7\n")
    p = run(zr, "delete", t1, "--from-file", tmp_path / "bad.txt", ok=False)
    assert p.returncode == 2 and "line 2" in p.stderr and "x7" in p.stderr, p.stderr


def test_a_shard_store_swapped_for_one_of_another_length_fails_verify_naming_it(zr, tmp_path):
    t1 = tmp_path / "t1"
    curated(t1, shard_records=500)
    other = tmp_path / "other"
    curated(other, n=400, shard_records=500)
    shutil.rmtree(t1 / "shard-000002" / "quality")
    shutil.copytree(other / "shard-000000" / "quality", t1 / "shard-000002" / "quality")
    p = run(zr, "verify", t1, ok=False)
    assert p.returncode == 1
    assert "broken: shard-000002/quality holds 400 records but dataset.json lists 500" in p.stdout, p.stdout
    assert "cannot be read as it is" in p.stdout
    report = json.loads(run(zr, "verify", t1, "--json", ok=False).stdout)
    assert report["manifest_problems"][0]["shard"] == "shard-000002"
    assert report["manifest_problems"][0]["field"] == "quality"
    # A store gone altogether.
    shutil.rmtree(t1 / "shard-000001" / "label")
    p = run(zr, "verify", t1, ok=False)
    assert "broken: shard-000001/label is missing" in p.stdout, p.stdout


def test_leftovers_of_interrupted_writes_are_listed_and_clean_removes_them(zr, tmp_path):
    t1 = tmp_path / "t1"
    curated(t1, shard_records=1000)
    # What a killed delete or append leaves: a shard folder no manifest lists, and a field
    # folder in a listed shard that names no field.
    shutil.copytree(t1 / "shard-000000", t1 / "shard-000009")
    shutil.copytree(t1 / "shard-000001" / "label", t1 / "shard-000001" / "score")
    for command in ("verify", "inspect"):
        p = run(zr, command, t1)
        assert f"leftover: {t1 / 'shard-000001' / 'score'} (" in p.stdout, p.stdout
        assert f"leftover: {t1 / 'shard-000009'} (" in p.stdout, p.stdout
        assert "2 leftovers of interrupted writes" in p.stdout and "zr clean" in p.stdout
    p = run(zr, "clean", t1)
    assert "removed 2 leftovers" in p.stdout, p.stdout
    assert not (t1 / "shard-000009").exists() and not (t1 / "shard-000001" / "score").exists()
    assert "leftover" not in run(zr, "verify", t1).stdout
    assert len(Dataset(t1)) == 2000
    p = run(zr, "clean", tmp_path / "nowhere", ok=False)
    assert p.returncode == 2


def test_zr_compact_merges_an_appended_datasets_shards_exactly(zr, tmp_path):
    t1 = tmp_path / "t1"
    curated(t1, n=50)
    for k in range(1, 20):
        more = {"label": np.arange(50, dtype=np.int64) + 50 * k, "caption": [f"c{k}"] * 50,
                "quality": np.full(50, k, np.float32)}
        Dataset.write(t1, more, mode="append").close()
    before = Dataset(t1)
    assert before.shards == 20
    want = before[np.arange(1000)]
    before.close()
    p = run(zr, "compact", t1, "--target-rows", 300)
    assert "20 shards -> 4" in p.stdout, p.stdout
    after = Dataset(t1)
    assert after.shards == 4
    got = after[np.arange(1000)]
    for name in ("label", "quality"):
        np.testing.assert_array_equal(got[name], want[name])
    assert zrecord.verify(t1).ok
    p = run(zr, "compact", t1, "--target-rows", 0, ok=False)
    assert p.returncode == 2 and "--target-rows" in p.stderr


@pytest.mark.parametrize("args", [["delete", "{t1}"], ["compact", "{t1}/shard-000000/label", "--target-rows", "9"]])
def test_dataset_verbs_say_what_they_need(zr, tmp_path, args):
    t1 = tmp_path / "t1"
    curated(t1, n=10)
    p = run(zr, *[a.format(t1=t1) for a in args], ok=False)
    assert p.returncode == 2, p.stdout
