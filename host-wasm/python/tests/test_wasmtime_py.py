"""zr.wasm embedded with the `wasmtime` Python package (host-wasm/python/zr_wasm.py)."""

import numpy as np
import pytest
from loaderx import Dataset

from zr_wasm import ZrWasm, ZrWasmError


@pytest.fixture
def lx_store(tmp_path):
    data = np.arange(120 * 6, dtype=np.float32).reshape(120, 6)
    Dataset.write(str(tmp_path / "lx.zr"), data)
    return tmp_path


def test_inspect_and_verify_a_loaderx_store(component, lx_store):
    zr = ZrWasm(component, {"/data": lx_store})
    report = zr.inspect("/data/lx.zr")
    assert report["records"] == 120
    assert report["bad_entries"] == 0
    assert report["schema"]["dtype"] == "<f4"
    assert report["schema"]["shape"] == [6]
    assert "records       120" in zr.inspect_text("/data/lx.zr")
    v = zr.verify("/data/lx.zr")
    assert (v["checked"], v["bad_count"]) == (120, 0)


def test_err_is_raised_with_its_code(component, lx_store):
    zr = ZrWasm(component, {"/data": lx_store})
    with pytest.raises(ZrWasmError) as e:
        zr.inspect("/data/missing")
    assert (e.value.kind, e.value.code) == ("bad-format", -8)
    with pytest.raises(ZrWasmError) as e:
        zr.inspect("/data/../../etc")
    assert e.value.code in (-2, -8)


def test_read_only_preopen_refuses_writes(component, lx_store):
    zr = ZrWasm(component, {"/data": lx_store})
    np.save(lx_store / "x.npy", np.zeros((3, 2), np.uint8))
    with pytest.raises(ZrWasmError) as e:
        zr.convert("/data/x.npy", "/data/new.zr", "raw")
    assert (e.value.kind, e.value.code) == ("io", -2)
    assert not (lx_store / "new.zr").exists()
    with pytest.raises(ZrWasmError) as e:
        zr.export("/data/lx.zr", "/data/out.npy")
    assert e.value.kind == "io"
    assert not (lx_store / "out.npy").exists()


@pytest.mark.parametrize("codec", ["flate", "raw"])
def test_convert_and_export_round_trip(component, tmp_path, codec):
    # Rows of 200 bytes that DEFLATE shrinks, so flate really stores them compressed.
    arr = (np.arange(40, dtype=np.int16)[:, None] * 3 + np.arange(100, dtype=np.int16) % 4).astype(np.int16)
    np.save(tmp_path / "in.npy", arr)
    zr = ZrWasm(component, {"/data": tmp_path}, writable=("/data",))
    assert zr.convert("/data/in.npy", "/data/s.zr", codec) == 40
    report = zr.inspect("/data/s.zr")
    assert report["records"] == 40
    assert report["schema"]["dtype"] == "<i2" and report["schema"]["shape"] == [100]
    assert report["raw_records" if codec == "raw" else "flate_records"] == 40
    assert zr.export("/data/s.zr", "/data/out.npy") == 40
    back = np.load(tmp_path / "out.npy")
    assert back.dtype == arr.dtype and np.array_equal(back, arr)


def test_convert_refuses_an_unknown_codec(component, tmp_path):
    np.save(tmp_path / "in.npy", np.zeros((2, 2), np.uint8))
    zr = ZrWasm(component, {"/data": tmp_path}, writable=("/data",))
    with pytest.raises(ValueError):
        zr.convert("/data/in.npy", "/data/s.zr", "zstd")
    assert not (tmp_path / "s.zr").exists()


def test_convert_errors_carry_their_code(component, tmp_path):
    (tmp_path / "fake.npy").write_bytes(b"not a numpy file")
    zr = ZrWasm(component, {"/data": tmp_path}, writable=("/data",))
    with pytest.raises(ZrWasmError) as e:
        zr.convert("/data/fake.npy", "/data/s.zr")
    assert (e.value.kind, e.value.code) == ("bad-format", -8)
    with pytest.raises(ZrWasmError) as e:
        zr.export("/data/missing.zr", "/data/out.npy")
    assert e.value.code == -8


def test_a_damaged_record_is_named_with_its_store(component, tmp_path):
    # Raw rows of 16 bytes, back to back in chunk 0: a flipped byte of row 10 fails its
    # checksum on export, named as the native host names it.
    np.save(tmp_path / "in.npy", np.arange(64 * 16, dtype=np.uint8).reshape(64, 16))
    zr = ZrWasm(component, {"/data": tmp_path}, writable=("/data",))
    assert zr.convert("/data/in.npy", "/data/s.zr", "raw") == 64
    chunk = tmp_path / "s.zr" / "0.zr"
    with open(chunk, "r+b") as f:
        f.seek(10 * 16 + 3)
        b = f.read(1)
        f.seek(10 * 16 + 3)
        f.write(bytes([b[0] ^ 0xFF]))
    with pytest.raises(ZrWasmError) as e:
        zr.export("/data/s.zr", "/data/out.npy")
    assert (e.value.kind, e.value.path, e.value.record) == ("checksum", "/data/s.zr", 10)
    assert str(e.value).startswith("[-11 checksum] /data/s.zr: record 10 ")
