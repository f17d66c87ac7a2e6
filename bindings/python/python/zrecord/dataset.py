"""NumPy-shaped datasets over a zrecord store.

A store holds raw byte records; a dataset adds the one piece of metadata that makes them
tensors: ``schema.json`` inside the store directory, naming the per-sample dtype and shape.
The file is written byte for byte as loaderx 0.5.4 writes it, so loaderx and zrecord read
and append to each other's datasets.

Reads decode straight into the output array; there is no staging copy. A batch's memory
comes from the store handle's batch pool, the same native pool the DataLoader's batches use:
it goes back to the pool only once the array and every view, memoryview or tensor made from
it are gone, so a caller never sees a batch it still holds overwritten, and a training loop
that drops each batch gets warm, already-mapped memory instead of paying the page faults
of a fresh multi-megabyte allocation per batch.
"""

from __future__ import annotations

import errno
import json
import operator
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from ._progress import Progress, reporter
from . import _write, _zrecord
from ._write import WRITE_CHUNK_BYTES, PathLike
from ._zrecord import Zrecord
from .errors import ChecksumError, DecodeError, IndexOutOfRangeError, StoreClosedError, StoreIOError
from .sampler import check_seed

__all__ = ["Dataset", "Field", "SCHEMA", "FORMAT", "WRITE_CHUNK_BYTES"]


class Field(NamedTuple):
    """One field of a dataset: ``name``, ``kind`` ("fixed", "ragged", "bytes", "string" or
    "image"), ``dtype`` of an element (``uint8`` for bytes, string and image), ``shape`` of
    a fixed sample (``()`` otherwise) and ``codec``."""

    name: str
    kind: str
    dtype: np.dtype
    shape: tuple
    codec: str

    @classmethod
    def _from(cls, d: dict) -> "Field":
        return cls(d["name"], d["kind"], np.dtype(d["dtype"]), tuple(int(x) for x in d["shape"]), d["codec"])

    @property
    def ragged(self) -> bool:
        return self.kind == "ragged"



#: File name of the schema inside a dataset directory.
SCHEMA = "schema.json"
#: The schema's ``format`` value.
FORMAT = "loaderx-zrecord"



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

    def __init__(
        self,
        path: PathLike,
        *,
        verify: str = "auto",
        read_only: "bool | None" = None,
        storage_options: "dict[str, str] | None" = None,
        cache_bytes: "int | None" = None,
        cache_dir: "PathLike | None" = None,
    ) -> None:
        remote = isinstance(path, str) and _zrecord._is_url(path)
        # A URL stays a string: a Path would fold its "//".
        self.path = path.rstrip("/") if remote else Path(path)
        self._verify = verify
        self._read_only_arg = read_only
        self._storage_options = storage_options
        self._cache_bytes = cache_bytes
        self._cache_dir = cache_dir
        self._split: "tuple | None" = None  # (fractions, seed, k, name) of a split (zrecord.split)
        try:
            native = self._open_native()
        except StoreIOError as e:
            if e.errno == errno.ENOENT:
                raise FileNotFoundError(str(e)) from None
            raise
        self.fields: "tuple[Field, ...]" = tuple(Field._from(f) for f in native.fields)
        if native.has_manifest or remote:
            # Named fields over shards, or anything pushed to an object store (a pushed
            # loaderx store reads as one field, "data"): every read goes through the
            # native dataset.
            self._native = native
            self._pid = os.getpid()
            self._store: Zrecord | None = None
            return
        # One loaderx store: indexing gives arrays, as loaderx does. The store is reopened on
        # its own (writable where allowed) so that delete and compact can have it alone.
        native.close()
        self._native = None
        (field,) = self.fields
        self.dtype, self.shape, self.codec = field.dtype, field.shape, field.codec
        self._itemsize = int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize
        self._store = _zrecord.open_dataset_store(self.path, self.codec, read_only=read_only, verify=verify)

    @property
    def read_only(self) -> bool:
        """True when this handle cannot change the dataset (asked for, or the files are not
        writable by this process: another owner, ``chmod -w``, a read-only mount)."""
        if self._native is not None:
            return True
        return self.store.read_only

    @property
    def is_remote(self) -> bool:
        """True for a dataset read from an object store (``Dataset("s3://...")``)."""
        return self._native is not None and self._native.is_remote

    def remote_stats(self) -> "dict | None":
        """What reading this dataset from an object store cost so far: ``{"requests",
        "bytes", "retries", "hits", "disk_hits", "disk_bytes", "most_in_flight",
        "stalls"}`` (GET requests sent, bytes received, requests sent again after a
        transient failure, reads served from bytes already fetched, ranges and bytes served
        from ``cache_dir``, the most requests in flight at once (at most 2048 in a process), and reads
        that waited over 5 ms for bytes still on their way: a loader held up by the
        network); None for a local dataset.

        The cache: ``Dataset(url, cache_bytes=N)`` keeps up to N bytes of records in memory
        (1 GiB by default); with ``cache_dir=DIR`` up to N bytes (16 GiB by default) on
        local disk there, found again by the next run, and at most 1 GiB in memory. A
        DataLoader in SEQUENTIAL or SHUFFLE mode tells the cache when each record is read
        next, and it drops what is needed furthest ahead. Processes may share a cache
        directory (DataLoader workers, ranks on one machine): each reads what any fetched."""
        if self._native is None:
            return None
        return self._live().remote_stats()

    @property
    def is_multi_field(self) -> bool:
        """True for a dataset of named fields (a ``dataset.json`` manifest); False for one
        loaderx store, whose samples are plain arrays."""
        return self._native is not None

    @property
    def metadata(self) -> dict:
        """The dataset card its writer gave (``Dataset.write(..., metadata={...})``): a dict,
        empty when none was given and for a single loaderx store. Kept in ``dataset.json``,
        so a pushed or pulled dataset has it too."""
        if self._native is None:
            return {}
        text = self._native.metadata_json
        return {} if text is None else json.loads(text)

    @property
    def shards(self) -> int:
        """Number of shards (1 for a single store)."""
        return self._native.shards if self._native is not None else 1

    # -- reading ---------------------------------------------------------------------------

    @property
    def store(self) -> Zrecord:
        """The underlying :class:`Zrecord` of a single-store dataset (raises
        ``StoreClosedError`` once closed, ``TypeError`` for a multi-field dataset, whose
        stores are :meth:`field_store`)."""
        if self._native is not None:
            raise TypeError(f"{self.path} is a dataset of named fields over shards: it has no single store")
        if self._store is None:
            raise StoreClosedError("dataset is closed")
        return self._store

    def field_store(self, field: str, shard: int = 0) -> Zrecord:
        """The store of ``field`` in shard ``shard`` of a multi-field dataset (read-only)."""
        return self._live().store(shard, self._field_index(field))

    def _loader_native(self):
        """The native dataset a DataLoader reads (a single store opens as field "data")."""
        if self._native is not None:
            return self._live()
        self.store  # noqa: B018 (the property raises once the dataset is closed)
        return _zrecord._Dataset(self.path, read_only=True, verify=self._verify, warn=False)

    def _live(self):
        if getattr(self, "_native_closed", False) or self._native is None:
            raise StoreClosedError("dataset is closed")
        if self._pid != os.getpid() and self._native.is_remote:
            self._reopen_after_fork()
        return self._native

    def _reopen_after_fork(self) -> None:
        """A remote dataset used in a forked child (torch's DataLoader workers fork by
        default on Linux): the parent's connections, requests in flight and cache are not
        this process's, and reads waited on them forever. The child opens the dataset again
        from its URL, as a spawned worker does (``__reduce__``)."""
        # Dropped, the parent's handle would wait for requests that never finish here.
        _FORKED_AWAY.append(self._native)
        self._native = self._open_native()
        self._pid = os.getpid()

    def _open_native(self):
        """The native dataset for the arguments this one was made with (a split of it, for a
        split)."""
        native = _zrecord._Dataset(
            self.path, read_only=self._read_only_arg, verify=self._verify, storage_options=self._storage_options,
            cache_bytes=self._cache_bytes, cache_dir=self._cache_dir,
        )
        split = getattr(self, "_split", None)
        if split is not None:
            fractions, seed, k, _ = split
            native = native.split(list(fractions), seed)[k]
        return native

    def _field_index(self, name: str) -> int:
        for i, f in enumerate(self.fields):
            if f.name == name:
                return i
        raise KeyError(f"{self.path} has no field {name!r}; its fields are {[f.name for f in self.fields]}")

    def __len__(self) -> int:
        """Number of samples."""
        if self._native is not None:
            return len(self._live())
        return len(self.store)

    @property
    def generation(self) -> int:
        """The store's :attr:`Zrecord.generation`: changes when samples are deleted or
        compacted, or appended (compare for equality only). For a multi-field dataset, every
        store's generation combined."""
        if self._native is not None:
            return self._live().id[1]
        return self.store.generation

    def __getitem__(self, idx: Any) -> Any:
        """Numpy indexing over the samples (see the class docs)."""
        if self._native is not None:
            return self._fields_item(idx)
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
        if self._native is not None:
            return self._fields_batch(idxs)
        store = self.store
        idxs = np.asarray(idxs)
        # A boolean mask selects; cast to integers it would read records 0 and 1.
        if idxs.dtype == np.bool_:
            if idxs.shape != (len(store),):
                raise IndexError(f"boolean mask of shape {idxs.shape} does not match a dataset of {len(store)}")
            idxs = np.flatnonzero(idxs)
        idxs = _wrap_negative(idxs.reshape(-1), len(store))
        try:
            return store._gather_batch(idxs, self._itemsize, self.dtype, self.shape)
        except (ChecksumError, DecodeError) as e:
            # One loaderx store reads as the field "data", as a DataLoader names it.
            if getattr(e, "field", None) is None:
                e.field = "data"
            raise

    def _fields_item(self, idx: Any) -> dict:
        """``ds[idx]`` of a multi-field dataset: one sample as a dict for an integer, a
        batch dict (see :meth:`__getitems__`) for a slice, mask or integer array."""
        n = len(self)
        if isinstance(idx, tuple):
            raise IndexError("a multi-field dataset takes one index (an integer, slice, mask or integer array); "
                             "index the fields of the result instead")
        if _is_integer(idx):
            i = operator.index(idx)
            if not -n <= i < n:
                raise IndexOutOfRangeError(f"index {i} is out of range for a dataset of {n} samples")
            batch = self._fields_batch([i % n])
            return {name: (value[0] if not isinstance(value, list) else value[0]) for name, value in batch.items()}
        if isinstance(idx, slice):
            return self._fields_batch(np.arange(*idx.indices(n)))
        return self._fields_batch(idx)

    def _fields_batch(self, idxs: Any) -> dict:
        """A batch of a multi-field dataset: a fixed field is one ``(k, *shape)`` array; a
        ragged field a list of ``k`` 1-D arrays (views of one buffer); a bytes field a list
        of ``bytes``, a string field a list of ``str``."""
        native = self._live()
        n = len(native)
        idxs = np.asarray(idxs)
        if idxs.dtype == np.bool_:
            if idxs.shape != (n,):
                raise IndexError(f"boolean mask of shape {idxs.shape} does not match a dataset of {n} samples")
            idxs = np.flatnonzero(idxs)
        if idxs.size == 0 and idxs.dtype.kind == "f":
            idxs = idxs.astype(np.intp)
        if idxs.dtype.kind not in "iu":
            raise IndexError(f"arrays used as indices must be of integer (or boolean) type, not {idxs.dtype}")
        idxs = _wrap_negative(idxs.reshape(-1), n)
        if native.is_remote:
            native.will_read(idxs)  # every field's requests at once: one round trip
        out: dict = {}
        for i, f in enumerate(self.fields):
            if f.kind in ("bytes", "string", "image"):
                values, offsets = native.gather_ragged(i, idxs)
                raw = values.tobytes()
                items = [raw[offsets[k] : offsets[k + 1]] for k in range(idxs.size)]
                # UTF-8 checked when written and when read (the native gather).
                out[f.name] = [b.decode() for b in items] if f.kind == "string" else items
            elif f.ragged:
                values, offsets = native.gather_ragged(i, idxs)
                flat = values.view(f.dtype)
                bounds = offsets // f.dtype.itemsize
                out[f.name] = [flat[bounds[k] : bounds[k + 1]] for k in range(idxs.size)]
            else:
                arr = np.empty((idxs.size, *f.shape), dtype=f.dtype)
                native.gather(i, idxs, arr)
                out[f.name] = arr
        return out

    def __iter__(self):
        """Samples in index order."""
        for i in range(len(self)):
            yield self[i]

    # -- writing ---------------------------------------------------------------------------

    # -- writing and columns (``_write.py``) ----------------------------------------------

    write = classmethod(_write.write)
    add_field = classmethod(_write.add_field)
    drop_field = classmethod(_write.drop_field)

    # -- maintenance -----------------------------------------------------------------------

    def delete(self, idxs: Any, progress: Progress = False) -> None:
        """Remove samples.

        **A single loaderx store** keeps its index space dense: ``len(self)`` shrinks and
        the survivors stay addressable as ``0..len(self)``; the tail moves into each hole,
        so surviving samples may change index. The bytes stay on disk until
        :meth:`compact`. Needs exclusive access: raises ``LockedError`` (-9) while a
        DataLoader or another handle uses the store.

        **A dataset of named fields** removes the samples from every field: each shard
        holding one is copied without them (the survivors keep their order: sample ``j``
        afterwards is the ``j``-th sample not deleted) and published at once, and the old
        shard's files are removed, so the deleted samples' bytes are in no file when
        ``delete`` returns (:meth:`compact` has nothing left to do). Readers that opened
        the dataset before keep reading what they opened; this handle sees the new one.
        A delete that is interrupted (an error, a kill) leaves the dataset as it was. A
        DataLoader state saved before the delete is refused afterwards (the dataset
        changed); see docs/stream.md. Needs the dataset's writer lock. ``progress`` counts
        records copied.

        **A dataset in an object store** (opened from a URL) the same way: each shard
        holding a deleted sample is fetched, copied without them and uploaded as a new
        shard; a new listing replaces the old one if no other writer's came first (else
        ``LockedError``, and nothing changed: run it again); then the old shards' objects
        are deleted, so no object holds a deleted sample's bytes when ``delete`` returns.
        Readers that opened the dataset before fail, naming the object, once it is gone.

        ``idxs`` are non-negative indices (a negative one is ``IndexOutOfRangeError``: a
        delete does not guess) or a boolean mask ``len(self)`` long (another length is an
        ``IndexError``, as in indexing).
        """
        if getattr(self, "_split", None) is not None:
            raise TypeError("a split reads its dataset by reference: delete from the whole dataset, then split again")
        n = len(self)
        idxs = np.asarray(idxs)
        if idxs.dtype == np.bool_:
            if idxs.shape != (n,):
                raise IndexError(f"boolean mask of shape {idxs.shape} does not match a dataset of {n}")
            idxs = np.flatnonzero(idxs)
        if self._native is None:
            self.store.delete(idxs)
            return
        idxs = idxs.reshape(-1)
        if idxs.size and idxs.dtype.kind == "i" and idxs.min() < 0:
            raise IndexOutOfRangeError(f"index {int(idxs.min())} is negative: a delete takes indices 0..{n - 1}")
        if idxs.size and int(idxs.max()) >= n:
            raise IndexOutOfRangeError(f"index {int(idxs.max())} is out of range for a dataset of {n} samples")
        with reporter(progress, "delete", "record") as report:
            _zrecord._delete_samples(str(self.path), idxs.astype(np.uint64), report,
                                     storage_options=self._storage_options)
        # This handle reads the new dataset from now on.
        old, self._native = self._native, self._open_native()
        old.close()

    def compact(self, progress: Progress = False, *, target_rows: "int | None" = None) -> None:
        """Reclaim the space left by :meth:`delete`, in place (needs exclusive access); for
        a dataset of named fields, merge its small shards.

        A dataset of named fields has no space to reclaim (its delete removes the bytes),
        but every append adds a shard: this copies each run of neighbouring shards that
        together hold at most ``target_rows`` samples (default 2^20) into one shard, values
        and row order exact, and publishes the result at once (readers see the dataset
        before or after). Sample ``i`` is the same sample after, so the dataset keeps its
        identity: a loader state saved before resumes after, batch for batch. Shards with
        samples longer than a record stay as they are; a dataset in an object store is
        not compacted (pull, compact, push).

        ``progress``: ``True`` for a tqdm bar (when tqdm is installed), or a
        ``callable(done, total)``, in records visited (copied, for named fields).
        """
        if self._native is not None:
            self._live()
            if getattr(self, "_split", None) is not None:
                raise TypeError("a split reads its dataset by reference: compact the whole dataset")
            rows = None if target_rows is None else int(target_rows)
            with reporter(progress, "compact", "record") as report:
                _zrecord._compact_shards(str(self.path), rows, report)
            old, self._native = self._native, self._open_native()
            old.close()
            return
        if target_rows is not None:
            raise TypeError("target_rows applies to a dataset of named fields (shards to merge)")
        store = self.store
        with reporter(progress, "compact") as report:
            store.compact(report)

    def stats(self) -> dict:
        """Storage usage; see :meth:`Zrecord.stats` (summed over every store of a
        multi-field dataset, ``unchecked`` included, as ``zr stats`` sums them)."""
        if self._native is None:
            return self.store.stats()
        return self._live().stats()

    # -- lifetime --------------------------------------------------------------------------

    def close(self) -> None:
        """Close the underlying store. Idempotent."""
        store, self._store = getattr(self, "_store", None), None
        if store is not None:
            store.close()
        native = getattr(self, "_native", None)
        if native is not None:
            self._native_closed = True
            native.close()

    def __enter__(self) -> "Dataset":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __reduce__(self):
        # Reopen by path in the receiving process (spawned DataLoader workers and the like);
        # a split is made again from its fractions and seed.
        return (_reopen, (type(self), str(self.path), self._verify, self._read_only_arg, self._storage_options,
                          self._cache_bytes, self._cache_dir, getattr(self, "_split", None)))

    def __repr__(self) -> str:
        if self._native is not None:
            state = "closed" if getattr(self, "_native_closed", False) else f"{len(self)} samples in {self.shards} shard(s)"
            fields = ", ".join(_describe(f) for f in self.fields)
            split = getattr(self, "_split", None)
            part = "" if split is None else f", split {split[3]!r}"
            return f"Dataset({str(self.path)!r}, fields=[{fields}], {state}{part})"
        state = "closed" if self._store is None else f"{len(self._store)} samples"
        return f"Dataset({str(self.path)!r}, dtype={self.dtype.str!r}, shape={self.shape}, codec={self.codec!r}, {state})"


def _describe(f: Field) -> str:
    if f.kind in ("bytes", "string", "image"):
        return f"{f.name}: {f.kind}"
    return f"{f.name}: {'ragged ' if f.ragged else ''}{f.dtype.str}{'' if f.ragged else f.shape}"


# Native handles a forked child inherited and replaced (Dataset._reopen_after_fork).
_FORKED_AWAY: list = []


def _reopen(cls, path: str, verify: str, read_only: "bool | None", storage_options=None, cache_bytes=None,
            cache_dir=None, split=None) -> "Dataset":
    ds = cls(path, verify=verify, read_only=read_only, storage_options=storage_options, cache_bytes=cache_bytes,
             cache_dir=cache_dir)
    if split is None:
        return ds
    return _view(ds, split)


def _view(ds: "Dataset", split: tuple) -> "Dataset":
    """Split ``split`` (fractions, seed, k, name) of the whole dataset ``ds``."""
    fractions, seed, k, _ = split
    view = object.__new__(type(ds))
    view.__dict__.update(ds.__dict__)
    view._native = ds._live().split(list(fractions), seed)[k]
    view._split = split
    view._pid = os.getpid()
    return view


def split(ds: "Dataset", fractions: "Mapping[str, float]", seed: int = 0) -> "dict[str, Dataset]":
    """Disjoint, reproducible splits of a dataset, by reference: ``{"train": 0.99, "val":
    0.01}`` gives two datasets holding 99% and 1% of its samples, chosen by a keyed
    permutation of ``seed`` (the same seed, the same splits; the fractions, rounded by
    their running sums, cover the dataset when they sum to 1, and leave the rest out when
    they sum to less). Nothing is copied: each split reads the dataset's stores, costs 8
    bytes per sample of the smaller of itself and what it leaves out, and lists its samples
    in the dataset's order, so an evaluation pass (``DataLoader(..., passes=1)``) reads
    front to back. Splits are read-only (``delete`` and appends go to the whole dataset)
    and have identities of their own: a loader state saved on one resumes only on it.
    A dataset of named fields (or one read from an object store); not a split of one."""
    if not isinstance(ds, Dataset) or ds._native is None:
        raise TypeError("zrecord.split takes a Dataset of named fields (one written by Dataset.write, or pushed)")
    if getattr(ds, "_split", None) is not None:
        raise ValueError("this dataset is a split already: split the whole dataset")
    names = list(fractions)
    if not names:
        raise ValueError("zrecord.split needs at least one name and fraction")
    values = tuple(float(fractions[n]) for n in names)
    seed = check_seed(seed)
    ds._live().split(list(values), seed)  # checks the fractions before any view is made
    return {name: _view(ds, (values, seed, k, name)) for k, name in enumerate(names)}



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


def _wrap_negative(idxs: np.ndarray, n: int) -> np.ndarray:
    """``idxs`` with negative indices counted from the end of a dataset of ``n`` samples;
    one below ``-n`` is an ``IndexOutOfRangeError`` naming it as given."""
    if idxs.size == 0 or idxs.dtype.kind != "i" or idxs.min() >= 0:
        return idxs
    below = idxs < -n
    if below.any():
        bad = int(idxs[np.argmax(below)])
        raise IndexOutOfRangeError(f"index {bad} is out of range for a dataset of {n} samples")
    return np.where(idxs < 0, idxs + n, idxs)


# -- writing named fields --------------------------------------------------------------------

