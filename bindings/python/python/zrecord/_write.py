"""Writing a dataset (``Dataset.write``, ``Dataset.add_field``): named fields in blocks of
columns to the native writer, which owns the fields' rules, the shards and the commit; a
single array (the loaderx layout) staged into one store and committed once."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Union

import numpy as np

from . import _columns, _zrecord
from ._columns import _backing_mmap
from ._columns import release as _release
from ._progress import Progress, reporter
from ._zrecord import MAX_RECORD_LEN, Zrecord
from .errors import LockedError

if TYPE_CHECKING:
    from .dataset import Dataset

PathLike = Union[str, "os.PathLike[str]"]

#: Default upper bound on the source bytes handed to one append by ``Dataset.write``.
WRITE_CHUNK_BYTES = 64 << 20

#: Codec name -> on-disk tag, from the core's codec list: "raw" 0 and "flate" 1 as in
#: loaderx, and "zstd" 2, which loaderx 0.5.4 cannot read.
CODECS = dict(_zrecord.CODECS)


def _check_codec(codec: str) -> None:
    if codec not in CODECS:
        raise ValueError(f"unknown codec {codec!r}, expected one of {sorted(CODECS)}")


def write(
    cls,
    path: PathLike,
    array: Any,
    codec: "str | Mapping[str, str]" = "flate",
    chunk_bytes: int = WRITE_CHUNK_BYTES,
    progress: Progress = False,
    min_savings: float | None = None,
    *,
    shard_records: int | None = None,
    layout: str | None = None,
    metadata: "Mapping[str, Any] | None" = None,
    dtype: "Mapping[str, Any] | None" = None,
    skip_empty: bool = False,
    mode: "str | None" = None,
    timeout: float = 60.0,
    storage_options: "dict[str, str] | None" = None,
) -> "Dataset":
    """Persist ``array`` as a dataset, one record per slice along axis 0; or, given a
    dict of named fields, a dataset of those fields.

    **Named fields** (``{"image": images, "label": labels, "tokens": docs}``): a fixed
    field is an array (or ``np.memmap``) of samples stacked along axis 0; a ragged field
    is a list or iterator of 1-D arrays, or a ``(values, offsets)`` pair (Arrow's list
    layout: sample ``k`` is ``values[offsets[k]:offsets[k + 1]]``); a bytes field a list
    or iterator of ``bytes`` (encoded images, say) and a string field one of ``str``
    (captions), empty values included. ``array`` may also be a pandas ``DataFrame``, a
    pyarrow ``Table``, ``RecordBatch`` or ``RecordBatchReader``, an iterator of record
    batches, or a Hugging Face ``datasets.Dataset``: each column a field, by the rule in
    ``docs/python.md`` ("Which field a column becomes"). Every field must hold
    the same number of samples. Iterators are read ``chunk_bytes`` at a time, so an
    unbounded stream of documents is written in bounded memory. The dataset is a
    ``dataset.json`` manifest over shards of ``shard_records`` samples (default 2^24,
    the most a store holds), each field of each shard a store, written ``layout="dense"``
    (the default: files as long as what they hold, safe for every copy tool) or
    ``"sparse"`` (each fixed field's store is then a loaderx 0.5.4 dataset on its own;
    :func:`zrecord.set_layout` changes it later). ``mode`` says what happens when
    ``path`` already holds a dataset of named fields: ``"create"`` (the default) refuses
    it, ``"append"`` adds the samples after its own (the fields must match), and
    ``"overwrite"`` replaces it whole, of any fields, at the commit: a reader sees the
    old dataset or the new one, never a mix. Nothing is visible until the whole write is
    committed; a write that fails or is interrupted leaves the dataset as it was.
    Writers of one dataset take turns: a write waits up to ``timeout`` seconds (default
    60) while another holds the dataset's writer lock, so appenders side by side (a
    process pool, a Slurm array) each land their rows whole, once; past it the write
    raises ``LockedError`` saying how long it waited. ``timeout=0`` fails at once.

    A 1-D array becomes a dataset of scalars (the usual label set). The array is read
    in blocks of at most ``chunk_bytes``, so an ``np.load(..., mmap_mode="r")`` array is
    never read into memory whole. If ``path`` already holds a dataset of the same
    per-sample dtype and shape, the samples are appended to it (in its codec), as
    loaderx 0.5.4 does (``mode=None`` or ``"append"``); ``mode="create"`` refuses an
    existing store instead. A single store is never overwritten in place: remove it, or
    write a dataset of named fields.

    The write is all or nothing: the blocks are staged (:meth:`Zrecord.stage`) and
    committed once at the end, so readers see every new sample at once, and a write that
    fails or is interrupted (an exception, ``KeyboardInterrupt``, a crash) adds none of
    them: running it again does not duplicate part of the first attempt.

    ``path`` may be a URL (``s3://``, ``gs://``, ``az://``, with ``storage_options``) for
    named fields: the samples are written into a temporary folder, uploaded under names
    of this write, and committed by a new listing, as a part of ``zrecord.ray``'s or
    ``write_part``'s write is. ``"create"`` refuses a prefix that holds a dataset,
    ``"append"`` adds to it (another writer's commit coming first is read and the listing
    put again), ``"overwrite"`` replaces it whole (a reader sees the old dataset or the
    new one; the old objects are deleted after). A failed write deletes its uploads. A
    bucket has no writer lock, so ``timeout`` does not apply; ``metadata`` is not written
    by URL yet (write locally with it and ``zrecord.push``).

    Args:
        path: destination directory (created if missing), or a URL (named fields).
        array: samples stacked along axis 0.
        codec: "flate" (compressed; records that do not shrink by ``min_savings`` are
            stored raw), "raw", or "zstd" (compressed the same way, faster to read, but
            loaderx 0.5.4 cannot read a zstd dataset). For named fields, a dict gives each
            field its own (``{"image": "raw", "tokens": "zstd"}``; a field it does not
            name is "flate"); a dataset that exists keeps its fields' codecs.
        metadata: named fields only: the dataset card, a dict that ``json`` can write
            (a description, a licence, sources, a tokenizer's name, class names ...), at
            most 1 MiB as JSON. Kept in ``dataset.json`` (its keys sorted), read back as
            :attr:`metadata`, shown by ``zr inspect`` and carried by push and pull; a
            later write with ``metadata`` replaces it, one without keeps it.
        dtype: named fields only: ``{"tokens": "uint16"}`` stores those numeric fields
            in that dtype; a value the dtype cannot hold exactly (out of range, a
            fraction for an integer dtype) is a ``ValueError`` naming the field.
        skip_empty: named fields only. A store holds no empty record, so a sample whose
            ragged field has no element (an empty document) fails the write, naming it,
            by default; ``True`` leaves such samples out (all their fields) and warns
            with the count. Every writer has this one rule (``zr convert
            --skip-empty``, ``write_part``, ``zrecord.ray.Datasink``).
        chunk_bytes: upper bound on the source bytes compressed and written at a time.
        progress: ``True`` for a tqdm bar (when tqdm is installed; otherwise none), or a
            ``callable(done, total)`` called after each block, in samples.
        min_savings: the least fraction of a sample compression must save for it to be
            stored compressed (default ``zrecord.DEFAULT_MIN_SAVINGS``, 0.125; 0.0 keeps
            any saving, as loaderx does). Raw samples in a flate dataset read as any
            other, loaderx 0.5.4 included; see ``docs/decisions/min-savings.md`` for the trade.

    Returns:
        The dataset, opened for reading.

    Raises:
        ValueError: unknown codec, ``min_savings`` outside 0..1, a 0-d array, samples of 0 bytes, a sample over
            ``MAX_RECORD_LEN`` bytes, or a dtype/shape that differs from the existing
            dataset at ``path``. Nothing is written in these cases.
        TypeError: a dtype ``schema.json`` cannot name: Python objects, or a structured
            dtype (loaderx 0.5.4 keeps only ``dtype.str``, ``|V8``, and the field names
            would be lost; store each field as its own dataset, or pass
            ``array.view(np.void)`` or ``array.view(np.uint8)`` to keep the bytes).
    """
    if mode is not None and mode not in _WRITE_MODES:
        raise ValueError(f'mode must be "create", "append" or "overwrite", not {mode!r}')
    if isinstance(path, str) and _zrecord._is_url(path):
        return _write_remote(
            cls, path, array, codec, chunk_bytes, progress, min_savings, shard_records=shard_records, layout=layout,
            metadata=metadata, dtype=dtype, skip_empty=skip_empty, mode=mode, storage_options=storage_options,
        )
    if storage_options is not None:
        raise ValueError(
            f"storage_options apply to a URL (s3://, gs://, az://, https://), not to the local path {path}"
        )
    return _write_dataset(
        cls, path, array, codec, chunk_bytes, progress, min_savings, shard_records=shard_records, layout=layout,
        metadata=metadata, dtype=dtype, skip_empty=skip_empty, mode=mode, timeout=timeout,
    )


def _write_remote(cls, url, array, codec, chunk_bytes, progress, min_savings, *, shard_records, layout, metadata,
                  dtype, skip_empty, mode, storage_options):
    """``Dataset.write`` to a URL: the samples written into a temporary local dataset by the
    usual writer, then uploaded and committed by the host's one rule for a bucket."""
    if not _named_fields(array):
        raise TypeError(
            "a single array (the loaderx layout) is written to a local folder; to put it in an object store, "
            "write it locally and zrecord.push it, or pass a dict of named fields"
        )
    if metadata is not None:
        raise TypeError(
            f"metadata is not written to {url} by URL yet: write the dataset locally with it, then zrecord.push"
        )
    scratch = Path(tempfile.mkdtemp(prefix="zrecord-write-"))
    try:
        local = scratch / "part"
        _write_fields(
            cls, local, array, codec, chunk_bytes, progress, min_savings, shard_records, layout, None, dtype,
            skip_empty, "create", 0.0, reopen=False,
        )
        _zrecord._write_remote(str(local), url, mode or "create", storage_options)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return cls(url, storage_options=storage_options)


def add_field(
    cls,
    path: PathLike,
    name: str,
    values: Any,
    *,
    codec: str = "flate",
    dtype: Any = None,
    chunk_bytes: int = WRITE_CHUNK_BYTES,
    progress: Progress = False,
    min_savings: float | None = None,
    storage_options: "dict[str, str] | None" = None,
) -> "Dataset":
    """Adds field ``name`` to every sample of the dataset of named fields at ``path``,
    without rewriting the others: ``values`` holds one sample per row, in index order
    (anything ``Dataset.write`` takes for one field, a pandas ``Series``, or a pyarrow
    ``Array`` / ``ChunkedArray``; an iterator is read ``chunk_bytes`` at a time). The
    field is one new store per shard, laid out as the dataset's stores are, published
    at once when complete: until then readers see the old fields, and a failure leaves
    the dataset as it was. States saved before the change resume after it (a stream
    reads rows, not columns). ``dtype`` casts a numeric field as ``Dataset.write``'s
    ``dtype`` does. Needs the dataset's writer lock (``LockedError`` while another write
    holds it). Returns the dataset, opened for reading.

    ``path`` may be a dataset's URL (with ``storage_options``): the field's stores are
    written in a temporary folder, uploaded under names of this write, and a new
    listing naming them replaces the old one if no other writer's came first (else
    ``LockedError``, and nothing changed). No other object is read or written.
    """
    _check_codec(codec)
    source = _columns.column_blocks(str(name), values, chunk_bytes, dtype)
    spec = dict(source.specs[0], codec=codec)
    remote = isinstance(path, str) and _zrecord._is_url(path)
    adder = _zrecord._FieldAdder(path if remote else os.fspath(path), spec, min_savings=min_savings,
                                 storage_options=storage_options)
    _drive(adder, source, len(adder), progress, "add_field", lambda columns: adder.write(columns[0]))
    return cls(path, storage_options=storage_options) if remote else cls(path)


def drop_field(cls, path: PathLike, name: str, *, storage_options: "dict[str, str] | None" = None) -> "Dataset":
    """Removes field ``name`` from the dataset of named fields at ``path`` (a folder, or
    a URL with ``storage_options``): the manifest without it is published first (in an
    object store, a new listing replaces the old one if no other writer's came
    first), then its stores are deleted. The last field cannot go. States saved before
    the change resume after it. Returns the dataset, opened for reading."""
    remote = isinstance(path, str) and _zrecord._is_url(path)
    _zrecord._drop_field(path if remote else os.fspath(path), str(name), storage_options=storage_options)
    return cls(path, storage_options=storage_options) if remote else cls(path)


def _write_dataset(cls, path, array, codec, chunk_bytes, progress, min_savings, *, shard_records, layout, metadata,
                   dtype, skip_empty, mode, timeout):
    """``Dataset.write``'s work: a dict of named fields to the native writer, a single array
    to a loaderx store."""
    if min_savings is not None and not 0.0 <= float(min_savings) <= 1.0:
        raise ValueError(f"min_savings must be a fraction between 0.0 and 1.0, got {min_savings}")
    if _named_fields(array):
        card = None if metadata is None else _metadata_json(metadata)
        return _write_fields(
            cls, path, array, codec, chunk_bytes, progress, min_savings, shard_records, layout, card, dtype,
            skip_empty, mode or "create", timeout,
        )
    if mode == "overwrite":
        raise ValueError(
            'mode="overwrite" applies to a dataset of named fields; a single store (the loaderx layout) is '
            "appended to or created, never replaced in place: remove it first"
        )
    if mode == "create" and (Path(path) / "meta.zr").exists():
        raise ValueError(
            f'{path} already holds a store: write with mode="append" to add samples to it, or remove it first'
        )
    if skip_empty:
        raise TypeError("skip_empty applies to the ragged fields of a dataset of named fields")
    if dtype is not None:
        raise TypeError("dtype applies to a dataset of named fields: cast the array itself")
    if isinstance(codec, Mapping):
        raise TypeError("a dict of codecs applies to a dataset of named fields: pass one codec name")
    _check_codec(codec)
    if metadata is not None:
        raise TypeError("metadata applies to a dataset of named fields (its dataset.json): pass a dict of fields")
    if shard_records is not None:
        raise TypeError("shard_records applies to a dataset of named fields: pass a dict of fields")
    if layout is not None:
        raise TypeError(
            "layout applies to a dataset of named fields: a single array is written as a loaderx "
            "store, sparse (zrecord.set_layout(path, 'dense') makes it dense)"
        )
    append_kw = {} if min_savings is None else {"min_savings": float(min_savings)}
    array = np.asanyarray(array)
    if array.ndim < 1:
        raise ValueError("array must have a sample axis")
    if array.dtype.hasobject:
        raise TypeError(f"cannot store dtype {array.dtype}: its elements are Python objects")
    dtype = np.dtype(array.dtype)
    if dtype.names is not None:
        raise TypeError(
            f"cannot store structured dtype {dtype}: schema.json records dtype.str ({dtype.str!r}, "
            "as loaderx 0.5.4 does), which would lose the field names; store each field as its "
            "own dataset, or write array.view(np.void) / array.view(np.uint8) to keep the bytes"
        )
    shape = tuple(int(d) for d in array.shape[1:])
    itemsize = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if itemsize > MAX_RECORD_LEN:
        raise ValueError(f"sample of {itemsize} bytes exceeds the {MAX_RECORD_LEN} byte record limit")
    if itemsize == 0:
        raise ValueError(
            f"samples of shape {shape} and dtype {dtype.str} hold 0 bytes; a record must hold at least one"
        )

    path = Path(path)
    # A write into a new directory that fails leaves no directory (no empty store that
    # would later open as an empty dataset).
    created = not path.exists()
    path.mkdir(parents=True, exist_ok=True)
    try:
        _write_array(path, array, dtype, shape, itemsize, codec, chunk_bytes, progress, append_kw)
    except BaseException:
        if created:
            shutil.rmtree(path, ignore_errors=True)
        raise
    return cls(path)


def _write_array(path, array, dtype, shape, itemsize, codec, chunk_bytes, progress, append_kw) -> None:
    step = max(1, int(chunk_bytes) // max(itemsize, 1))
    source_map = _backing_mmap(array)
    total = len(array)
    with reporter(progress, "write", "sample") as report, Zrecord(path, codec=codec) as store:
        # schema.json is written (or checked, its codec then winning) by the core's
        # rule, the one `zr convert` follows.
        codec = store._schema_for_append(dtype.str, list(shape), codec)
        if report is not None:
            report(0, total)
        # Every block is staged and the whole write committed once at the end: one sync
        # instead of one per block, and a write that fails or is interrupted half-way
        # adds nothing (re-running it does not duplicate a partial first attempt).
        try:
            for start in range(0, total, step):
                # A view when the source is already C-contiguous in this dtype (an mmap'd
                # .npy usually is): the store then reads the file's pages directly.
                block = np.ascontiguousarray(array[start : start + step], dtype=dtype)
                store.stage(block, len(block), itemsize, codec, **append_kw)
                del block
                if source_map is not None:
                    # Pages of a file mapping stay in this process's resident set once
                    # read; drop them (the page cache keeps the data) so memory stays
                    # bounded by chunk_bytes rather than growing to the file's size.
                    _release(source_map)
                if report is not None:
                    report(min(start + step, total), total)
            store.commit()
        except BaseException:
            store.discard()
            raise
        store.sync()


def _named_fields(data: Any) -> bool:
    """True for what ``Dataset.write`` takes as named fields: a dict, a DataFrame, Arrow
    data, a Hugging Face dataset or an iterator of record batches (``_columns``)."""
    if isinstance(data, Mapping):
        return True
    module = type(data).__module__ or ""
    return module.startswith(("pandas", "pyarrow", "datasets")) or isinstance(data, Iterator)


def _field_codecs(codec, fields: "list[str]") -> dict:
    """Each field's codec: one name for all, or a dict of names (the rest "flate")."""
    if isinstance(codec, Mapping):
        unknown = sorted(str(k) for k in codec if k not in fields)
        if unknown:
            raise ValueError(f"codec names fields the write does not have: {unknown} (fields: {sorted(fields)})")
        chosen = {str(name): codec.get(name, "flate") for name in fields}
    else:
        chosen = {str(name): codec for name in fields}
    for name, c in chosen.items():
        if c not in CODECS:
            raise ValueError(f"unknown codec {c!r} for field {name!r}, expected one of {sorted(CODECS)}")
    return chosen


def _metadata_json(metadata) -> str:
    """The dataset card as JSON text: a dict that json can write."""
    if not isinstance(metadata, Mapping):
        raise TypeError(f"metadata must be a dict of names to JSON values, not {type(metadata).__name__}")
    try:
        return json.dumps(dict(metadata), allow_nan=False)
    except (TypeError, ValueError) as e:
        raise TypeError(f"metadata is not JSON: {e}") from None


_WRITE_MODES = ("create", "append", "overwrite")


def _write_fields(cls, path, data, codec, chunk_bytes, progress, min_savings, shard_records, layout=None,
                  metadata=None, dtype=None, skip_empty=False, mode="append", timeout=0.0, reopen=True):
    """``Dataset.write(path, {name: samples, ...})`` (or a DataFrame, Arrow, a Hugging Face
    dataset): blocks of columns by the rule in ``_columns``, handed to the native writer,
    which owns the fields' rules, the shards and the commit."""
    source = _columns.blocks(data, chunk_bytes, dtype)
    codecs = _field_codecs(codec, [spec["name"] for spec in source.specs])
    for spec in source.specs:
        # Encoded images do not compress: trying each would cost a DEFLATE pass per image
        # for nothing. Raw unless a codec dict names the field.
        if spec["kind"] == "image" and not (isinstance(codec, Mapping) and spec["name"] in codec):
            codecs[spec["name"]] = "raw"
    specs = [dict(spec, codec=codecs[spec["name"]]) for spec in source.specs]
    total = source.total
    timeout = float(timeout)
    if not timeout >= 0.0:
        raise ValueError(f"timeout must be a number of seconds >= 0, got {timeout}")
    deadline = time.monotonic() + timeout
    while True:
        # The native writer waits for the lock; a second at a time, so that Ctrl-C (which
        # Python handles between calls) stops a long wait.
        left = max(0.0, deadline - time.monotonic())
        try:
            writer = _zrecord._DatasetWriter(
                Path(path), specs, shard_records=shard_records, min_savings=min_savings, layout=layout,
                skip_empty=bool(skip_empty), mode=mode, lock_wait=min(left, 1.0),
            )
            break
        except LockedError:
            if left > 1.0:
                continue
            if timeout <= 1.0:
                raise
            raise LockedError(
                f"{path}: another writer has been adding to the dataset for the {timeout:.1f} s this write waited; "
                "wait longer (timeout=) or find the other writer"
            ) from None
    if metadata is not None:
        writer.set_metadata(metadata)
    _drive(writer, source, total, progress, "write", writer.write)
    if writer.skipped:
        warnings.warn(f"{path}: {writer.skipped} samples with an empty ragged field left out (skip_empty=True)",
                      stacklevel=3)
    return cls(path) if reopen else None


def _drive(target, source, total, progress, what: str, put) -> None:
    """Hands every block of ``source`` to ``put``, reporting progress in samples, and
    commits ``target`` (a native writer or field adder); on any failure, or an interrupt,
    discards it instead, leaving the dataset as it was."""
    written = 0
    try:
        with reporter(progress, what, "sample") as report:
            if report is not None:
                report(0, total)
            for columns in source:
                written += put(columns)
                del columns
                source.after_block()
                if report is not None:
                    report(written, total)
            target.commit()
    except BaseException:
        target.discard()
        raise
