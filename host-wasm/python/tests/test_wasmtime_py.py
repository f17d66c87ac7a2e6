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


def test_read_only_preopen_refuses_writes(component, lx_store, tmp_path):
    import wasmtime.component as wc  # noqa: F401  (the API ZrWasm wraps)

    zr = ZrWasm(component, {"/data": lx_store})
    index = zr._instance.get_export_index(zr._store, "convert-npy", zr._tools)
    np.save(tmp_path / "x.npy", np.zeros((3, 2), np.uint8))
    value = zr._instance.get_func(zr._store, index)(zr._store, "/data/x.npy", "/data/new.zr", "raw")
    assert str(value.code) == "io"
    assert not (tmp_path / "new.zr").exists()
