"""The `zr` CLI on its own and next to the Python package's tools (no loaderx needed)."""

import dataclasses
import json
import subprocess
import sys

import numpy as np
import pytest

import zrecord


def run(zr, *args, ok=True):
    p = subprocess.run([zr, *map(str, args)], capture_output=True, text=True)
    if ok and p.returncode != 0:
        raise AssertionError(f"zr {args} failed ({p.returncode}): {p.stderr}")
    return p


def images(n, seed=0, noise=8):
    """Smooth image-like uint8 samples plus a little noise: mildly compressible (DEFLATE
    saves about 4% at noise=8, so they are stored raw under the default min_savings, and
    about 18% at noise=4)."""
    rng = np.random.default_rng(seed)
    base = np.linspace(0, 255, 3 * 32 * 32).reshape(3, 32, 32)
    return (base[None] + rng.integers(0, noise, (n, 3, 32, 32))).astype(np.uint8)


def test_verify_reports_a_damaged_record(zr, tmp_path):
    # Compressed records: damage in a raw one is not detectable by decoding.
    np.save(tmp_path / "a.npy", images(20, noise=4))
    run(zr, "convert", tmp_path / "a.npy", tmp_path / "zr")
    with open(tmp_path / "zr" / "0.zr", "r+b") as f:
        f.seek(100)
        f.write(b"\xff" * 64)
    p = run(zr, "verify", tmp_path / "zr", ok=False)
    assert p.returncode == 1
    assert "bad record" in p.stdout


def test_convert_streams_in_bounded_memory(zr, tmp_path):
    """A 512 MiB .npy converts with far less resident memory than its size."""
    n = 512 * 1024 // 12
    arr = np.lib.format.open_memmap(tmp_path / "big.npy", mode="w+", dtype=np.uint8, shape=(n, 3, 64, 64))
    for s in range(0, n, 4096):
        arr[s:s + 4096] = (np.arange(12288, dtype=np.uint32).reshape(3, 64, 64) // 48 + s).astype(np.uint8)
    arr.flush()
    del arr
    code = (
        "import resource, subprocess, sys;"
        f"subprocess.run([{zr!r}, 'convert', {str(tmp_path / 'big.npy')!r}, {str(tmp_path / 'zr')!r}], check=True, capture_output=True);"
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
    )
    peak_kib = int(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    assert peak_kib < 400 * 1024, f"peak RSS {peak_kib} KiB"
    assert json.loads(run(zr, "stats", tmp_path / "zr").stdout)["records"] == n


# -- the Python tools give what the CLI gives ------------------------------------------------


def as_json(obj):
    """A tools dataclass as `zr ... --json` spells it (tuples are JSON lists)."""
    return json.loads(json.dumps(dataclasses.asdict(obj)))


@pytest.mark.parametrize("codec", ["flate", "raw"])
def test_python_inspect_is_zr_inspect_json(zr, tmp_path, codec):
    np.save(tmp_path / "a.npy", images(300, 1))
    run(zr, "convert", tmp_path / "a.npy", tmp_path / "s", "--codec", codec)
    run(zr, "delete", tmp_path / "s", 3, 17, 299)
    assert as_json(zrecord.inspect(tmp_path / "s")) == json.loads(run(zr, "inspect", "--json", tmp_path / "s").stdout)


def test_python_convert_and_export_are_zr_convert_and_export(zr, tmp_path):
    data = images(257, 2)
    np.save(tmp_path / "a.npy", data)
    run(zr, "convert", tmp_path / "a.npy", tmp_path / "by_zr")
    zrecord.convert(tmp_path / "a.npy", tmp_path / "by_py")
    assert (tmp_path / "by_zr" / "schema.json").read_bytes() == (tmp_path / "by_py" / "schema.json").read_bytes()
    zr_report = json.loads(run(zr, "inspect", "--json", tmp_path / "by_zr").stdout)
    assert as_json(zrecord.inspect(tmp_path / "by_py")) == zr_report
    run(zr, "export", tmp_path / "by_py", tmp_path / "zr.npy")
    zrecord.export(tmp_path / "by_zr", tmp_path / "py.npy")
    assert (tmp_path / "zr.npy").read_bytes() == (tmp_path / "py.npy").read_bytes()
    np.testing.assert_array_equal(np.load(tmp_path / "py.npy"), data)


def test_python_verify_finds_what_zr_verify_finds(zr, tmp_path):
    np.save(tmp_path / "a.npy", images(20, noise=4))  # compressed records, as above
    run(zr, "convert", tmp_path / "a.npy", tmp_path / "s")
    with open(tmp_path / "s" / "0.zr", "r+b") as f:
        f.seek(100)
        f.write(b"\xff" * 64)
    p = run(zr, "verify", tmp_path / "s", ok=False)
    v = zrecord.verify(tmp_path / "s")
    assert p.returncode == 1 and not v.ok
    assert f"{v.checked} records checked, {v.bad_count} bad" in p.stdout
    for bad in v.bad:
        assert f"{bad.index}" in p.stdout


def test_python_tools_report_a_dataset_of_named_fields_as_zr_does(zr, tmp_path):
    """inspect, verify, stats and export of a dataset of named fields (dataset.json over
    shards) give zr's figures store by store; before, each failed "meta.zr is missing"."""
    n = 300
    rng = np.random.default_rng(4)
    ds = tmp_path / "ds"
    zrecord.Dataset.write(
        ds,
        {"image": images(n, 3, noise=4), "label": np.arange(n), "caption": [f"sample {i}" * (i % 5 + 1) for i in range(n)],
         "tokens": [rng.integers(0, 50000, int(k), dtype=np.uint32) for k in rng.integers(1, 40, n)]},
        shard_records=128, metadata={"licence": "CC-BY-4.0"},
    )
    report = json.loads(run(zr, "inspect", "--json", ds).stdout)
    got = zrecord.inspect(ds)
    assert isinstance(got, zrecord.DatasetInspection)
    assert (got.samples, got.shards, got.fields) == (n, 3, ("image", "label", "caption", "tokens"))
    assert got.metadata == {"licence": "CC-BY-4.0"}
    assert [{"shard": s.shard, "field": s.field, "inspection": as_json(s.inspection)} for s in got.stores] \
        == report["stores"]
    assert got.live_bytes == sum(s["inspection"]["live_bytes"] for s in report["stores"])
    assert zrecord.stats(ds) == json.loads(run(zr, "stats", ds).stdout)
    # A store inside the dataset is still a store.
    assert as_json(zrecord.inspect(ds / "shard-000001" / "label")) == report["stores"][5]["inspection"]

    run(zr, "export", ds, tmp_path / "zr.npz")
    assert zrecord.export(ds, tmp_path / "py.npz") == n
    assert (tmp_path / "zr.npz").read_bytes() == (tmp_path / "py.npz").read_bytes()

    v = zrecord.verify(ds)
    assert v.ok and v.checked == 4 * n and v.bad_count == 0
    with open(ds / "shard-000001" / "image" / "0.zr", "r+b") as f:
        f.seek(100)
        f.write(b"\xff" * 64)
    p = run(zr, "verify", "--json", ds, ok=False)
    v = zrecord.verify(ds)
    assert p.returncode == 1 and not v.ok and v.bad_count == json.loads(p.stdout)["bad"] > 0
    # zr has no `sealed` without --seal; Python's is None.
    ours = [{"shard": s.shard, "field": s.field, "verification": as_json(s.verification)} for s in v.stores]
    assert all(s["verification"].pop("sealed") is None for s in ours)
    assert ours == json.loads(p.stdout)["stores"]
    damaged = [s for s in v.stores if not s.verification.ok]
    assert [(s.shard, s.field) for s in damaged] == [("shard-000001", "image")]
    with pytest.raises(ValueError, match="one local store"):
        zrecord.verify(ds, seal=True)
    with pytest.raises(ValueError, match="storage_options apply to a URL"):
        zrecord.inspect(ds, storage_options={"aws_region": "x"})

    assert zrecord.list(tmp_path) == [str(ds)]


def test_convert_min_savings(zr, tmp_path):
    """Records DEFLATE shrinks by about 4% are raw under the default min_savings (0.125)
    and compressed under --min-savings 0; both read back the same."""
    data = images(20)
    np.save(tmp_path / "a.npy", data)
    run(zr, "convert", tmp_path / "a.npy", tmp_path / "default")
    run(zr, "convert", tmp_path / "a.npy", tmp_path / "any", "--min-savings", "0")
    assert zrecord.inspect(tmp_path / "default").flate_records == 0
    assert zrecord.inspect(tmp_path / "any").flate_records == 20
    for name in ("default", "any"):
        with zrecord.Dataset(tmp_path / name) as ds:
            np.testing.assert_array_equal(ds[:], data)
    p = run(zr, "convert", tmp_path / "a.npy", tmp_path / "bad", "--min-savings", "2", ok=False)
    assert p.returncode == 2 and "--min-savings takes a fraction from 0 to 1" in p.stderr
    assert not (tmp_path / "bad").exists()


# -- damage to a store as a whole: one finding with its byte counts ---------------------------


def test_a_truncated_chunk_is_one_finding_in_verify_and_inspect(zr, tmp_path):
    np.save(tmp_path / "a.npy", images(400))
    run(zr, "convert", tmp_path / "a.npy", tmp_path / "s")
    used = zrecord.inspect(tmp_path / "s").chunks[0].used_bytes
    cut = used // 3
    with open(tmp_path / "s" / "0.zr", "r+b") as f:
        f.truncate(cut)
    p = run(zr, "verify", tmp_path / "s", ok=False)
    assert p.returncode == 1, p.stdout + p.stderr
    lines = p.stdout.splitlines()
    assert lines[0] == (f"damaged: 0.zr is truncated: the file has {cut} bytes, but its records reach byte {used} "
                        "(a copy or download cut short?)"), lines
    past = 400 - cut // (3 * 32 * 32)
    assert lines[1] == f"{past} records lie past the end of a truncated chunk", lines
    assert not any(line.startswith("bad record") for line in lines), "no line per cut-off record"
    assert len(lines) <= 4, lines
    p = run(zr, "inspect", tmp_path / "s")
    assert f"DAMAGED       0.zr is truncated: the file has {cut} bytes" in p.stdout, p.stdout
    info = zrecord.inspect(tmp_path / "s")
    assert info.chunks[0].file_bytes == cut and len(info.problems) == 1
    report = zrecord.verify(tmp_path / "s")
    assert not report.ok and report.cut_off == past == report.bad_count and report.bad == ()


def test_a_lost_checksum_file_warns_and_fails_verify_until_sealed(zr, tmp_path):
    np.save(tmp_path / "a.npy", images(50))
    run(zr, "convert", tmp_path / "a.npy", tmp_path / "s")
    assert (tmp_path / "s" / "checksums.zrk").exists(), "a new store records that it keeps checksums"
    assert run(zr, "verify", tmp_path / "s").returncode == 0
    (tmp_path / "s" / "checksums.zrc").unlink()
    p = run(zr, "verify", tmp_path / "s", ok=False)
    assert p.returncode == 1 and "damaged: checksums.zrc is missing or unusable" in p.stdout, p.stdout
    with pytest.warns(zrecord.ChecksumsLostWarning, match="checksums.zrc is missing"):
        zrecord.Dataset(tmp_path / "s").close()
    with pytest.warns(zrecord.ChecksumsLostWarning):
        zrecord.Zrecord(tmp_path / "s", create=False).close()
    assert not zrecord.verify(tmp_path / "s").ok
    # Sealing checksums the records as they are now: the store is sound again.
    p = run(zr, "verify", "--seal", tmp_path / "s")
    assert "sealed 50 records" in p.stdout and "damaged" not in p.stdout, p.stdout
    assert run(zr, "verify", tmp_path / "s").returncode == 0
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        zrecord.Dataset(tmp_path / "s").close()


@pytest.mark.parametrize("shape,dtype", [((37, 3, 4, 5), np.uint8), ((50, 6), np.float32), ((21, 2, 3), ">i2"),
                                         ((9,), np.int64), ((8, 1, 7), np.uint16)])
def test_fortran_ordered_npy_converts_like_its_c_ordered_copy(zr, tmp_path, shape, dtype):
    rng = np.random.default_rng(len(shape))
    a = np.asfortranarray(rng.integers(0, 1000, shape).astype(dtype))
    np.save(tmp_path / "f.npy", a)
    assert np.load(tmp_path / "f.npy").flags.f_contiguous
    run(zr, "convert", tmp_path / "f.npy", tmp_path / "cli")
    # In blocks of a few rows, so that the transposing read starts mid-array.
    zrecord.convert(tmp_path / "f.npy", tmp_path / "py", chunk_bytes=3 * a[0].nbytes)
    for name in ("cli", "py"):
        with zrecord.Dataset(tmp_path / name) as ds:
            assert len(ds) == shape[0]
            np.testing.assert_array_equal(ds[np.arange(shape[0])], a)
