"""Shared fixtures: where zr-wasm, zr.wasm and the native zr are.

`make wasm-test` sets ZR_WASM, ZR_WASM_COMPONENT and (when the root Makefile built it)
ZR_NATIVE; run by hand, the defaults under target/ are used.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "host-wasm" / "python"))


def _path(env: str, default: Path) -> Path:
    return Path(os.environ.get(env, default))


@pytest.fixture(scope="session")
def zr_wasm() -> Path:
    p = _path("ZR_WASM", REPO / "target/release/zr-wasm")
    if not p.is_file():
        pytest.fail(f"{p} is missing: run `make wasm-build`")
    return p


@pytest.fixture(scope="session")
def component() -> Path:
    p = _path("ZR_WASM_COMPONENT", REPO / "target/wasm/zr.wasm")
    if not p.is_file():
        pytest.fail(f"{p} is missing: run `make wasm-build`")
    return p


@pytest.fixture(scope="session")
def zr_native() -> Path:
    """The native CLI. Required when ZR_NATIVE is set (as `make test` does); otherwise a
    missing binary skips the tests that need it rather than passing them."""
    p = _path("ZR_NATIVE", REPO / "target/release/zr")
    if not p.is_file():
        if "ZR_NATIVE" in os.environ:
            pytest.fail(f"ZR_NATIVE={p} does not exist")
        pytest.skip("native zr not built (make build)")
    return p


@pytest.fixture
def run(tmp_path):
    """Runs a CLI with a private code cache; returns the CompletedProcess."""

    def _run(exe, *args, check=True):
        env = dict(os.environ, ZR_WASM_CACHE=str(tmp_path.parent / "zr-wasm-cache"))
        p = subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True, env=env)
        if check and p.returncode != 0:
            raise AssertionError(f"{exe} {args} exited {p.returncode}\nstdout: {p.stdout}\nstderr: {p.stderr}")
        return p

    return _run
