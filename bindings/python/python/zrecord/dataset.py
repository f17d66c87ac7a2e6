"""NumPy-shaped datasets over a zrecord store.

A store holds raw byte records; a dataset adds the one piece of metadata that makes them
tensors: ``schema.json`` inside the store directory, naming the per-sample dtype and shape.
The file is written byte for byte as loaderx 0.5.4 writes it, so loaderx and zrecord read
and append to each other's datasets.

Reads decode straight into the output array; there is no staging copy. Batch arrays come
from a small per-dataset pool (:data:`POOL_ARRAYS`, :data:`POOL_BYTES`): an array is reused
only once nothing but the pool refers to it (no caller variable, view, memoryview or tensor
made from it), so a caller never sees a batch it still holds overwritten, and a training
loop that drops each batch gets warm, already-mapped memory instead of paying the page
faults of a fresh multi-megabyte allocation per batch.
"""

from __future__ import annotations

import json
import mmap
import operator
import os
import sys
import threading
from pathlib import Path
from typing import Any, Union

import numpy as np

from ._progress import Progress, reporter
from . import _zrecord
from ._zrecord import MAX_RECORD_LEN, Zrecord
from .errors import IndexOutOfRangeError, StoreClosedError

__all__ = ["Dataset", "SCHEMA", "FORMAT", "WRITE_CHUNK_BYTES", "POOL_ARRAYS", "POOL_BYTES"]

#: File name of the schema inside a dataset directory.
SCHEMA = "schema.json"
#: The schema's ``format`` value.
FORMAT = "loaderx-zrecord"
#: Default upper bound on the source bytes handed to one append by ``Dataset.write``.
WRITE_CHUNK_BYTES = 64 << 20

#: Most batch arrays one dataset keeps for reuse, and the most bytes they may hold in all.
POOL_ARRAYS = 8
POOL_BYTES = 256 << 20
#: Batches smaller than this are not pooled: malloc serves them from warm memory anyway.
POOL_MIN_BYTES = 256 << 10

#: Codec name -> on-disk tag, from the core's codec list: "raw" 0 and "flate" 1 as in
#: loaderx, and "zstd" 2, which loaderx 0.5.4 cannot read.
CODECS = dict(_zrecord.CODECS)

PathLike = Union[str, "os.PathLike[str]"]


def _check_codec(codec: str) -> None:
    if codec not in CODECS:
        raise ValueError(f"unknown codec {codec!r}, expected one of {sorted(CODECS)}")


class Dataset:
    """A dataset of equally shaped samples, one zrecord record per sample.

    ``Dataset(path)`` opens the dataset in directory ``path`` (written by
    :meth:`Dataset.write`, here or by loaderx). Attributes: ``path`` (a ``Path``), ``dtype``,
    ``shape`` (of one sample) and ``codec``.

    Indexing follows numpy on an array of shape ``(len(ds), *shape)``; every form is a
    gather of the samples it names, decoded straight into the result:

    - ``ds[i]`` (an int, numpy integer or 0-d integer array; negative counts from the end)
      is one sample, shaped ``shape``;
    - ``ds[slice]``, ``ds[bool_mask]`` (1-D, ``len(ds)`` long) are batches ``(k, *shape)``;
    - ``ds[idx]`` for an integer list or array of any shape (negatives count from the end)
      is shaped ``idx.shape + shape``;
    - ``ds[first, *rest]`` selects samples with ``first`` and applies ``rest`` to them, as
      numpy does (``ds[0, 1]`` is ``ds[0][1]``).

    What numpy would do but this cannot do cheaply (``None`` or ``...`` before the sample
    axis, a boolean scalar, a mask of another shape) is an ``IndexError``; an index out of
    range is an ``IndexOutOfRangeError`` (an ``IndexError``, code -3) naming the index as
    given.

    Opening reads ``schema.json`` and opens the existing store without creating anything.
    ``verify`` ("auto", "always" or "never", as for :class:`Zrecord`) sets when reads, and
    DataLoaders over this dataset, check each sample's checksum (a sample that fails is
    never handed out).

    Raises:
        FileNotFoundError: ``path`` holds no ``schema.json``.
        ValueError: the schema is not a ``loaderx-zrecord`` schema.
        FormatError: ``path`` has a schema but no zrecord store.
    """

    path: Path
    dtype: np.dtype
    shape: tuple[int, ...]
    codec: str

    def __init__(self, path: PathLike, *, verify: str = "auto") -> None:
        self.path = Path(path)
        schema_path = self.path / SCHEMA
        if not schema_path.is_file():
            raise FileNotFoundError(f"{schema_path} not found; {self.path} is not a loaderx dataset")
        schema = json.loads(schema_path.read_text())
        if not isinstance(schema, dict) or schema.get("format") != FORMAT:
            raise ValueError(f"{schema_path} is not a {FORMAT} schema")
        self.dtype = np.dtype(schema["dtype"])
        self.shape = tuple(int(d) for d in schema["shape"])
        self.codec = schema["codec"]
        _check_codec(self.codec)
        self._itemsize = int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize
        self._store: Zrecord | None = Zrecord(self.path, codec=self.codec, create=False, verify=verify)
        self._pool: list[np.ndarray] = []
        self._pool_lock = threading.Lock()

    # -- reading ---------------------------------------------------------------------------

    @property
    def store(self) -> Zrecord:
        """The underlying :class:`Zrecord` (raises ``StoreClosedError`` once closed)."""
        if self._store is None:
            raise StoreClosedError("dataset is closed")
        return self._store

    def __len__(self) -> int:
        """Number of samples."""
        return len(self.store)

    @property
    def generation(self) -> int:
        """The store's :attr:`Zrecord.generation`: changes when samples are deleted or
        compacted, or appended (compare for equality only)."""
        return self.store.generation

    def __getitem__(self, idx: Any) -> np.ndarray:
        """Numpy indexing over the samples (see the class docs)."""
        if isinstance(idx, tuple):
            if not idx:
                return self[:]
            first, rest = idx[0], idx[1:]
            if first is None or first is Ellipsis:
                raise IndexError(
                    "None or ... before the sample axis is not supported; select samples first, "
                    "e.g. ds[:][None] or ds[:][..., 0]"
                )
            if not rest:
                return self[first]
            if _is_integer(first):
                # The sample, given back its axis: numpy then applies (0, *rest) to it exactly
                # as it applies (first, *rest) to the whole array.
                return self[first][np.newaxis][(0, *rest)]
            batch, positions = self._select(first)
            return batch[(positions, *rest)]
        if _is_integer(idx):
            return self._one(idx)
        batch, positions = self._select(idx)
        if isinstance(positions, slice):
            return batch
        return batch.reshape(positions.shape + self.shape)

    def _one(self, idx: Any) -> np.ndarray:
        i = operator.index(idx)
        n = len(self.store)
        if not -n <= i < n:
            raise IndexOutOfRangeError(f"index {i} is out of range for a dataset of {n} samples")
        return self.__getitems__([i % n])[0]

    def _select(self, idx: Any) -> "tuple[np.ndarray, Any]":
        """The samples ``idx`` (a slice, mask or integer array) names, gathered into a
        ``(k, *shape)`` batch, and the index into that batch that stands for ``idx``."""
        n = len(self.store)
        if isinstance(idx, slice):
            return self.__getitems__(np.arange(*idx.indices(n))), slice(None)
        arr = np.asarray(idx)
        if arr.dtype == np.bool_:
            if arr.shape != (n,):
                raise IndexError(f"boolean index of shape {arr.shape} does not match a dataset of {n} samples")
            flat = np.flatnonzero(arr)
            return self.__getitems__(flat), np.arange(flat.size)
        if arr.size == 0 and arr.dtype.kind == "f":
            arr = arr.astype(np.intp)  # [] is an empty integer index to numpy
        if arr.dtype.kind not in "iu":
            raise IndexError(f"arrays used as indices must be of integer (or boolean) type, not {arr.dtype}")
        return self.__getitems__(arr.reshape(-1)), np.arange(arr.size).reshape(arr.shape)

    def __getitems__(self, idxs: Any) -> np.ndarray:
        """The samples at ``idxs``, as an array shaped ``(len(idxs), *self.shape)``.

        loaderx's (and torch's) batch protocol: ``idxs`` is flattened, a boolean mask must
        be ``len(self)`` long. The array is allocated once and every record decodes straight
        into its slot. Negative indices count from the end; an index out of range raises
        ``IndexOutOfRangeError`` (code -3) naming it.
        """
        store = self.store
        idxs = np.asarray(idxs)
        # A boolean mask selects; cast to integers it would read records 0 and 1.
        if idxs.dtype == np.bool_:
            if idxs.shape != (len(store),):
                raise IndexError(f"boolean mask of shape {idxs.shape} does not match a dataset of {len(store)}")
            idxs = np.flatnonzero(idxs)
        idxs = _wrap_negative(idxs.reshape(-1), store)
        out = self._batch_array(idxs.size)
        store.gather(idxs, out, self._itemsize)
        return out

    def _batch_array(self, k: int) -> np.ndarray:
        """An array for ``k`` samples: a pooled one nobody else refers to, or a new one
        (pooled if there is room). Every byte of it is overwritten by the gather."""
        nbytes = k * self._itemsize
        if nbytes < POOL_MIN_BYTES:
            return np.empty((k, *self.shape), dtype=self.dtype)
        shape = (k, *self.shape)
        if nbytes > POOL_BYTES // 2:
            return _page_aligned(shape, self.dtype, nbytes)
        with self._pool_lock:
            pool = self._pool
            for i in range(len(pool)):
                # Free when nothing but the pool refers to it: any other reference (a
                # caller's name, a view, a memoryview or tensor over it) means a consumer
                # may still read it.
                if _only_pooled(pool, i) and pool[i].shape == shape and pool[i].flags.writeable:
                    return pool[i]
            arr = _page_aligned(shape, self.dtype, nbytes)
            held = sum(a.nbytes for a in pool)
            if len(pool) < POOL_ARRAYS and held + nbytes <= POOL_BYTES:
                pool.append(arr)
            else:
                # Full: a free array of another shape makes room, if there is one.
                for i in range(len(pool)):
                    if _only_pooled(pool, i) and held - pool[i].nbytes + nbytes <= POOL_BYTES:
                        pool[i] = arr
                        break
            return arr
            arr = np.empty(shape, dtype=self.dtype)
            held = sum(a.nbytes for a in pool)
            if len(pool) < POOL_ARRAYS and held + nbytes <= POOL_BYTES:
                pool.append(arr)
            else:
                # Full: drop a free array of another shape to make room, if there is one.
                for i, old in enumerate(pool):
                    if sys.getrefcount(old) == _FREE_REFS + 1 and old.shape != shape:
                        if held - old.nbytes + nbytes <= POOL_BYTES:
                            pool[i] = arr
                        break
                old = None
            return arr

    def __iter__(self):
        """Samples in index order."""
        for i in range(len(self)):
            yield self[i]

    # -- writing ---------------------------------------------------------------------------

    @classmethod
    def write(
        cls,
        path: PathLike,
        array: Any,
        codec: str = "flate",
        chunk_bytes: int = WRITE_CHUNK_BYTES,
        progress: Progress = False,
        min_savings: float | None = None,
    ) -> "Dataset":
        """Persist ``array`` as a dataset, one record per slice along axis 0.

        A 1-D array becomes a dataset of scalars (the usual label set). The array is read
        in blocks of at most ``chunk_bytes``, so an ``np.load(..., mmap_mode="r")`` array is
        never read into memory whole. If ``path`` already holds a dataset of the same
        per-sample dtype and shape, the samples are appended to it (in its codec).

        The write is all or nothing: the blocks are staged (:meth:`Zrecord.stage`) and
        committed once at the end, so readers see every new sample at once, and a write that
        fails or is interrupted (an exception, ``KeyboardInterrupt``, a crash) adds none of
        them: running it again does not duplicate part of the first attempt.

        Args:
            path: destination directory (created if missing).
            array: samples stacked along axis 0.
            codec: "flate" (compressed; records that do not shrink by ``min_savings`` are
                stored raw), "raw", or "zstd" (compressed the same way, faster to read, but
                loaderx 0.5.4 cannot read a zstd dataset).
            chunk_bytes: upper bound on the source bytes compressed and written at a time.
            progress: ``True`` for a tqdm bar (when tqdm is installed; otherwise none), or a
                ``callable(done, total)`` called after each block, in samples.
            min_savings: the least fraction of a sample compression must save for it to be
                stored compressed (default ``zrecord.DEFAULT_MIN_SAVINGS``, 0.125; 0.0 keeps
                any saving, as loaderx does). Raw samples in a flate dataset read as any
                other, loaderx 0.5.4 included; see ``docs/codecs.md`` for the trade.

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
        _check_codec(codec)
        if min_savings is not None and not 0.0 <= float(min_savings) <= 1.0:
            raise ValueError(f"min_savings must be a fraction between 0.0 and 1.0, got {min_savings}")
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
        path.mkdir(parents=True, exist_ok=True)
        schema = {"format": FORMAT, "version": 1, "dtype": dtype.str, "shape": list(shape), "codec": codec}
        schema_path = path / SCHEMA
        if schema_path.is_file():
            existing = json.loads(schema_path.read_text())
            if not isinstance(existing, dict) or existing.get("format") != FORMAT:
                raise ValueError(f"{schema_path} is not a {FORMAT} schema")
            found = (existing.get("dtype"), tuple(existing.get("shape", ())))
            if found != (dtype.str, shape):
                raise ValueError(f"{path} holds {found[0]}{found[1]} records, cannot append {dtype.str}{shape}")
            schema = existing
        else:
            schema_path.write_text(json.dumps(schema, indent=2) + "\n")

        step = max(1, int(chunk_bytes) // max(itemsize, 1))
        source_map = _backing_mmap(array)
        total = len(array)
        with reporter(progress, "write", "sample") as report, Zrecord(path, codec=schema["codec"]) as store:
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
                    store.stage(block, len(block), itemsize, **append_kw)
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
        return cls(path)

    # -- maintenance -----------------------------------------------------------------------

    def delete(self, idxs: Any) -> None:
        """Remove samples, keeping the index space dense.

        ``len(self)`` shrinks and the survivors stay addressable as ``0..len(self)``; the
        tail moves into each hole, so surviving samples may change index. The bytes stay on
        disk until :meth:`compact`. Needs exclusive access: raises ``LockedError`` (-9)
        while a DataLoader or another handle uses the store.

        ``idxs`` are non-negative indices (a negative one is ``IndexOutOfRangeError``: a
        delete does not guess) or a boolean mask ``len(self)`` long (another length is an
        ``IndexError``, as in indexing).
        """
        store = self.store
        idxs = np.asarray(idxs)
        if idxs.dtype == np.bool_:
            if idxs.shape != (len(store),):
                raise IndexError(f"boolean mask of shape {idxs.shape} does not match a dataset of {len(store)}")
            idxs = np.flatnonzero(idxs)
        store.delete(idxs)

    def compact(self, progress: Progress = False) -> None:
        """Reclaim the space left by :meth:`delete`, in place (needs exclusive access).

        ``progress``: ``True`` for a tqdm bar (when tqdm is installed), or a
        ``callable(done, total)``, in records visited.
        """
        store = self.store
        with reporter(progress, "compact") as report:
            store.compact(report)

    def stats(self) -> dict:
        """Storage usage; see :meth:`Zrecord.stats`."""
        return self.store.stats()

    # -- lifetime --------------------------------------------------------------------------

    def close(self) -> None:
        """Close the underlying store. Idempotent."""
        store, self._store = getattr(self, "_store", None), None
        self._pool = []
        if store is not None:
            store.close()

    def __enter__(self) -> "Dataset":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __reduce__(self):
        # Reopen by path in the receiving process (spawned DataLoader workers and the like).
        return (type(self), (str(self.path),))

    def __repr__(self) -> str:
        state = "closed" if self._store is None else f"{len(self._store)} samples"
        return f"Dataset({str(self.path)!r}, dtype={self.dtype.str!r}, shape={self.shape}, codec={self.codec!r}, {state})"


_PAGE = mmap.PAGESIZE


def _page_aligned(shape: tuple, dtype: np.dtype, nbytes: int) -> np.ndarray:
    """An uninitialised array whose data starts on a page boundary.

    malloc puts a large block's data 16 bytes past a page boundary. Records in a chunk file
    start at offsets that are often multiples of 4 KiB, so copying them into such a block
    puts every store 16 bytes (mod 4 KiB) ahead of the loads that follow it, and the CPU
    stalls each load on a store it only appears to depend on ("4K aliasing"): gathers into
    those blocks measured up to 2x slower than into page-aligned ones.

    The array is a view: its ``.base`` is the over-allocated block, and numpy points the
    ``.base`` of every further view at that block too, which :func:`_only_pooled` checks.
    """
    raw = np.empty(nbytes + _PAGE, np.uint8)
    start = -raw.ctypes.data % _PAGE
    return raw[start : start + nbytes].view(dtype).reshape(shape)


def _pool_refs(pool: list, i: int) -> "tuple[int, int]":
    arr = pool[i]
    return sys.getrefcount(arr), sys.getrefcount(arr.base)


def _only_pooled(pool: list, i: int) -> bool:
    """True if ``pool[i]`` and the block under it have no reference but the pool's: a
    view of the array refers to the block (numpy collapses view chains to the owner), a
    memoryview or tensor to the array itself."""
    return _pool_refs(pool, i) == _FREE_REFS


# The counts `_pool_refs` sees on an array only a list holds, measured rather than
# assumed, so an interpreter that counts references differently still gets the right
# baseline.
_FREE_REFS = _pool_refs([_page_aligned((1,), np.dtype(np.uint8), 1)], 0)


def _is_integer(idx: Any) -> bool:
    """An index numpy treats as one integer: int, numpy integer, 0-d integer array, or any
    ``__index__`` object; never a bool."""
    if isinstance(idx, (bool, np.bool_)):
        return False
    if isinstance(idx, np.ndarray):
        return idx.ndim == 0 and idx.dtype.kind in "iu"
    return isinstance(idx, (int, np.integer)) or (
        not isinstance(idx, (list, tuple, slice)) and hasattr(type(idx), "__index__")
    )


def _wrap_negative(idxs: np.ndarray, store: Zrecord) -> np.ndarray:
    """``idxs`` with negative indices counted from the end of ``store``; one below
    ``-len(store)`` is an ``IndexOutOfRangeError`` naming it as given."""
    if idxs.size == 0 or idxs.dtype.kind != "i" or idxs.min() >= 0:
        return idxs
    n = len(store)
    below = idxs < -n
    if below.any():
        bad = int(idxs[np.argmax(below)])
        raise IndexOutOfRangeError(f"index {bad} is out of range for a dataset of {n} samples")
    return np.where(idxs < 0, idxs + n, idxs)


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


def _release(mm: "mmap.mmap") -> None:
    """Drop the resident pages of a file mapping; the next read faults them back in."""
    try:
        mm.madvise(mmap.MADV_DONTNEED)
    except (AttributeError, OSError, ValueError):
        pass  # a platform without madvise, or a closed map: nothing to release
