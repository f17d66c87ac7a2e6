"""Datasets of named fixed and ragged fields over shards: written from Python, read by
indexing, the DataLoader (every mode, resume, elastic resume), loaderx and `zr`, and by a
process that may not write them."""

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import numpy as np
import pytest

import zrecord
from zrecord import ChecksumError, DataLoader, Dataset, Mixture

ZR = os.environ.get("ZR")


def make(n, seed=0):
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 255, (n, 3, 4, 4), dtype=np.uint8)
    labels = np.arange(n, dtype=np.int64)
    docs = [rng.integers(0, 60000, int(rng.integers(1, 30)), dtype=np.uint16) for _ in range(n)]
    return images, labels, docs


def write3(path, n=2500, shard_records=1000, seed=0, **kw):
    images, labels, docs = make(n, seed)
    ds = Dataset.write(path, {"image": images, "label": labels, "tokens": docs}, shard_records=shard_records, **kw)
    return ds, images, labels, docs


def check_batch(batch, images, docs, key="label"):
    labels = batch[key]
    np.testing.assert_array_equal(batch["image"], images[labels])
    off = batch["tokens_offsets"]
    assert off[0] == 0 and off.size == labels.size + 1 and off.dtype == np.int64
    for k, i in enumerate(labels):
        np.testing.assert_array_equal(batch["tokens"][off[k] : off[k + 1]], docs[i])
    return labels


def test_three_fields_round_trip_by_indexing(tmp_path):
    ds, images, labels, docs = write3(tmp_path / "ds")
    assert len(ds) == 2500 and ds.shards == 3 and ds.is_multi_field
    assert [(f.name, f.kind, f.dtype, f.shape) for f in ds.fields] == [
        ("image", "fixed", np.dtype(np.uint8), (3, 4, 4)),
        ("label", "fixed", np.dtype(np.int64), ()),
        ("tokens", "ragged", np.dtype(np.uint16), ()),
    ]
    for i in (0, 999, 1000, 2499, -1):
        s = ds[i]
        np.testing.assert_array_equal(s["image"], images[i])
        assert s["label"] == labels[i]
        np.testing.assert_array_equal(s["tokens"], docs[i])
    idx = np.array([2400, 3, 1000, 999, 3])
    b = ds[idx]
    np.testing.assert_array_equal(b["image"], images[idx])
    np.testing.assert_array_equal(b["label"], idx)
    for t, i in zip(b["tokens"], idx):
        np.testing.assert_array_equal(t, docs[i])
    assert len(ds[10:20]["label"]) == 10
    mask = np.zeros(len(ds), bool)
    mask[[5, 1500]] = True
    np.testing.assert_array_equal(ds[mask]["label"], [5, 1500])
    np.testing.assert_array_equal(ds.__getitems__([7, 8])["label"], [7, 8])
    with pytest.raises(IndexError):
        ds[2500]
    # Reopened by path, it is the same dataset.
    again = Dataset(tmp_path / "ds")
    assert again.generation == ds.generation and len(again) == 2500


@pytest.mark.parametrize("mode", [0, 1, 2])
def test_the_loader_reads_every_field_in_every_mode(tmp_path, mode):
    ds, images, labels, docs = write3(tmp_path / "ds")
    with DataLoader(ds, batch_size=64, mode=mode, seed=5, num_workers=2) as loader:
        seen = []
        for _ in range(12):
            seen.append(check_batch(next(loader), images, docs))
    if mode == 0:
        np.testing.assert_array_equal(np.concatenate(seen), np.arange(12 * 64))


def test_padded_ragged_field(tmp_path):
    ds, images, labels, docs = write3(tmp_path / "ds", n=300, shard_records=128)
    with DataLoader(ds, batch_size=32, mode=2, seed=1, num_workers=1, pad={"tokens": 65535}) as loader:
        for _ in range(5):
            b = next(loader)
            tokens, lengths = b["tokens"], b["tokens_lengths"]
            assert tokens.shape == (32, lengths.max()) and tokens.dtype == np.uint16
            for row, n, i in zip(tokens, lengths, b["label"]):
                np.testing.assert_array_equal(row[:n], docs[i])
                assert (row[n:] == 65535).all()
    with pytest.raises(ValueError, match="not ragged"):
        DataLoader(ds, batch_size=4, pad={"label": 0})


def test_shards_of_1000_are_one_dataset_for_shuffle_and_resume(tmp_path):
    ds, images, labels, docs = write3(tmp_path / "ds", n=25_000, shard_records=1000, codec="raw")
    assert ds.shards == 25
    global_batch = 200
    with DataLoader(ds, batch_size=global_batch, mode=2, seed=11, num_workers=2) as loader:
        epoch = [check_batch(next(loader), images, docs) for _ in range(loader.steps_per_epoch)]
    flat = np.concatenate(epoch)
    assert flat.size == 25_000 and np.unique(flat).size == 25_000
    # Resume at step 37 on 4 ranks of 50, then at step 80 on 2 ranks of 100: the same batches.
    with DataLoader(ds, batch_size=global_batch, mode=2, seed=11, num_workers=1) as loader:
        for _ in range(37):
            next(loader)
        state = loader.state_dict()
    ranks = [DataLoader(ds, batch_size=50, mode=2, seed=11, rank=r, world_size=4, state=state) for r in range(4)]
    for step in range(37, 80):
        got = np.concatenate([next(r)["label"] for r in ranks])
        np.testing.assert_array_equal(got, epoch[step])
    state = ranks[0].state_dict()
    assert all(r.state_dict() == state for r in ranks)
    for r in ranks:
        r.close()
    json.dumps(state)  # small JSON
    ranks = [DataLoader(ds, batch_size=100, mode=2, seed=11, rank=r, world_size=2, state=state) for r in range(2)]
    for step in range(80, 125):
        got = np.concatenate([next(r)["label"] for r in ranks])
        np.testing.assert_array_equal(got, epoch[step])
    for r in ranks:
        r.close()


def test_a_damaged_shard_names_its_store(tmp_path):
    ds, images, labels, docs = write3(tmp_path / "ds", n=3000, shard_records=1000, codec="raw")
    ds.close()
    chunk = tmp_path / "ds" / "shard-000001" / "image" / "0.zr"
    used = Dataset(tmp_path / "ds").field_store("image", 1).stats()["chunk_bytes"]
    with open(chunk, "r+b") as f:
        f.seek(used // 2)
        b = f.read(1)
        f.seek(used // 2)
        f.write(bytes([b[0] ^ 0x5A]))
    ds = Dataset(tmp_path / "ds")
    with pytest.raises(ChecksumError) as e:
        ds[np.arange(1000, 2000)]
    assert "shard-000001/image" in str(e.value) and e.value.field == "image"
    assert e.value.path.endswith("shard-000001/image")
    ds[[0, 2999]]  # the other shards still read
    with DataLoader(ds, batch_size=1000, mode=0, num_workers=1) as loader:
        next(loader)
        with pytest.raises(ChecksumError, match="shard-000001/image"):
            next(loader)
    if ZR:
        out = subprocess.run([ZR, "verify", str(tmp_path / "ds")], capture_output=True, text=True)
        assert out.returncode == 1, out
        assert "of shard-000001/image" in out.stdout and "1 bad" in out.stdout, out.stdout


def test_writes_check_fields_and_are_all_or_nothing(tmp_path):
    path = tmp_path / "ds"
    images, labels, docs = make(100)
    with pytest.raises(ValueError, match=r"tokens.*sample 3 is empty"):
        Dataset.write(path, {"label": labels, "tokens": docs[:3] + [np.array([], np.uint16)] + docs[4:]})
    with pytest.raises(ValueError, match="different numbers of samples"):
        Dataset.write(path, {"label": labels[:50], "image": images})
    with pytest.raises(ValueError, match="not allowed"):
        Dataset.write(path, {"label_offsets": labels})
    Dataset.write(path, {"label": labels, "tokens": docs}, shard_records=40)
    assert sorted(p.name for p in path.iterdir() if p.name.startswith("shard-")) == [
        "shard-000000", "shard-000001", "shard-000002"]

    def interrupted():
        yield from docs[:70]
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        Dataset.write(path, {"label": np.arange(100), "tokens": interrupted()}, chunk_bytes=64, mode="append")
    ds = Dataset(path)
    assert len(ds) == 100 and ds.shards == 3
    assert sorted(p.name for p in path.iterdir() if p.name.startswith("shard-")) == [
        "shard-000000", "shard-000001", "shard-000002"]
    with pytest.raises(ValueError, match="cannot add samples"):
        Dataset.write(path, {"label": labels.astype(np.int32), "tokens": docs}, mode="append")
    # Appending the same fields adds shards; (values, offsets) pairs work as lists do.
    values = np.concatenate(docs)
    offsets = np.concatenate([[0], np.cumsum([d.size for d in docs])])
    ds = Dataset.write(path, {"label": labels + 100, "tokens": (values, offsets)}, shard_records=40, mode="append")
    assert len(ds) == 200
    np.testing.assert_array_equal(ds[150]["tokens"], docs[50])
    assert ds[150]["label"] == 150


def test_an_unbounded_iterator_is_written_in_bounded_memory(tmp_path):
    script = textwrap.dedent(
        f"""
        import resource, numpy as np, zrecord
        def docs():
            rng = np.random.default_rng(0)
            for _ in range(60_000):
                yield rng.integers(0, 60000, 2000, dtype=np.uint16)  # 4 KB each, 240 MB in all
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        ds = zrecord.Dataset.write({str(tmp_path / 'big')!r}, {{"tokens": docs()}}, codec="raw",
                                   chunk_bytes=8 << 20, shard_records=20_000)
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print(len(ds), ds.shards, (after - before) // 1024)
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    n, shards, grew_mib = map(int, out.stdout.split())
    assert (n, shards) == (60_000, 3)
    assert grew_mib < 120, f"peak memory grew by {grew_mib} MiB writing 240 MB"


def test_loaderx_reads_each_fixed_field_store_and_zrecord_reads_loaderx_stores(tmp_path, loaderx):
    # Written sparse, each fixed field store is a loaderx dataset (dense ones need
    # zrecord.set_layout first: test_layout.py).
    ds, images, labels, docs = write3(tmp_path / "ds", n=1500, shard_records=1000, layout="sparse")
    ds.close()
    for shard, rows in (("shard-000000", slice(0, 1000)), ("shard-000001", slice(1000, 1500))):
        got = loaderx.Dataset(str(tmp_path / "ds" / shard / "image"))
        np.testing.assert_array_equal(got[np.arange(len(got))], images[rows])
        got = loaderx.Dataset(str(tmp_path / "ds" / shard / "label"))
        np.testing.assert_array_equal(got[np.arange(len(got))], labels[rows])
    # A loaderx store is a one-field dataset: DataLoader(ds) without labels gives {"data"}.
    loaderx.Dataset.write(str(tmp_path / "lx"), images)
    single = Dataset(tmp_path / "lx")
    assert [f.name for f in single.fields] == ["data"] and not single.is_multi_field
    with DataLoader(single, batch_size=50, mode=0, num_workers=1) as loader:
        b = next(loader)
    assert list(b) == ["data"]
    np.testing.assert_array_equal(b["data"], images[:50])
    # Mixtures of datasets with the same fields.
    other, images2, _, docs2 = write3(tmp_path / "other", n=400, seed=3)
    mix = Mixture([Dataset(tmp_path / "ds"), other], weights=[3, 1], seed=2)
    with DataLoader(mix, batch_size=100, num_workers=1) as loader:
        b = next(loader)
    assert set(b) == {"image", "label", "tokens", "tokens_offsets", "source"}
    for k, (i, s) in enumerate(zip(b["label"], b["source"])):
        np.testing.assert_array_equal(b["image"][k], (images, images2)[s][i])


def test_zr_inspects_and_stats_a_dataset(tmp_path):
    if not ZR:
        pytest.skip("ZR (the zr binary) is not set; make test sets it")
    write3(tmp_path / "ds", n=1200, shard_records=500)
    out = subprocess.run([ZR, "inspect", str(tmp_path / "ds")], capture_output=True, text=True, check=True).stdout
    assert "samples       1200" in out and "shards        3" in out and "shard-000002/tokens" in out
    stats = json.loads(subprocess.run([ZR, "stats", str(tmp_path / "ds")], capture_output=True, text=True, check=True).stdout)
    assert (stats["samples"], stats["shards"], stats["records"]) == (1200, 3, 3600)
    # A compaction merges the three shards of 500 into one, samples exact.
    before = Dataset(tmp_path / "ds")[np.arange(1200)]["label"]
    merged = subprocess.run([ZR, "compact", str(tmp_path / "ds")], capture_output=True, text=True, check=True).stdout
    assert "3 shards -> 1" in merged, merged
    np.testing.assert_array_equal(Dataset(tmp_path / "ds")[np.arange(1200)]["label"], before)


def test_zr_exports_a_python_dataset_and_converts_numpy_files_back(tmp_path, loaderx):
    """Python -> zr export (a directory and an .npz) -> numpy; numpy.savez -> zr convert ->
    Python and loaderx: sample for sample."""
    if not ZR:
        pytest.skip("ZR (the zr binary) is not set; make test sets it")
    ds, images, labels, docs = write3(tmp_path / "ds", n=1200, shard_records=500)
    def zr(*a):
        return subprocess.run([ZR, *map(str, a)], capture_output=True, text=True, check=True).stdout

    assert zr("export", tmp_path / "ds", tmp_path / "out") == f"exported 1200 samples to {tmp_path / 'out'}\n"
    zr("export", tmp_path / "ds", tmp_path / "out.npz")
    lengths = np.array([d.size for d in docs])
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    for files in ({k: np.load(tmp_path / "out" / f"{k}.npy") for k in ("image", "label", "tokens", "tokens_offsets")},
                  np.load(tmp_path / "out.npz")):
        np.testing.assert_array_equal(files["image"], images)
        np.testing.assert_array_equal(files["label"], labels)
        np.testing.assert_array_equal(files["tokens"], np.concatenate(docs))
        assert files["tokens_offsets"].dtype == np.int64
        np.testing.assert_array_equal(files["tokens_offsets"], offsets)

    # What numpy writes (compressed, int32 offsets as Arrow's list type has) converts back.
    np.savez_compressed(tmp_path / "in.npz", image=images, label=labels, tokens=np.concatenate(docs),
                        tokens_offsets=offsets.astype(np.int32))
    said = zr("convert", tmp_path / "in.npz", tmp_path / "back", "--shard-records", "400")
    assert said == f"added 1200 samples of 3 fields to {tmp_path / 'back'}; it holds 1200 samples in 3 shard(s)\n"
    back = Dataset(tmp_path / "back")
    assert [(f.name, f.kind) for f in back.fields] == [("image", "fixed"), ("label", "fixed"), ("tokens", "ragged")]
    idx = np.array([1199, 0, 400, 399, 801])
    got = back[idx]
    np.testing.assert_array_equal(got["image"], images[idx])
    for i in idx:
        np.testing.assert_array_equal(back[int(i)]["tokens"], docs[i])
    # After `zr layout back sparse` (which needs the only open handle), each fixed field
    # store of each shard is a loaderx dataset.
    back.close()
    zr("layout", tmp_path / "back", "sparse")
    lx = loaderx.Dataset(str(tmp_path / "back" / "shard-000001" / "image"))
    np.testing.assert_array_equal(lx[np.arange(len(lx))], images[400:800])


# -- read-only: another user, a chmod -R a-w tree, a read-only mount -------------------------

READER = textwrap.dedent(
    """
    import sys, numpy as np, zrecord
    path, kind = sys.argv[1], sys.argv[2]
    ds = zrecord.Dataset(path)
    assert ds.read_only, "opened writable"
    with zrecord.DataLoader(ds, *( [] if kind == "fields" else [zrecord.Dataset(path)] ), batch_size=10, mode=2, num_workers=2) as ld:
        b = next(ld)
    assert len(next(iter(b.values()))) == 10
    try:
        zrecord.Dataset(path, read_only=True).delete([0]) if kind == "single" else None
    except (ValueError, zrecord.ZrecordError, TypeError):
        pass
    else:
        if kind == "single":
            raise SystemExit("a read-only handle deleted")
    print("read", len(ds))
    """
)


def _make_both(tmp_path):
    write3(tmp_path / "fields", n=300, shard_records=100)[0].close()
    images, _, _ = make(300)
    zrecord.Dataset.write(tmp_path / "single", images).close()
    return {"fields": tmp_path / "fields", "single": tmp_path / "single"}


def _public_dir():
    """A world-readable temporary directory, for another uid to read (pytest's tmp_path is
    under a directory only root may enter). Stores are written there directly: their
    files are sparse, and a plain copy would write every hole."""
    root = Path(tempfile.mkdtemp(prefix="zr-ro-"))
    os.chmod(root, 0o755)
    return root


def _run_as(prefix, path, kind):
    script = Path(tempfile.mkdtemp(prefix="zr-ro-script-")) / "reader.py"
    try:
        script.write_text(READER)
        os.chmod(script.parent, 0o755)
        os.chmod(script, 0o644)
        return subprocess.run([*prefix, sys.executable, str(script), str(path), kind], capture_output=True, text=True)
    finally:
        shutil.rmtree(script.parent)


@pytest.mark.parametrize("kind", ["fields", "single"])
def test_another_user_reads_a_read_only_tree(tmp_path, kind):
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv to read as another uid")
    root = _public_dir()
    dst = _make_both(root)[kind]
    try:
        for p in [dst, *dst.rglob("*")]:
            os.chmod(p, (os.stat(p).st_mode | stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH) & ~0o222 | (0o111 if p.is_dir() else 0))
        out = _run_as(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"], dst, kind)
        assert out.returncode == 0, out.stderr
        assert out.stdout.split() == ["read", "300"]
        if ZR:
            zr = _run_as_cmd(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", ZR, "verify", str(dst)])
            assert zr.returncode == 0, zr.stderr
    finally:
        for p in [root, *root.rglob("*")]:
            os.chmod(p, 0o755)
        shutil.rmtree(root)


def _run_as_cmd(cmd):
    return subprocess.run(cmd, capture_output=True, text=True)


@pytest.mark.parametrize("kind", ["fields", "single"])
def test_root_reads_from_a_read_only_mount(tmp_path, kind):
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("needs root and unshare for a private read-only bind mount")
    src = _make_both(tmp_path)[kind]
    script = Path(tmp_path / "reader.py")
    script.write_text(READER)
    shell = f"mount --bind {src} {src} && mount -o remount,bind,ro {src} && {sys.executable} {script} {src} {kind}"
    if ZR:
        shell += f" && {ZR} verify {src}"
    out = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", shell], capture_output=True, text=True)
    if "mount:" in out.stderr and "permission denied" in out.stderr.lower():
        pytest.skip(f"this sandbox refuses bind mounts: {out.stderr.strip()}")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[:2] == ["read", "300"]


def test_read_only_true_refuses_writes(tmp_path):
    images, _, _ = make(20)
    zrecord.Dataset.write(tmp_path / "single", images).close()
    ds = Dataset(tmp_path / "single", read_only=True)
    assert ds.read_only
    with pytest.raises((ValueError, zrecord.ZrecordError)):
        ds.delete([0])
    assert len(Dataset(tmp_path / "single")) == 20


@pytest.mark.parametrize("kind", ["one array", "named fields"])
def test_an_interrupted_write_into_a_new_path_leaves_nothing(tmp_path, kind):
    """KeyboardInterrupt half-way through Dataset.write into a new directory: no directory
    is left (an empty store there used to open later as an empty dataset); into an existing
    dataset, the dataset stays as it was."""
    images, labels, docs = make(3000)
    value = images if kind == "one array" else {"image": images, "label": labels, "tokens": docs}

    def interrupt(done, total):
        if done >= 1000:
            raise KeyboardInterrupt

    new = tmp_path / "deep" / "new"
    with pytest.raises(KeyboardInterrupt):
        Dataset.write(new, value, chunk_bytes=20_000, progress=interrupt)
    assert not new.exists()
    Dataset.write(new, value, chunk_bytes=1 << 20).close()
    before = sorted(p.relative_to(new) for p in new.rglob("*"))
    with pytest.raises(KeyboardInterrupt):
        Dataset.write(new, value, chunk_bytes=20_000, progress=interrupt, mode="append")
    assert len(Dataset(new)) == 3000
    if kind == "named fields":
        assert sorted(p.relative_to(new) for p in new.rglob("*")) == before


def test_a_damaged_manifest_is_a_metadata_error_naming_the_file(tmp_path):
    zrecord.Dataset.write(tmp_path / "d", {"x": np.arange(10)}).close()
    manifest = tmp_path / "d" / "dataset.json"
    manifest.write_bytes(manifest.read_bytes()[:30])  # a copy cut short
    with pytest.raises(zrecord.MetadataError) as e:
        zrecord.Dataset(tmp_path / "d")
    assert isinstance(e.value, ValueError) and str(manifest) in str(e.value), e.value
