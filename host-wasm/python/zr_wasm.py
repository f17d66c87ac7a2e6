"""zr.wasm from Python through the `wasmtime` package's component API.

The sandboxed path for users who cannot load native extensions: the store logic runs in the
component, and the component sees only the directories given to :class:`ZrWasm` (paths
passed to its methods are guest paths inside them).

    >>> zr = ZrWasm("target/wasm/zr.wasm", {"/data": "/srv/datasets"}, writable=("/data",))
    >>> report = zr.inspect("/data/train.zr")      # dict, as `zr inspect --json`
    >>> report["records"]
    >>> zr.convert("/data/images.npy", "/data/images.zr")   # as `zr convert`; records appended
    >>> zr.export("/data/images.zr", "/data/copy.npy")      # as `zr export`; records written

A WIT ``err`` comes back from wasmtime-py as a value (a record with ``code`` and
``message``), not an exception; :class:`ZrWasm` raises :class:`ZrWasmError` for it, with the
same stable numeric codes as the native Python package (the table below is checked against
the core's by ``core/tests/error_table.rs``).
"""

from __future__ import annotations

import json
import os
from typing import Mapping

import wasmtime
import wasmtime.component as wc

#: WIT ``error-code`` case -> stable numeric code (loaderx's -1..-8, then zrecord's), in the
#: order of the core's table (``ERROR_KINDS`` in core/src/error.rs).
ERROR_CODES = {
    "out-of-memory": -1,
    "io": -2,
    "index-out-of-range": -3,
    "record-too-large": -4,
    "store-full": -5,
    "buffer-too-small": -6,
    "decode": -7,
    "bad-format": -8,
    "locked": -9,
    "invalid-argument": -10,
    "checksum": -11,
}

TOOLS = "zrecord:store/tools@0.1.0"

#: The record codecs ``convert`` accepts (the WIT ``codec`` cases).
CODECS = ("flate", "raw")


class ZrWasmError(Exception):
    """An error returned by the component; ``kind`` is the WIT case, ``code`` its number;
    ``path`` and ``record`` name the store and record that failed its checksum or could not
    be decoded, and ``field`` the dataset field when read through a dataset (``None`` for
    other errors)."""

    def __init__(self, kind: str, message: str, path: str | None = None, record: int | None = None,
                 field: str | None = None):
        super().__init__(message)
        self.kind = kind
        self.code = ERROR_CODES.get(kind, ERROR_CODES["invalid-argument"])
        self.path = path
        self.record = record
        self.field = field

    def __str__(self) -> str:
        return f"[{self.code} {self.kind}] {self.args[0]}"


def _is_error(value) -> bool:
    # wasmtime-py gives the `ok` payload as is and the `err` payload as a Record; our ok
    # payloads are strings and integers, so a Record with code and message is an error.
    return isinstance(value, wc.Record) and hasattr(value, "code") and hasattr(value, "message")


class ZrWasm:
    """One instance of zr.wasm with the given preopens (guest path -> host directory).

    ``writable`` lists the guest paths the component may write under; the others are
    read-only, so ``convert`` and ``export`` into them fail with a ``ZrWasmError`` of kind
    ``"io"``. Every method takes guest paths and raises :class:`ZrWasmError` for an error
    the component returns.
    """

    def __init__(self, component_path: str | os.PathLike, preopens: Mapping[str, str | os.PathLike],
                 writable: tuple[str, ...] = ()):
        self._engine = wasmtime.Engine()
        self._store = wasmtime.Store(self._engine)
        wasi = wasmtime.WasiConfig()
        for guest, host in preopens.items():
            wasi.preopen_dir(os.fspath(host), guest, guest in writable)
        self._store.set_wasi(wasi)
        linker = wc.Linker(self._engine)
        linker.add_wasip2()
        component = wc.Component.from_file(self._engine, os.fspath(component_path))
        self._instance = linker.instantiate(self._store, component)
        self._tools = self._instance.get_export_index(self._store, TOOLS)
        if self._tools is None:
            raise RuntimeError(f"{component_path} does not export {TOOLS}")

    def _call(self, name: str, *args):
        index = self._instance.get_export_index(self._store, name, self._tools)
        func = self._instance.get_func(self._store, index)
        value = func(self._store, *args)
        if _is_error(value):
            path, record, field = (getattr(value, k, None) for k in ("path", "record", "field"))
            raise ZrWasmError(str(value.code), str(value.message), None if path is None else str(path),
                              None if record is None else int(record), None if field is None else str(field))
        return value

    def inspect(self, path: str) -> dict:
        """The `zr inspect --json` report of the store at guest `path`."""
        return json.loads(self._call("inspect", path))

    def inspect_text(self, path: str) -> str:
        """The `zr inspect` text report."""
        return self._call("inspect-text", path)

    def verify(self, path: str) -> dict:
        """``{"checked", "bad_count", "bad"}`` after decoding every record."""
        return json.loads(self._call("verify", path))

    def convert(self, npy: str, path: str, codec: str = "flate") -> int:
        """Appends every axis-0 slice of the ``.npy`` at guest path ``npy`` to the store at
        ``path`` (created if missing) with ``codec`` (``"flate"`` or ``"raw"``) and writes its
        ``schema.json``, as ``zr convert`` does. Returns the number of records appended."""
        if codec not in CODECS:
            raise ValueError(f"codec must be one of {CODECS}, got {codec!r}")
        return int(self._call("convert-npy", npy, path, codec))

    def export(self, path: str, npy: str) -> int:
        """Writes the dataset store at guest path ``path`` to the ``.npy`` at ``npy``, as
        ``zr export`` does. Returns the number of records written."""
        return int(self._call("export-npy", path, npy))


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description="inspect a zrecord store with zr.wasm under wasmtime-py")
    ap.add_argument("store", help="store directory on the host")
    ap.add_argument("--component", default=os.environ.get("ZR_WASM_COMPONENT", "target/wasm/zr.wasm"))
    a = ap.parse_args()
    zr = ZrWasm(a.component, {"/store": os.path.abspath(a.store)})
    print(zr.inspect_text("/store"))
