"""Files safe to copy: a dataset of named fields is written dense, copies with cp, rsync,
tar and shutil.copytree write only its bytes, and zrecord.set_layout / zr layout make
stores sparse (what loaderx 0.5.4 reads) and dense again, atomically, killed or not.

Every copy below runs only after the test has checked that the files are dense: a copy of
a sparse dataset writes its holes (gigabytes per store) and can fill the disk."""

import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import textwrap
from pathlib import Path

import numpy as np
import pytest

import zrecord
from zrecord import Dataset

ZR = os.environ.get("ZR")
MIB = 1 << 20
FIELDS = ("image", "label", "tokens", "embedding")


def make(n, seed=0):
    rng = np.random.default_rng(seed)
    # Image-like: a smooth ramp plus noise, so DEFLATE keeps some records and not others.
    ramp = np.arange(64, dtype=np.uint8)[None, None, :]
    images = (ramp + rng.integers(0, 64, (n, 3, 64, 64))).astype(np.uint8)
    labels = rng.integers(0, 1000, n).astype(np.int64)
    docs = [rng.integers(0, 50000, int(rng.integers(1, 400)), dtype=np.uint16) for _ in range(n)]
    embeddings = rng.standard_normal((n, 64)).astype(np.float32)
    return {"image": images, "label": labels, "tokens": docs, "embedding": embeddings}


def store_dirs(path):
    return sorted(p.parent for p in Path(path).glob("shard-*/*/meta.zr"))


def sizes(path):
    """(apparent bytes: what stat says and a copy writes, allocated bytes) of every file."""
    apparent = allocated = 0
    for root, _, files in os.walk(path):
        for f in files:
            st = os.stat(os.path.join(root, f))
            apparent += st.st_size
            allocated += st.st_blocks * 512
    return apparent, allocated


def stored_bytes(path):
    return sum(zrecord.inspect(d).live_bytes for d in store_dirs(path))


def budget(path):
    """What a copy may write: 1.1x the records' stored bytes plus 1 MiB per store."""
    return int(1.1 * stored_bytes(path)) + MIB * len(store_dirs(path))


def same_samples(a, b, idx):
    x, y = Dataset(a), Dataset(b)
    try:
        assert len(x) == len(y)
        for i in idx:
            sx, sy = x[int(i)], y[int(i)]
            for f in FIELDS:
                np.testing.assert_array_equal(sx[f], sy[f])
    finally:
        x.close()
        y.close()


@pytest.fixture(scope="module")
def dense_dataset(tmp_path_factory):
    """4 fields x 4 shards, about 50 MB of records."""
    path = tmp_path_factory.mktemp("layout") / "ds"
    data = make(4000)
    Dataset.write(path, data, shard_records=1000).close()
    return path, data


def test_a_dataset_of_fields_is_written_dense(dense_dataset):
    path, _ = dense_dataset
    stores = store_dirs(path)
    assert len(stores) == 16
    assert {zrecord.inspect(d).layout for d in stores} == {"dense"}
    apparent, allocated = sizes(path)
    stored = stored_bytes(path)
    assert stored > 30 * MIB, stored
    # Before: 16 x (4 GiB + 256 MiB + 512 MiB) = 76 GiB of apparent size for these records.
    assert apparent <= budget(path), (apparent, stored)
    assert allocated <= budget(path) + 16 * 64 * 1024, (allocated, stored)


@pytest.mark.parametrize("tool", ["cp", "rsync", "tar", "copytree"])
def test_copies_write_only_the_data_and_verify(dense_dataset, tmp_path, tool):
    path, data = dense_dataset
    limit = budget(path)
    assert sizes(path)[0] <= limit, "not dense: refusing to copy (it could fill the disk)"
    dest = tmp_path / "copy"
    if tool == "cp":
        subprocess.run(["cp", "-r", str(path), str(dest)], check=True)
    elif tool == "rsync":
        subprocess.run(["rsync", "-a", f"{path}/", f"{dest}/"], check=True)
    elif tool == "tar":
        archive = tmp_path / "ds.tar"
        with tarfile.open(archive, "w") as t:
            t.add(path, arcname="copy")
        assert archive.stat().st_size <= limit + 16 * MIB, archive.stat().st_size
        with tarfile.open(archive) as t:
            t.extractall(tmp_path, filter="tar")
    else:
        shutil.copytree(path, dest)
    apparent, allocated = sizes(dest)
    assert apparent <= limit and allocated <= limit + 16 * 64 * 1024, (tool, apparent, allocated, limit)
    for d in store_dirs(dest):
        assert zrecord.verify(d).ok, d
    same_samples(path, dest, np.arange(0, 4000, 97))
    if ZR:
        out = subprocess.run([ZR, "verify", str(dest)], capture_output=True, text=True)
        assert out.returncode == 0, out.stdout + out.stderr


def test_loaderx_reads_a_dataset_after_zr_layout_sparse(tmp_path, loaderx):
    data = make(600, seed=3)
    path = tmp_path / "ds"
    Dataset.write(path, data, shard_records=250).close()
    image = path / "shard-000001" / "image"
    # loaderx checks the version and refuses a dense store, rather than misreading it.
    with pytest.raises(Exception, match="(?i)version|format"):
        loaderx.Dataset(str(image))
    assert zrecord.set_layout(path, "sparse") == (12, 12)
    assert zrecord.inspect(image).layout == "sparse"
    assert (image / "meta.zr").stat().st_size == 16 + 16 * (1 << 24)
    for shard, rows in (("shard-000000", slice(0, 250)), ("shard-000001", slice(250, 500))):
        for field in ("image", "label", "embedding"):
            got = loaderx.Dataset(str(path / shard / field))
            np.testing.assert_array_equal(got[np.arange(len(got))], data[field][rows])
    # Dense again: the same samples, in files of their size; a second call changes nothing.
    assert zrecord.set_layout(path, "dense", progress=lambda d, t: None) == (12, 12)
    assert zrecord.set_layout(path, "dense") == (12, 0)
    assert sizes(path)[0] <= budget(path)
    ds = Dataset(path)
    for i in (0, 249, 250, 599):
        s = ds[i]
        np.testing.assert_array_equal(s["image"], data["image"][i])
        np.testing.assert_array_equal(s["tokens"], data["tokens"][i])
    # An open reader holds its stores: no layout change under it.
    with pytest.raises(zrecord.LockedError):
        zrecord.set_layout(path, "sparse")
    ds.close()
    with pytest.raises(ValueError, match="dense"):
        zrecord.set_layout(path, "compact")


def test_loaderx_api_stores_stay_sparse_and_loaderx_appends(tmp_path, loaderx):
    images = make(300)["image"]
    zrecord.Dataset.write(tmp_path / "lx", images[:200]).close()
    assert zrecord.inspect(tmp_path / "lx").layout == "sparse"
    loaderx.Dataset.write(str(tmp_path / "lx"), images[200:])
    ds = zrecord.Dataset(tmp_path / "lx")
    np.testing.assert_array_equal(ds[np.arange(300)]["data"] if ds.is_multi_field else ds[np.arange(300)], images)
    ds.close()


def test_zr_layout_and_inspect_say_which(tmp_path):
    if not ZR:
        pytest.skip("ZR (the zr binary) is not set; make test sets it")
    path = tmp_path / "ds"
    Dataset.write(path, make(300), shard_records=100).close()

    def zr(*a):
        return subprocess.run([ZR, *map(str, a)], capture_output=True, text=True, check=True).stdout

    assert "dense" in zr("inspect", path / "shard-000000" / "image")
    said = zr("layout", path, "sparse")
    assert said == f"{path} now sparse: 12 of 12 stores changed\n"
    report = json.loads(zr("inspect", path, "--json"))
    assert [s["inspection"]["layout"] for s in report["stores"]] == ["sparse"] * 12
    assert "12 of 12 stores changed" in zr("layout", path, "dense")
    assert zr("layout", path / "shard-000001" / "label", "dense").endswith(
        "0 of 1 stores changed; 1 already were (their files sized again)\n")
    bad = subprocess.run([ZR, "layout", str(path), "thin"], capture_output=True, text=True)
    assert bad.returncode == 2 and "layout takes dense or sparse" in bad.stderr


KILLED = textwrap.dedent(
    """
    import sys, zrecord
    print("ready", flush=True)
    while True:
        zrecord.set_layout(sys.argv[1], "sparse")
        zrecord.set_layout(sys.argv[1], "dense")
    """
)


def test_a_layout_change_killed_anywhere_leaves_a_readable_dataset(tmp_path):
    """SIGKILL a process that flips the layout back and forth, at several moments: every
    store opens in one layout or the other with the same samples, and the next call
    finishes the change."""
    data = make(400, seed=5)
    path = tmp_path / "ds"
    Dataset.write(path, data, shard_records=100).close()
    rng = np.random.default_rng(0)
    for delay in rng.uniform(0.05, 0.6, 6):
        p = subprocess.Popen([sys.executable, "-c", KILLED, str(path)], stdout=subprocess.PIPE, text=True)
        assert p.stdout.readline().strip() == "ready"
        try:
            p.wait(timeout=delay)
        except subprocess.TimeoutExpired:
            p.send_signal(signal.SIGKILL)
            p.wait()
        assert p.returncode == -signal.SIGKILL, p.returncode
        ds = Dataset(path)
        for i in rng.integers(0, 400, 20):
            s = ds[int(i)]
            np.testing.assert_array_equal(s["image"], data["image"][i])
            np.testing.assert_array_equal(s["tokens"], data["tokens"][i])
        ds.close()
        zrecord.set_layout(path, "dense")
        assert {zrecord.inspect(d).layout for d in store_dirs(path)} == {"dense"}
        assert sizes(path)[0] <= budget(path)


def test_a_dataset_written_by_zrecord_0_2_opens_and_converts(tmp_path, loaderx):
    """tests/golden/zrecord-0.2-dataset: what the last release wrote (sparse stores, a
    version 1 manifest), kept as used bytes plus each file's size; expanded here with holes."""
    golden = Path(__file__).resolve().parents[3] / "tests" / "golden" / "zrecord-0.2-dataset"
    lengths = json.loads((golden / "sizes.json").read_text())["sizes"]
    path = tmp_path / "ds"
    for rel, size in lengths.items():
        (path / rel).parent.mkdir(parents=True, exist_ok=True)
        with open(path / rel, "wb") as f:
            f.write((golden / rel).read_bytes())
            f.truncate(size)
    # The samples it was written with (the same generator, in the same order).
    rng = np.random.default_rng(7)
    docs = [np.arange(int(k), dtype=np.uint16) + i for i, k in enumerate(rng.integers(1, 20, 60))]
    images = rng.integers(0, 255, (60, 2, 3), dtype=np.uint8)

    def check():
        ds = Dataset(path)
        assert len(ds) == 60 and ds.shards == 2 and ds.metadata == {}
        np.testing.assert_array_equal(ds[np.arange(60)]["image"], images)
        for i in (0, 39, 40, 59):
            np.testing.assert_array_equal(ds[i]["tokens"], docs[i])
        ds.close()

    check()
    assert {zrecord.inspect(d).layout for d in store_dirs(path)} == {"sparse"}
    got = loaderx.Dataset(str(path / "shard-000001" / "image"))
    np.testing.assert_array_equal(got[np.arange(len(got))], images[40:])
    assert zrecord.set_layout(path, "dense") == (4, 4)
    check()
    assert sizes(path)[0] < 1 << 20
