"""How Python data becomes a dataset's fields: the one rule ``Dataset.write`` and
``zrecord.ray.Datasink`` follow, and the blocks of columns they hand the native writer.

Per column (a dict entry, a DataFrame column, an Arrow column):

==========================================  ===========================================
the values                                  the field
==========================================  ===========================================
a numeric numpy array (or ``np.memmap``)    fixed: dtype and shape ``array.shape[1:]``
a ``(values, offsets)`` pair of arrays      ragged (Arrow's list layout)
a list, iterator or object array of         ragged: 1-D numeric arrays (or lists);
  1-D arrays / ``bytes`` / ``str``          bytes: ``bytes``, ``bytearray``, ``memoryview``;
                                            string: ``str`` (stored as UTF-8)
a numpy ``S`` array / ``U`` or StringDType  bytes (numpy drops trailing NUL bytes) / string
Arrow integer, floating point, boolean      fixed scalar
Arrow ``fixed_size_list`` (nested) of those fixed, of the lists' shape
Arrow ``list`` / ``large_list`` of numbers  ragged
Arrow ``binary`` / ``large_binary`` /       bytes
  ``fixed_size_binary``
Arrow ``string`` / ``large_string``         string
Arrow ``dictionary``                        by its decoded values (pandas categoricals)
==========================================  ===========================================

A pandas ``DataFrame`` is the dict of its columns' numpy values; a pyarrow ``Table``,
``RecordBatch``, or an iterator of record batches, and a Hugging Face ``datasets.Dataset``
(its Arrow batches) follow the Arrow rows. Anything else, a nested list, or a null, is an
error naming the column (and the row). ``dtype={"tokens": "uint16"}`` casts a numeric
column, refusing a value the new dtype cannot hold exactly.
"""

from __future__ import annotations

import itertools
import mmap
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np

#: Samples per block when no fixed field bounds it by ``chunk_bytes``.
RAGGED_BLOCK = 1 << 16


# -- casting ---------------------------------------------------------------------------------


def cast(name: str, array: np.ndarray, dtype: "np.dtype | None", sample_of: Any = None) -> np.ndarray:
    """``array`` as ``dtype`` (None: as it is), refusing a value the cast would change;
    ``sample_of(flat element index)`` names the sample of a refused value in the error."""
    if dtype is None or array.dtype == dtype:
        return array
    if array.dtype.kind not in "biuf" or dtype.kind not in "biuf":
        raise TypeError(f"field {name!r}: cannot cast {array.dtype} to {dtype}")
    out = array.astype(dtype)
    if out.size:
        if dtype.kind in "iub":
            # Every value back as it was, or the cast lost it (out of range, a fraction).
            same = out.astype(array.dtype) == array
        else:
            same = np.isfinite(out) | ~np.isfinite(array)
        if not np.all(same):
            at = int(np.argmin(same.reshape(-1)))
            value = array.reshape(-1)[at].item()
            where = "" if sample_of is None else f" sample {int(sample_of(at))}:"
            raise ValueError(f"field {name!r}:{where} value {value!r} does not fit {dtype}")
    return out


# -- sources: a field's samples, read a block at a time --------------------------------------


def _backing_mmap(array: Any) -> Any:
    """The shared ``mmap.mmap`` behind a ``np.memmap`` (or a view of one), if any.

    Copy-on-write maps (``mode="c"``) are left alone: dropping their pages would discard
    the caller's private changes.
    """
    obj = array
    for _ in range(32):
        if obj is None:
            break
        if isinstance(obj, np.memmap):
            mm = getattr(obj, "_mmap", None)
            if isinstance(mm, mmap.mmap) and getattr(obj, "mode", "c") in ("r", "r+", "w+", "readonly", "readwrite", "write"):
                return mm
        obj = getattr(obj, "base", None)
    return None


def release(mm: "mmap.mmap") -> None:
    """Drop the resident pages of a file mapping; the next read faults them back in."""
    try:
        mm.madvise(mmap.MADV_DONTNEED)
    except (AttributeError, OSError, ValueError):
        pass  # a platform without madvise, or a closed map: nothing to release


class _Fixed:
    """A fixed field's samples: an array stacked along axis 0."""

    kind = "fixed"

    def __init__(self, name: str, array: Any, dtype: "np.dtype | None") -> None:
        self.name = name
        self.array = np.asanyarray(array)
        if self.array.ndim < 1:
            raise ValueError(f"field {name!r}: an array of samples needs a sample axis (a 0-d array has none)")
        self.cast_to = dtype
        self.dtype = self.array.dtype if dtype is None else dtype
        self.shape = tuple(int(d) for d in self.array.shape[1:])
        self.sample_bytes = max(1, int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize)
        self.mmap = _backing_mmap(self.array)
        self.at = 0

    def spec(self) -> dict:
        return {"name": self.name, "kind": "fixed", "dtype": self.dtype.str, "shape": list(self.shape)}

    def __len__(self) -> int:
        return len(self.array)

    def take(self, k: int) -> np.ndarray:
        first = self.at
        block = self.array[self.at : self.at + k]
        self.at += len(block)
        per = max(1, int(np.prod(self.shape, dtype=np.int64)))
        return np.ascontiguousarray(cast(self.name, np.asarray(block), self.cast_to, lambda i: first + i // per))

    def release(self) -> None:
        if self.mmap is not None:
            release(self.mmap)


class _Pair:
    """A ragged field as Arrow's list layout: ``(values, offsets)``."""

    kind = "ragged"

    def __init__(self, name: str, values: Any, offsets: Any, dtype: "np.dtype | None") -> None:
        self.name = name
        self.values = np.asanyarray(values)
        self.offsets = np.asarray(offsets)
        if self.values.ndim != 1:
            raise ValueError(f"field {name!r}: ragged values must be 1-D, got shape {self.values.shape}")
        if self.offsets.ndim != 1 or self.offsets.size < 1 or self.offsets.dtype.kind not in "iu":
            raise ValueError(f"field {name!r}: offsets must be a 1-D integer array of n + 1 entries")
        self.cast_to = dtype
        self.dtype = self.values.dtype if dtype is None else dtype
        self.at = 0

    def spec(self) -> dict:
        return {"name": self.name, "kind": "ragged", "dtype": self.dtype.str, "shape": []}

    def __len__(self) -> int:
        return self.offsets.size - 1

    def take(self, k: int) -> "tuple[np.ndarray, np.ndarray]":
        first = self.at
        bounds = self.offsets[self.at : self.at + k + 1].astype(np.int64)
        self.at += bounds.size - 1

        def sample_of(i: int) -> int:
            return first + int(np.searchsorted(bounds, bounds[0] + i, side="right")) - 1

        values = np.ascontiguousarray(cast(self.name, self.values[bounds[0] : bounds[-1]], self.cast_to, sample_of))
        return values, bounds - bounds[0]


def _value_kind(item: Any) -> str:
    if isinstance(item, (bytes, bytearray, memoryview, np.bytes_)):
        return "bytes"
    if isinstance(item, str):
        return "string"
    if isinstance(item, (bool, int, float, np.generic)) or (isinstance(item, np.ndarray) and item.ndim == 0):
        return "scalar"
    return "ragged"


class _Items:
    """A field as a list or iterator of samples: 1-D arrays (a tokenizer's output), ``bytes``
    or ``str`` (variable-length fields), or numbers (Python or numpy scalars, 0-d arrays: a
    fixed field of shape ``()``); the first sample says which."""

    def __init__(self, name: str, items: Iterable, dtype: "np.dtype | None") -> None:
        self.name = name
        self.length = len(items) if hasattr(items, "__len__") else None
        self.items = iter(items)
        try:
            first = next(self.items)
        except StopIteration:
            raise ValueError(f"field {name!r} holds no sample") from None
        self.kind = _value_kind(first)
        self.cast_to = dtype
        self.count = 0
        if self.kind in ("ragged", "scalar"):
            sample = np.asarray(first)
            if self.kind == "scalar" and sample.dtype.kind not in "biuf":
                raise TypeError(f"field {name!r}: sample 0 is a {sample.dtype} scalar; a field holds numbers")
            self.dtype = sample.dtype if dtype is None else dtype
        else:
            if dtype is not None:
                raise TypeError(f"field {name!r} holds {self.kind}: dtype= applies to numeric fields")
            self.dtype = np.dtype(np.uint8)
        self.items = itertools.chain([first], self.items)
        self.done = False

    def spec(self) -> dict:
        kind = "fixed" if self.kind == "scalar" else self.kind
        return {"name": self.name, "kind": kind, "dtype": self.dtype.str, "shape": []}

    def __len__(self) -> int:
        if self.length is None:
            raise TypeError("an iterator has no length")
        return self.length

    def pull(self) -> "np.ndarray | None":
        """The next sample as a 1-D array (bytes and strings as their bytes), or None at the end."""
        if self.done:
            return None
        try:
            item = next(self.items)
        except StopIteration:
            self.done = True
            return None
        k = self.count
        self.count += 1
        kind = _value_kind(item)
        if kind == "bytes" and self.kind == "image":  # zrecord.vision.Images: encoded bytes
            kind = "image"
        if kind != self.kind:
            raise TypeError(
                f"field {self.name!r}: sample {k} is {type(item).__name__}, but sample 0 made it a {self.kind} field"
            )
        if kind == "string":
            try:
                item = item.encode("utf-8")
            except UnicodeEncodeError as e:
                raise ValueError(f"field {self.name!r}: sample {k} is not valid text ({e.reason})") from None
        if kind == "scalar":
            # Each number as the first one's dtype (or dtype=), refused if that changes it
            # (a fraction after integers, a value out of range).
            value = np.asarray(item).reshape(1)
            if value.dtype.kind not in "biuf":
                raise TypeError(f"field {self.name!r}: sample {k} is a {value.dtype} scalar; a field holds numbers")
            return cast(self.name, value, self.dtype, lambda _: k)
        if kind != "ragged":
            return np.frombuffer(item, dtype=np.uint8)
        array = np.asarray(item)
        if array.ndim != 1 or array.dtype.kind not in "biuf":
            raise TypeError(
                f"field {self.name!r}: sample {k} must be a 1-D numeric array (or bytes, or str), "
                f"got {array.dtype} of shape {array.shape}"
            )
        if self.cast_to is None:
            return array.astype(self.dtype, copy=False)
        return cast(self.name, array, self.cast_to, lambda _: k)


def _source(name: str, value: Any, dtype: "np.dtype | None"):
    column = getattr(value, "_zrecord_column", None)
    if column is not None:  # zrecord.vision.Images
        if dtype is not None:
            raise TypeError(f"field {name!r} holds images: dtype= applies to numeric fields")
        return column(name)
    if isinstance(value, tuple) and len(value) == 2 and all(isinstance(v, np.ndarray) for v in value):
        return _Pair(name, *value, dtype)
    if isinstance(value, np.ndarray):
        if value.dtype.hasobject or value.dtype.kind in "SUT":
            if value.ndim != 1:
                raise TypeError(f"field {name!r}: an array of {value.dtype} must be 1-D, got shape {value.shape}")
            return _Items(name, value, dtype)
        if value.dtype.kind not in "biufc" or value.dtype.names is not None:
            raise TypeError(f"field {name!r}: values of dtype {value.dtype} cannot be stored as a field")
        return _Fixed(name, value, dtype)
    if isinstance(value, (str, bytes)):
        raise TypeError(f"field {name!r}: one {type(value).__name__} is not a column; pass a list of them")
    if isinstance(value, Iterable):
        return _Items(name, value, dtype)
    raise TypeError(
        f"field {name!r}: expected an array of samples, a (values, offsets) pair or a list/iterator "
        f"of 1-D arrays, bytes or str, got {type(value).__name__}"
    )


# -- the blocks of a write -------------------------------------------------------------------


class Blocks:
    """The samples of a write as blocks of native columns: ``specs`` (the fields, without
    codecs), ``total`` (samples, None when unknown) and ``__iter__`` (one list of columns per
    block, each column a contiguous array or a ``(values, offsets)`` pair). ``after_block``
    is called once a block is written (drops the pages of memory-mapped inputs)."""

    specs: list
    total: "int | None"

    def after_block(self) -> None:
        pass


def _dtypes(names: Iterable[str], dtype: "Mapping | None") -> dict:
    if dtype is None:
        return {}
    if not isinstance(dtype, Mapping):
        raise TypeError("dtype must be a dict of field names to dtypes, e.g. {'tokens': 'uint16'}")
    names = list(names)
    unknown = sorted(str(k) for k in dtype if k not in names)
    if unknown:
        raise ValueError(f"dtype names fields the write does not have: {unknown} (fields: {sorted(names)})")
    return {str(k): np.dtype(v) for k, v in dtype.items()}


class _DictBlocks(Blocks):
    """``{name: samples}``: arrays, pairs and iterators read in step, ``chunk_bytes`` at a time."""

    def __init__(self, fields: Mapping, chunk_bytes: int, dtype: "Mapping | None") -> None:
        if not fields:
            raise ValueError("a dataset needs at least one field")
        casts = _dtypes(map(str, fields), dtype)
        self.sources = [_source(str(name), value, casts.get(str(name))) for name, value in fields.items()]
        self.specs = [s.spec() for s in self.sources]
        self.chunk_bytes = int(chunk_bytes)
        fixed = [s for s in self.sources if isinstance(s, _Fixed)]
        self.fixed = fixed
        self.step = max(1, self.chunk_bytes // sum(s.sample_bytes for s in fixed)) if fixed else RAGGED_BLOCK
        self.total = None
        try:
            sizes = {s.name: len(s) for s in self.sources}
            if len(set(sizes.values())) > 1:
                raise ValueError(f"the fields hold different numbers of samples: {sizes}")
            self.total = next(iter(sizes.values()))
        except TypeError:
            pass  # an iterator: counted as it is read

    def after_block(self) -> None:
        for s in self.fixed:
            s.release()

    def __iter__(self) -> Iterator[list]:
        sources, total, written = self.sources, self.total, 0
        items = [s for s in sources if isinstance(s, _Items)]
        while True:
            k = self.step if total is None else min(self.step, total - written)
            if k <= 0:
                return
            # Iterators are read first, sample by sample and in step, up to k samples or
            # chunk_bytes of values: their count sets the block's size.
            pulled: dict = {s.name: [] for s in items}
            if items:
                nbytes = 0
                for _ in range(k):
                    row = {s.name: s.pull() for s in items}
                    ended = [name for name, item in row.items() if item is None]
                    if ended:
                        if len(ended) != len(row):
                            raise ValueError(
                                f"the fields hold different numbers of samples: {ended} ended after "
                                f"{written + len(next(iter(pulled.values())))} samples, the others go on"
                            )
                        break
                    for name, item in row.items():
                        pulled[name].append(item)
                        nbytes += item.nbytes
                    if nbytes >= self.chunk_bytes:
                        break
                k = len(next(iter(pulled.values())))
            if k == 0:
                for s in sources:
                    if not isinstance(s, _Items) and s.at < len(s):
                        raise ValueError(
                            f"the fields hold different numbers of samples: the iterators ended after "
                            f"{written}, field {s.name!r} holds {len(s)}"
                        )
                return
            columns = []
            for s in sources:
                if isinstance(s, _Items) and s.kind == "scalar":
                    got = pulled[s.name]
                    columns.append(np.ascontiguousarray(np.concatenate(got) if got else np.empty(0, s.dtype)))
                    continue
                if isinstance(s, _Items):
                    got = pulled[s.name]
                    offsets = np.zeros(len(got) + 1, dtype=np.int64)
                    np.cumsum([item.size for item in got], out=offsets[1:])
                    values = np.concatenate(got) if got else np.empty(0, s.dtype)
                    columns.append((values, offsets))
                    continue
                block = s.take(k)
                n = len(block[1]) - 1 if isinstance(block, tuple) else len(block)
                if n != k:
                    raise ValueError(
                        f"the fields hold different numbers of samples: field {s.name!r} ended after {written + n}"
                    )
                columns.append(block)
            yield columns
            written += k


# -- Arrow -----------------------------------------------------------------------------------


def _arrow_column(name: str, arr: Any, dtype: "np.dtype | None") -> "tuple[dict, Any]":
    """One Arrow array (a record batch's column) as a field spec and a native column."""
    import pyarrow as pa

    t = arr.type
    if arr.null_count:
        row = int(np.argmax(~np.asarray(arr.is_valid())))
        raise ValueError(f"column {name!r} holds a null at row {row}: a field has no nulls (fill or drop them first)")
    if pa.types.is_dictionary(t):
        return _arrow_column(name, arr.dictionary_decode(), dtype)
    if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t):
        values = cast(name, arr.to_numpy(zero_copy_only=False), dtype)
        return {"name": name, "kind": "fixed", "dtype": values.dtype.str, "shape": []}, np.ascontiguousarray(values)
    if pa.types.is_fixed_size_list(t):
        shape, inner = [], arr
        while pa.types.is_fixed_size_list(inner.type):
            shape.append(inner.type.list_size)
            inner = inner.flatten()
            if inner.null_count:
                raise ValueError(f"column {name!r} holds a null inside a list: a field has no nulls")
        if not (pa.types.is_integer(inner.type) or pa.types.is_floating(inner.type) or pa.types.is_boolean(inner.type)):
            raise TypeError(f"column {name!r}: fixed-size lists of {inner.type} cannot be stored as a field")
        values = cast(name, inner.to_numpy(zero_copy_only=False), dtype).reshape(len(arr), *shape)
        return {"name": name, "kind": "fixed", "dtype": values.dtype.str, "shape": shape}, np.ascontiguousarray(values)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        child = arr.values
        ct = child.type
        if not (pa.types.is_integer(ct) or pa.types.is_floating(ct) or pa.types.is_boolean(ct)):
            raise TypeError(f"column {name!r}: lists of {ct} cannot be stored as a field (lists of numbers can)")
        offsets = np.asarray(arr.offsets).astype(np.int64)
        lo, hi = int(offsets[0]), int(offsets[-1])
        if child.slice(lo, hi - lo).null_count:
            raise ValueError(f"column {name!r} holds a null inside a list: a field has no nulls")
        values = cast(name, child.slice(lo, hi - lo).to_numpy(zero_copy_only=False), dtype)
        return {"name": name, "kind": "ragged", "dtype": values.dtype.str, "shape": []}, (
            np.ascontiguousarray(values),
            offsets - lo,
        )
    kind = None
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        kind = "bytes"
    elif pa.types.is_string(t) or pa.types.is_large_string(t):
        kind = "string"
    if kind is None:
        raise TypeError(
            f"column {name!r}: Arrow type {t} cannot be stored as a field (numbers, fixed-size and "
            "variable-size lists of numbers, binary and string can)"
        )
    if dtype is not None:
        raise TypeError(f"column {name!r} holds {kind}: dtype= applies to numeric fields")
    n = len(arr)
    buffers = arr.buffers()
    data = buffers[-1]
    values = np.frombuffer(data, dtype=np.uint8) if data is not None else np.empty(0, np.uint8)
    if pa.types.is_fixed_size_binary(t):
        width = t.byte_width
        offsets = (np.arange(n + 1, dtype=np.int64) + arr.offset) * width
    else:
        wide = pa.types.is_large_binary(t) or pa.types.is_large_string(t)
        raw = np.frombuffer(buffers[1], dtype=np.int64 if wide else np.int32)
        offsets = raw[arr.offset : arr.offset + n + 1].astype(np.int64)
    lo, hi = int(offsets[0]), int(offsets[-1])
    return {"name": name, "kind": kind, "dtype": "|u1", "shape": []}, (values[lo:hi], offsets - lo)


class _ArrowBlocks(Blocks):
    """Arrow record batches, each cut to about ``chunk_bytes``."""

    def __init__(self, batches: Iterator, schema: Any, total: "int | None", chunk_bytes: int, dtype) -> None:
        self.names = [str(n) for n in schema.names]
        if not self.names:
            raise ValueError("a dataset needs at least one field")
        self.casts = _dtypes(self.names, dtype)
        self.total = total
        self.chunk_bytes = max(1, int(chunk_bytes))
        self.batches = iter(batches)
        self.first = None
        self.specs = None
        # The specs come from the first non-empty batch (a column's kind is its type's).
        for batch in self.batches:
            if batch.num_rows:
                self.first = batch
                self.specs = [spec for spec, _ in self._columns(batch.slice(0, 1))]
                break
        if self.specs is None:
            raise ValueError("the table holds no rows: a dataset needs at least one sample")

    def _columns(self, batch: Any) -> list:
        return [_arrow_column(name, batch.column(i), self.casts.get(name)) for i, name in enumerate(self.names)]

    def __iter__(self) -> Iterator[list]:
        for batch in itertools.chain([self.first], self.batches):
            if batch.num_rows == 0:
                continue
            if [str(n) for n in batch.schema.names] != self.names:
                raise ValueError(f"a record batch has columns {batch.schema.names}, the first had {self.names}")
            rows = batch.num_rows
            step = max(1, self.chunk_bytes * rows // max(1, batch.nbytes))
            for start in range(0, rows, step):
                yield [column for _, column in self._columns(batch.slice(start, step))]


def _arrow_batches(data: Any) -> "tuple[Iterator, Any, int | None] | None":
    """``data`` as Arrow record batches, its schema and its row count, when it is Arrow or
    a Hugging Face dataset; None otherwise."""
    module = type(data).__module__ or ""
    if module.startswith("datasets"):
        if not hasattr(data, "with_format") or not hasattr(data, "features"):
            raise TypeError(f"{type(data).__name__} cannot be written (a datasets.Dataset can; stream it as batches)")
        table_iter = data.with_format("arrow").iter(batch_size=8192)
        tables = iter(table_iter)
        first = next(tables, None)
        if first is None:
            raise ValueError("the Hugging Face dataset holds no rows: a dataset needs at least one sample")
        batches = (b for t in itertools.chain([first], tables) for b in t.to_batches())
        return batches, first.schema, len(data)
    if not module.startswith("pyarrow"):
        return None
    import pyarrow as pa

    if isinstance(data, pa.Table):
        return iter(data.to_batches()), data.schema, data.num_rows
    if isinstance(data, pa.RecordBatch):
        return iter([data]), data.schema, data.num_rows
    if isinstance(data, pa.RecordBatchReader):
        return iter(data), data.schema, None
    raise TypeError(f"{type(data).__name__} cannot be written: pass a pyarrow Table, RecordBatch or RecordBatchReader")


def blocks(data: Any, chunk_bytes: int, dtype: "Mapping | None" = None) -> Blocks:
    """The blocks of ``Dataset.write(path, data)`` for named fields: a dict of fields, a
    pandas DataFrame, a pyarrow Table / RecordBatch / RecordBatchReader, an iterator of
    record batches, or a Hugging Face ``datasets.Dataset`` (see the module docs)."""
    if isinstance(data, Mapping):
        return _DictBlocks(data, chunk_bytes, dtype)
    module = type(data).__module__ or ""
    if module.startswith("pandas") and hasattr(data, "columns"):
        return _DictBlocks({str(c): _pandas_values(str(c), data[c]) for c in data.columns}, chunk_bytes, dtype)
    arrow = _arrow_batches(data)
    if arrow is not None:
        return _ArrowBlocks(*arrow, chunk_bytes, dtype)
    if isinstance(data, Iterator):
        # An iterator of record batches: its first says the schema.
        first = next(data, None)
        if first is None or not (type(first).__module__ or "").startswith("pyarrow"):
            raise TypeError("an iterator of named fields must yield pyarrow RecordBatches")
        return _ArrowBlocks(itertools.chain([first], data), first.schema, None, chunk_bytes, dtype)
    raise TypeError(f"cannot write {type(data).__name__} as named fields")


def column_blocks(name: str, values: Any, chunk_bytes: int, dtype: Any = None) -> Blocks:
    """The blocks of one field's samples (``Dataset.add_field``): anything a dict entry
    may be, a pandas ``Series``, or a pyarrow ``Array`` / ``ChunkedArray``."""
    cast_to = None if dtype is None else {name: dtype}
    module = type(values).__module__ or ""
    if module.startswith("pyarrow") and hasattr(values, "type"):
        import pyarrow as pa

        return blocks(pa.table({name: values}), chunk_bytes, cast_to)
    if module.startswith("pandas") and hasattr(values, "to_frame"):
        return blocks(values.to_frame(name), chunk_bytes, cast_to)
    return _DictBlocks({name: values}, chunk_bytes, cast_to)


def _pandas_values(name: str, column: Any) -> Any:
    """A DataFrame column's values, refusing missing ones."""
    if column.isna().any():
        row = int(np.argmax(column.isna().to_numpy()))
        raise ValueError(f"column {name!r} holds a missing value at row {row}: a field has none (fill or drop them)")
    if str(column.dtype) == "category":
        column = column.astype(column.cat.categories.dtype)
    values = column.to_numpy()
    if values.dtype.kind == "O" and len(values) and isinstance(values[0], (list, tuple)):
        return [np.asarray(v) for v in values]
    return values


def block(batch: Mapping[str, Any]) -> "tuple[list, list[dict]]":
    """One in-memory batch (a Ray Data numpy batch: ``{name: array}``) as native columns and
    field specs (without codecs), by the same rule as ``Dataset.write``."""
    b = _DictBlocks(batch, 1 << 62, None)
    columns = next(iter(b), None)
    if columns is None:
        raise ValueError("an empty batch")
    return columns, b.specs
