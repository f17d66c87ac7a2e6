"""zr-wasm against the native zr and the reference wheel (loaderx 0.5.4).

- zr-wasm inspects and verifies stores written by loaderx and by the native CLI;
- native and wasm conversions of the same .npy are byte-identical (meta.zr header and
  used table, chunk bytes up to the frontier, schema.json), and so are their exports;
- the CLI writes only to its output location and stops at its memory and time limits.
"""

import json
import struct
from pathlib import Path

import numpy as np
import pytest
from loaderx import Dataset

HEADER = 16
ENTRY = 16

CASES = {
    "f32-rows": lambda r: r.standard_normal((300, 17)).astype(np.float32),
    "u8-images": lambda r: (r.integers(0, 4, (64, 8, 8)) * 60).astype(np.uint8),
    "i64-labels": lambda r: r.integers(0, 10, 500).astype(np.int64),
    "incompressible": lambda r: r.integers(0, 256, (40, 4096)).astype(np.uint8),
    "i16-ramp": lambda r: np.tile(np.arange(256, dtype=np.int16), (90, 1)),
}


def header(store: Path):
    with open(store / "meta.zr", "rb") as f:
        magic, version, tail_chunk, tail_offset, length = struct.unpack("<4sHHII", f.read(HEADER))
    assert magic == b"ZREC"
    return version, tail_chunk, tail_offset, length


def used_bytes(store: Path) -> dict:
    """What a store is, byte for byte: header + live table, chunk bytes to the frontier,
    schema.json."""
    _, tail_chunk, tail_offset, length = header(store)
    with open(store / "meta.zr", "rb") as f:
        meta = f.read(HEADER + ENTRY * length)
    out = {"meta.zr": meta, "schema.json": (store / "schema.json").read_bytes()}
    for c in range(tail_chunk + 1):
        with open(store / f"{c}.zr", "rb") as f:
            out[f"{c}.zr"] = f.read(tail_offset if c == tail_chunk else 1 << 32)
    return out


@pytest.fixture(params=sorted(CASES))
def npy(request, tmp_path):
    arr = CASES[request.param](np.random.default_rng(len(request.param)))
    p = tmp_path / f"{request.param}.npy"
    np.save(p, arr)
    return p, arr


@pytest.mark.parametrize("codec", ["flate", "raw"])
def test_loaderx_stores_inspect_and_verify(npy, codec, tmp_path, zr_wasm, run):
    path, arr = npy
    Dataset.write(str(tmp_path / "lx.zr"), arr, codec=codec)
    report = json.loads(run(zr_wasm, "inspect", tmp_path / "lx.zr", "--json").stdout)
    assert report["records"] == len(arr)
    assert report["bad_entries"] == 0
    assert report["schema"]["dtype"] == arr.dtype.str
    assert report["schema"]["shape"] == list(arr.shape[1:])
    assert report["logical_bytes"] == arr.nbytes
    if codec == "raw":
        assert report["raw_records"] == len(arr)
    assert f"{len(arr)} records checked, 0 bad" in run(zr_wasm, "verify", tmp_path / "lx.zr").stdout
    # Exported back through the component, the array is the one loaderx stored.
    run(zr_wasm, "export", tmp_path / "lx.zr", tmp_path / "back.npy")
    np.testing.assert_array_equal(np.load(tmp_path / "back.npy"), arr)


@pytest.mark.parametrize("codec", ["flate", "raw"])
def test_native_and_wasm_stores_are_byte_identical(npy, codec, tmp_path, zr_wasm, zr_native, run):
    path, arr = npy
    run(zr_native, "convert", path, tmp_path / "native.zr", "--codec", codec)
    run(zr_wasm, "convert", path, tmp_path / "wasm.zr", "--codec", codec)
    a, b = used_bytes(tmp_path / "native.zr"), used_bytes(tmp_path / "wasm.zr")
    assert a.keys() == b.keys()
    for name in a:
        assert a[name] == b[name], f"{name} differs between native and wasm"
    # Appending the same array again keeps them identical.
    run(zr_native, "convert", path, tmp_path / "native.zr", "--chunk-mib", "1")
    run(zr_wasm, "convert", path, tmp_path / "wasm.zr", "--chunk-mib", "1")
    assert used_bytes(tmp_path / "native.zr") == used_bytes(tmp_path / "wasm.zr")
    # Each host reads the other's store the same way.
    for store in ("native.zr", "wasm.zr"):
        n = json.loads(run(zr_native, "inspect", tmp_path / store, "--json").stdout)
        w = json.loads(run(zr_wasm, "inspect", tmp_path / store, "--json").stdout)
        assert n == w
        assert run(zr_native, "stats", tmp_path / store).stdout == run(zr_wasm, "stats", tmp_path / store).stdout
    run(zr_native, "export", tmp_path / "wasm.zr", tmp_path / "n.npy")
    run(zr_wasm, "export", tmp_path / "native.zr", tmp_path / "w.npy")
    assert (tmp_path / "n.npy").read_bytes() == (tmp_path / "w.npy").read_bytes()
    np.testing.assert_array_equal(np.load(tmp_path / "n.npy"), np.concatenate([arr, arr]))


def test_verify_reports_damage_like_native(tmp_path, zr_wasm, zr_native, run):
    arr = np.tile(np.arange(200, dtype=np.uint8), (20, 1))
    np.save(tmp_path / "a.npy", arr)
    run(zr_native, "convert", tmp_path / "a.npy", tmp_path / "s.zr", "--codec", "flate")
    # Raw DEFLATE carries no checksum, so damage is made where it is always detectable: an
    # unknown codec tag in entry 2, and entry 5's stored length run past the frontier.
    with open(tmp_path / "s.zr" / "meta.zr", "r+b") as f:
        f.seek(HEADER + 2 * ENTRY + 14)
        f.write(b"\x07")
        f.seek(HEADER + 5 * ENTRY + 4)
        f.write(struct.pack("<I", 1 << 20))
    w = run(zr_wasm, "verify", tmp_path / "s.zr", "--json", check=False)
    n = run(zr_native, "verify", tmp_path / "s.zr", "--json", check=False)
    assert (w.returncode, n.returncode) == (1, 1)
    assert json.loads(w.stdout) == json.loads(n.stdout)
    assert [b["index"] for b in json.loads(w.stdout)["bad"]] == [2, 5]
    text = run(zr_wasm, "verify", tmp_path / "s.zr", check=False).stdout
    assert "bad record 2: unknown codec tag 7" in text and "20 records checked, 2 bad" in text


def test_zstd_stores_written_natively_read_in_wasm_but_are_not_written(tmp_path, zr_wasm, zr_native, run):
    # zstd records (tag 2) are written by the native host only; the guest decodes them with
    # the pure-Rust ruzstd, and must give what the native host gives.
    arr = np.tile(np.arange(256, dtype=np.uint8), (30, 4))
    arr[1::2] = np.random.default_rng(5).integers(0, 256, arr[1::2].shape, dtype=np.uint8)
    np.save(tmp_path / "a.npy", arr)
    run(zr_native, "convert", tmp_path / "a.npy", tmp_path / "z.zr", "--codec", "zstd")
    w = json.loads(run(zr_wasm, "inspect", tmp_path / "z.zr", "--json").stdout)
    assert w == json.loads(run(zr_native, "inspect", tmp_path / "z.zr", "--json").stdout)
    assert (w["zstd_records"], w["raw_records"]) == (15, 15)
    assert "loaderx 0.5.4 cannot read this store" in run(zr_wasm, "inspect", tmp_path / "z.zr").stdout
    assert "30 records checked, 0 bad" in run(zr_wasm, "verify", tmp_path / "z.zr").stdout
    run(zr_wasm, "export", tmp_path / "z.zr", tmp_path / "w.npy")
    run(zr_native, "export", tmp_path / "z.zr", tmp_path / "n.npy")
    assert (tmp_path / "w.npy").read_bytes() == (tmp_path / "n.npy").read_bytes()
    np.testing.assert_array_equal(np.load(tmp_path / "w.npy"), arr)
    p = run(zr_wasm, "convert", tmp_path / "a.npy", tmp_path / "new.zr", "--codec", "zstd", check=False)
    assert p.returncode == 2
    assert "writing zstd records needs the native host" in p.stderr
    assert not (tmp_path / "new.zr").exists()


def test_not_a_store_fails_naming_the_path(tmp_path, zr_wasm, run):
    p = run(zr_wasm, "inspect", tmp_path, check=False)
    assert p.returncode == 2
    assert p.stderr == f"zr: error: {tmp_path}: not a zrecord store: meta.zr is missing\n"


def test_cli_writes_only_its_output(tmp_path, zr_wasm, run):
    src = tmp_path / "in"
    src.mkdir()
    np.save(src / "a.npy", np.arange(64, dtype=np.int32).reshape(16, 4))
    before = sorted(p.name for p in src.iterdir())
    run(zr_wasm, "convert", src / "a.npy", tmp_path / "out" / "s.zr")
    assert sorted(p.name for p in src.iterdir()) == before
    assert sorted(p.name for p in (tmp_path / "out" / "s.zr").iterdir()) == ["0.zr", "checksums.zrc", "checksums.zrk", "meta.zr", "schema.json"]
    run(zr_wasm, "export", tmp_path / "out" / "s.zr", tmp_path / "x.npy")
    # Export staged its file in a private directory and left nothing else behind.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in", "out", "x.npy"]
    # Messages name the user's paths, never the guest's (/store, /out).
    p = run(zr_wasm, "export", tmp_path / "out" / "s.zr", tmp_path / "no" / "such" / "x.npy", check=False)
    assert p.returncode == 2
    assert p.stderr == f"zr: error: {tmp_path / 'no' / 'such' / 'x.npy'}: its directory does not exist\n"
    p = run(zr_wasm, "export", tmp_path / "out" / "s.zr", tmp_path / "y.npy")
    assert p.stdout == f"exported 16 records to {tmp_path / 'y.npy'}\n"
    # A failed convert into a new path leaves nothing, and the message blames the input.
    (src / "fake.npy").write_bytes(b"not an array")
    p = run(zr_wasm, "convert", src / "fake.npy", tmp_path / "new" / "s.zr", check=False)
    assert p.returncode == 2
    assert p.stderr == f"zr: error: {src / 'fake.npy'}: not a .npy file (bad magic)\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in", "out", "x.npy", "y.npy"]


@pytest.fixture
def big_npy(tmp_path):
    p = tmp_path / "big.npy"
    rows = np.arange(24 * 1024, dtype=np.uint32)[:, None]
    np.save(p, ((rows * np.arange(256, dtype=np.uint32)) & 0xFFFF).astype(np.uint32))  # 24 MiB
    return p


def test_memory_cap_stops_a_huge_request(big_npy, tmp_path, zr_wasm, run):
    p = run(zr_wasm, "--max-memory", "8", "convert", big_npy, tmp_path / "s.zr", check=False)
    assert p.returncode == 3, p.stderr
    assert "over the cap of 8 MiB" in p.stderr and "--max-memory" in p.stderr
    # One line, zr-wasm's: not the guest allocator's "memory allocation of N bytes failed"
    # before it.
    assert p.stderr.startswith("zr-wasm: stopped:") and len(p.stderr.splitlines()) == 1, p.stderr


def test_timeout_stops_a_runaway_call(big_npy, tmp_path, zr_wasm, run):
    p = run(zr_wasm, "--timeout", "0.02", "convert", big_npy, tmp_path / "s.zr", "--chunk-mib", "1", check=False)
    assert p.returncode == 3, p.stderr
    assert "time limit" in p.stderr and "--timeout" in p.stderr


def test_the_readme_says_how_large_zr_wasm_is(component):
    """The size README.md gives for zr.wasm is the built component's, within 10%."""
    import re

    readme = (Path(__file__).resolve().parents[3] / "README.md").read_text()
    said = re.search(r"\(`zr\.wasm`, (\d+) KB", readme)
    assert said, "README.md no longer says how large zr.wasm is"
    built = component.stat().st_size / 1000
    assert abs(built - int(said[1])) <= 0.1 * built, f"README says {said[1]} KB, the build is {built:.0f} KB"
