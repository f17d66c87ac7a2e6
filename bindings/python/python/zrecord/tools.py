"""The ``zr`` command line's tools, for Python: inspect, verify, stats, convert, export,
push, pull, concat, set_layout, and :func:`list` of the datasets under a folder or prefix.

Each runs zrecord-core's implementation (the one ``zr`` runs) with the GIL released and
returns a frozen dataclass whose fields are the keys of ``zr inspect --json`` and friends;
``dataclasses.asdict`` turns one into plain data. The reading tools (``inspect``,
``verify``, ``stats``, ``export``, ``pull``, ``list``) take a local path or a URL
(``s3://bucket/prefix``, ``gs://``, ``az://``) with ``storage_options``, as ``zr`` does;
given a dataset of named fields they report every store of every shard. ``verify``,
``convert`` and ``export`` take ``progress=`` (see :mod:`zrecord._progress`): ``True``
shows a tqdm bar when tqdm is installed.
"""

from __future__ import annotations

import builtins
import contextlib
import json
import os
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Union

from . import _zrecord
from ._progress import Progress, reporter
from ._zrecord import DEFAULT_MIN_SAVINGS

__all__ = [
    "BadRecord",
    "ChunkUse",
    "Conversion",
    "DatasetInspection",
    "DatasetVerification",
    "Inspection",
    "Schema",
    "StoreInspection",
    "StoreVerification",
    "Verification",
    "convert",
    "export",
    "inspect",
    "list",
    "remote_stats",
    "stats",
    "verify",
]

PathLike = Union[str, "os.PathLike[str]"]

#: Source bytes handed to one append by ``convert`` (and read per step by ``export``).
CHUNK_BYTES = 64 << 20


@dataclass(frozen=True)
class Schema:
    """A dataset's ``schema.json``: per-sample ``dtype`` (numpy ``dtype.str``) and ``shape``,
    and the ``codec`` appends use."""

    format: str
    version: int
    dtype: str
    shape: tuple[int, ...]
    codec: str

    @classmethod
    def _from(cls, d: dict) -> "Schema":
        return cls(d["format"], d["version"], d["dtype"], tuple(d["shape"]), d["codec"])


@dataclass(frozen=True)
class ChunkUse:
    """Records and bytes of one chunk file ``{id}.zr``; ``file_bytes`` is the file's size
    (``None`` when it is missing), less than ``used_bytes`` when it was truncated."""

    id: int
    records: int
    live_bytes: int
    used_bytes: int
    file_bytes: Optional[int] = None


@dataclass(frozen=True)
class Inspection:
    """What :func:`inspect` reports (``zr inspect --json``).

    Attributes:
        version: format version in the header: 1 sparse, 2 dense.
        layout: ``"sparse"`` (loaderx 0.5.4's fixed file sizes, mostly holes) or
            ``"dense"`` (files as long as what they hold); :func:`set_layout` changes it.
        records: live records.
        tail_chunk, tail_offset: the append frontier.
        raw_records, flate_records, zstd_records: records per codec (loaderx 0.5.4
            cannot read a store with zstd records).
        bad_entries: table entries that fail their checks (a damaged store if not 0).
        live_bytes, logical_bytes: stored and uncompressed sizes of the live records.
        chunk_bytes: how far the chunk files have grown.
        reclaimable: ``chunk_bytes - live_bytes``, an upper bound on what compact frees.
        checksums: True if the store keeps per-record checksums (``checksums.zrc``).
        unchecked: live records without a checksum (all of them without ``checksums.zrc``);
            :func:`verify` with ``seal=True`` checksums them.
        chunks: per chunk file, in id order.
        schema: the dataset schema, or ``None`` for a plain record store.
        problems: what is wrong with the store as a whole (a truncated or missing chunk
            file, a lost ``checksums.zrc``), one line each; empty for a sound store.
    """

    version: int
    layout: str
    records: int
    tail_chunk: int
    tail_offset: int
    raw_records: int
    flate_records: int
    zstd_records: int
    bad_entries: int
    live_bytes: int
    logical_bytes: int
    chunk_bytes: int
    reclaimable: int
    checksums: bool
    unchecked: int
    chunks: tuple[ChunkUse, ...]
    schema: Optional[Schema]
    problems: tuple[str, ...] = ()


@dataclass(frozen=True)
class BadRecord:
    """A record that failed to decode, and why."""

    index: int
    error: str


@dataclass(frozen=True)
class Verification:
    """What :func:`verify` found: ``checked`` records read, ``bad_count`` of them failed
    (a checksum that does not hold, or a record that does not decode); ``bad`` lists the
    first 1000 failures. ``problems`` says what is wrong with the store as a whole (a
    truncated chunk file: the ``cut_off`` records past its end are counted in ``bad_count``
    but not listed; a lost ``checksums.zrc``). Of the records read, ``checksummed`` had a checksum that was
    checked and ``unchecked`` had none; ``sealed`` is how many ``seal=True`` checksummed
    first (``None`` without it)."""

    checked: int
    bad_count: int
    bad: tuple[BadRecord, ...]
    checksummed: int = 0
    unchecked: int = 0
    sealed: Optional[int] = None
    problems: tuple[str, ...] = ()
    cut_off: int = 0

    @property
    def ok(self) -> bool:
        """True if every record decoded and the store as a whole has no problem."""
        return self.bad_count == 0 and not self.problems


@dataclass(frozen=True)
class StoreInspection:
    """One store of a dataset of named fields: its shard's directory name
    (``shard-000000``), its field, and what :func:`inspect` found in it."""

    shard: str
    field: str
    inspection: Inspection


@dataclass(frozen=True)
class DatasetInspection:
    """What :func:`inspect` reports for a dataset of named fields (``zr inspect --json``):
    its ``samples``, ``shards`` and ``fields`` (names, in order), its card (``metadata``,
    ``None`` without one), and every store of every shard, shard by shard, field by field.

    ``live_bytes`` is the stored bytes of every store together.
    """

    path: str
    samples: int
    shards: int
    fields: tuple[str, ...]
    metadata: Optional[dict]
    stores: tuple[StoreInspection, ...]

    @property
    def live_bytes(self) -> int:
        return sum(s.inspection.live_bytes for s in self.stores)


@dataclass(frozen=True)
class StoreVerification:
    """One store of a dataset of named fields and what :func:`verify` found in it (record
    indices in :attr:`Verification.bad` are the shard's, as ``zr verify`` prints them)."""

    shard: str
    field: str
    verification: Verification


@dataclass(frozen=True)
class DatasetVerification:
    """What :func:`verify` found in a dataset of named fields: ``bad_count`` failures over
    ``checked`` records of every store, and each store's :class:`Verification`."""

    path: str
    samples: int
    shards: int
    fields: tuple[str, ...]
    metadata: Optional[dict]
    stores: tuple[StoreVerification, ...]

    @property
    def checked(self) -> int:
        return sum(s.verification.checked for s in self.stores)

    @property
    def bad_count(self) -> int:
        return sum(s.verification.bad_count for s in self.stores)

    @property
    def ok(self) -> bool:
        """True if every record of every store decoded and no store has a problem."""
        return all(s.verification.ok for s in self.stores)


@dataclass(frozen=True)
class Conversion:
    """What :func:`convert` did: ``appended`` samples starting at index ``first_index``,
    into a dataset with ``schema`` (the existing one when it appended)."""

    appended: int
    first_index: int
    schema: Schema


def _inspection(d: dict) -> Inspection:
    return Inspection(
        **{k: v for k, v in d.items() if k not in ("chunks", "schema", "problems")},
        chunks=tuple(ChunkUse(**c) for c in d["chunks"]),
        problems=tuple(d["problems"]),
        schema=None if d["schema"] is None else Schema._from(d["schema"]),
    )


def _verification(d: dict) -> Verification:
    return Verification(
        d["checked"],
        d["bad_count"],
        tuple(BadRecord(**b) for b in d["bad"]),
        d["checksummed"],
        d["unchecked"],
        d["sealed"],
        tuple(d["problems"]),
        d["cut_off"],
    )


def _dataset_parts(d: dict) -> dict:
    metadata = d["metadata"]
    return {
        "path": d["path"],
        "samples": d["samples"],
        "shards": d["shards"],
        "fields": tuple(d["fields"]),
        "metadata": None if metadata is None else json.loads(metadata),
    }


def _location(path: "PathLike | str") -> str:
    return path if isinstance(path, str) else os.fspath(path)


def inspect(path: PathLike, storage_options: "Optional[dict]" = None) -> "Inspection | DatasetInspection":
    """Header, codec mix, chunk use, sizes and schema of the store at ``path``, or of every
    store of the dataset of named fields there (a :class:`DatasetInspection`).

    ``path`` is a local directory or the URL of a pushed dataset or store (``s3://...``),
    read with ``storage_options`` (object_store's keys, over the ``AWS_*``, ``GOOGLE_*``
    and ``AZURE_*`` variables) as :class:`Dataset` reads it. Opens everything read-only;
    nothing is created or changed.

    Raises:
        StoreIOError: ``path`` does not exist (for a URL, the message says whether the
            bucket is missing or nothing was pushed there).
        FormatError: ``path`` is not a zrecord store or dataset.
    """
    kind, d = _zrecord.inspect(_location(path), storage_options)
    if kind == "store":
        return _inspection(d)
    return DatasetInspection(
        **_dataset_parts(d),
        stores=tuple(StoreInspection(s["shard"], s["field"], _inspection(s["inspection"])) for s in d["stores"]),
    )


def verify(
    path: PathLike, progress: Progress = False, seal: bool = False, storage_options: "Optional[dict]" = None
) -> "Verification | DatasetVerification":
    """Check every record's checksum (where it has one) and decode every record of the
    store at ``path``, or of every store of the dataset of named fields there (a
    :class:`DatasetVerification`); report those that fail.

    Opens everything read-only. A damaged record is reported, not raised; only a store that
    cannot be read at all raises.

    Args:
        path: a store or dataset directory, or a URL as for :func:`inspect` (the records
            are read from the object store: the whole dataset's bytes).
        progress: ``True`` for a tqdm bar (if tqdm is installed), or a ``callable(done, total)``
            (records, over every store).
        seal: first checksum the unchecked records (records a foreign writer such as loaderx
            added or moved; every record of a store only loaderx wrote) that decode, opening
            the store writable, as ``zr verify --seal`` does: one local store only.
        storage_options: for a URL, as for :func:`inspect`.
    """
    with reporter(progress, "verify") as report:
        kind, d = _zrecord.verify(_location(path), report, seal, storage_options)
    if kind == "store":
        return _verification(d)
    return DatasetVerification(
        **_dataset_parts(d),
        stores=tuple(
            StoreVerification(s["shard"], s["field"], _verification(s["verification"])) for s in d["stores"]
        ),
    )


def stats(path: PathLike, storage_options: "Optional[dict]" = None) -> dict:
    """What ``zr stats`` prints, as a dict: for a store ``records``, ``live_bytes``,
    ``chunk_bytes``, ``reclaimable`` (and ``unchecked`` when it keeps checksums); for a
    dataset of named fields the same summed over every store, with ``samples``, ``shards``
    and ``fields`` (counts). ``path`` is local or a URL, as for :func:`inspect`; nothing is
    read but the stores' tables.
    """
    return _zrecord.stats(_location(path), storage_options)


def remote_stats(cache_dir: PathLike) -> dict:
    """What every process that read a remote dataset through the cache directory
    ``cache_dir`` fetched, summed: the keys of :meth:`Dataset.remote_stats` (without
    ``most_in_flight``) and ``processes``, how many processes the sums cover.

    The worker processes of torch's ``DataLoader`` each open the dataset again, so the
    parent's ``Dataset.remote_stats()`` counts none of their requests; given one
    ``cache_dir``, every process writes its counts there (64 bytes each) after each request.
    The sums run from the directory's creation: take the difference of two calls for one
    epoch or run.
    """
    return _zrecord._traffic_total(os.fspath(cache_dir))


def list(path: PathLike, storage_options: "Optional[dict]" = None) -> "builtins.list[str]":  # noqa: A001
    """The datasets and stores at ``path`` or below it, sorted: local directories holding
    ``dataset.json`` or ``meta.zr``, or, for a URL prefix (``s3://bucket/some/prefix``),
    the URL of every pushed dataset or store under it (a prefix holding ``remote.json``:
    a push or remote write that did not finish is not listed). Neither search descends
    into what it found, nor into hidden directories.

    Raises:
        StoreIOError: the directory cannot be read, or the bucket does not exist.
    """
    return _zrecord.find_datasets(_location(path), storage_options)


def convert(
    npy: PathLike,
    path: PathLike,
    codec: str = "flate",
    chunk_bytes: int = CHUNK_BYTES,
    progress: Progress = False,
    min_savings: float = DEFAULT_MIN_SAVINGS,
) -> Conversion:
    """Append every axis-0 slice of the ``.npy`` file ``npy`` to the dataset at ``path``.

    Streams ``chunk_bytes`` of the file at a time (a file larger than memory is fine) and
    writes ``schema.json`` exactly as :meth:`Dataset.write` does; an existing dataset of the
    same dtype and shape is appended to (in its own codec), another one refused. A convert
    into a new ``path`` (or an empty directory) that fails leaves nothing there; one that
    fails while appending to an existing dataset keeps the blocks appended before the
    failure, each whole. ``min_savings`` is the least fraction compression must save for a
    record to be stored compressed, as in :meth:`Dataset.write` (``zr convert --min-savings``).

    Raises:
        ValueError: an incompatible existing dataset, a 0-d array (a Fortran-ordered file is
            read as its C-ordered copy would be).
        RecordTooLargeError: a sample over 1 MiB or of 0 bytes.
        FormatError: ``npy`` is not a readable ``.npy`` (or is truncated).
        StoreIOError: ``npy`` does not exist.
    """
    path = Path(path)
    existed = os.path.lexists(path)
    was_empty = existed and path.is_dir() and not path.is_symlink() and not any(path.iterdir())
    try:
        with reporter(progress, "convert") as report:
            d = _zrecord.convert(os.fspath(npy), os.fspath(path), codec, int(chunk_bytes), report, float(min_savings))
    except BaseException:
        # Only what this call created goes: a path that did not exist, or the contents of a
        # directory that was empty. A dataset that existed is left as the core left it:
        # blocks appended before the failure stay (each append publishes whole or not at all).
        if not existed:
            shutil.rmtree(path, ignore_errors=True)
        elif was_empty:
            for child in path.iterdir():
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child, ignore_errors=True)
                else:
                    with contextlib.suppress(OSError):
                        child.unlink()
        raise
    return Conversion(d["appended"], d["first_index"], Schema._from(d["schema"]))


def export(
    path: PathLike,
    npy: PathLike,
    chunk_bytes: int = CHUNK_BYTES,
    progress: Progress = False,
    verify: str = "auto",
    storage_options: "Optional[dict]" = None,
) -> int:
    """Write the dataset at ``path`` to the ``.npy`` file ``npy`` (one store with a
    ``schema.json``), or a dataset of named fields to the ``.npz`` file ``npy`` (one array
    per field; a ragged field as ``NAME`` values and ``NAME_offsets``, as ``zr export``
    writes them); returns the sample count.

    ``path`` is local or a URL, as for :func:`inspect`. Everything is opened read-only;
    ``verify`` checks each record's checksum as ``zr export --verify`` does: ``"auto"``
    where it has one, ``"always"`` (a record without one fails too) or ``"never"``. The
    file is written beside ``npy`` and renamed over it at the end, so a failed export
    leaves ``npy`` as it was.

    Raises:
        ValueError: the store has no ``schema.json`` (a plain record store).
        FormatError: a record's size does not match the schema.
    """
    npy = Path(npy)
    # Named as zr names a partial output (zrecord_app::partial), one per thread, so that the
    # next zr staging an output of this name removes it if this process died before the rename.
    tmp = npy.with_name(f".{npy.name}.zr-partial-{os.getpid()}.{threading.get_ident()}")
    try:
        with reporter(progress, "export") as report:
            rows = _zrecord.export(_location(path), os.fspath(tmp), int(chunk_bytes), report, verify, storage_options)
        os.replace(tmp, npy)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    _sync_dir(npy.parent)
    return rows


def _sync_dir(directory: Path) -> None:
    """Make a rename in ``directory`` durable (where directories can be opened)."""
    try:
        fd = os.open(directory if str(directory) else ".", os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def push(
    local: PathLike,
    url: str,
    storage_options: "Optional[dict]" = None,
    progress: Progress = False,
) -> dict:
    """Upload the dataset (or loaderx store) at ``local`` to ``url`` (``s3://bucket/prefix``,
    ``gs://``, ``az://``), to be read with ``zrecord.Dataset(url, storage_options=...)``.

    Only the bytes the files hold are sent (a store's files are sparse: gigabytes on paper
    for megabytes of records), each object tagged with a hash of its bytes, so a push that
    was cut short, pushed again, sends only what is missing. The listing ``remote.json``
    goes up last and conditionally: until it is there, ``url`` is not a dataset.
    ``storage_options`` are object_store's configuration keys (``aws_endpoint``,
    ``aws_access_key_id``, ``aws_allow_http``, ...) over the environment's ``AWS_*``,
    ``GOOGLE_*`` and ``AZURE_*`` variables. Do not write to ``local`` meanwhile: a file
    that changes during the push fails it.

    Returns ``{"kind", "files", "uploaded", "bytes", "stored", "apparent"}``: what was
    pushed, how many files this call uploaded and their bytes, the bytes the dataset takes
    in the object store, and the size its files claim on disk.
    """
    with reporter(progress, "push", "byte") as report:
        return _zrecord._push(os.fspath(local), str(url), storage_options, report)


def pull(
    url: str,
    local: PathLike,
    storage_options: "Optional[dict]" = None,
    progress: Progress = False,
) -> int:
    """Download the dataset (or store) pushed to ``url`` into ``local`` (created if
    missing; it must be empty), file for file as it was pushed: each file's bytes checked
    against the hash the push recorded, so the copy opens and verifies as the original did
    (a pulled loaderx store is one loaderx 0.5.4 reads). ``storage_options`` as for
    :func:`push`. ``progress`` counts bytes. Returns the number of files.

    Raises ``StoreIOError`` when ``url`` holds no pushed dataset (no ``remote.json``) or
    a file's bytes do not match, and ``FileExistsError`` when ``local`` is not empty.
    """
    local = os.fspath(local)
    os.makedirs(local, exist_ok=True)
    if os.listdir(local):
        raise FileExistsError(f"{local} is not empty: pull into a new or empty directory")
    with reporter(progress, "pull", "byte") as report:
        return _zrecord._pull(str(url), local, storage_options, report)


def concat(datasets: "list[PathLike]", out: PathLike, storage_options: "Optional[dict]" = None) -> dict:
    """Make the dataset ``out`` (which must not exist) of the samples of ``datasets`` (local
    datasets of named fields with the same fields: names, kinds, dtypes and shapes), in
    order, without copying a record: ``out``'s shards are the sources' shards, their files
    hard links to the sources' files (copies when ``out`` is on another file system). The
    first dataset's codecs and card carry over. The sources stay as they were and stay
    independent: appends add shards, deletes copy the shards they change, so neither side
    changes the other's samples (``set_layout`` on one does change the layout of the files
    they share, never their records). ``out`` appears whole or not at all.

    In an object store (every dataset and ``out`` URLs in one bucket, with
    ``storage_options``), each object is copied by the server under ``out`` (its bytes do
    not pass through this process), then ``out``'s listing is put, if no dataset is there.

    Returns ``{"samples", "shards", "linked", "copied"}`` (objects copied, in an object
    store). A source whose fields differ is a ``ValueError`` saying how.
    """
    samples, shards, linked, copied = _zrecord._concat(
        [_location(d) for d in datasets], _location(out), storage_options
    )
    return {"samples": samples, "shards": shards, "linked": linked, "copied": copied}


def copy(
    src: PathLike,
    dst: PathLike,
    storage_options: "Optional[dict]" = None,
    progress: Progress = False,
) -> dict:
    """Copy the dataset of named fields at ``src`` to the new ``dst`` as one consistent
    state of it, even while other processes append to, delete from or compact it (a plain
    ``cp -r`` or ``rsync`` is safe only on a dataset no one is changing: it can catch a
    change half done). Files are written as long as what they hold.

    A URL on one side is a :func:`pull` (``src``) or a :func:`push` (``dst``) with
    ``storage_options``: an object store's listing changes whole, so either copies one
    state. Returns ``{"samples", "shards", "files", "bytes", "restarts"}`` for a local
    copy (``restarts``: times a change published during the copy made it read the
    manifest again), the pull's or push's counts otherwise.
    """
    src_url, dst_url = (isinstance(p, str) and _zrecord._is_url(p) for p in (src, dst))
    if src_url and dst_url:
        raise ValueError("copy from one object store location to another: pull it, then push it")
    if src_url:
        return {"files": pull(src, dst, storage_options, progress)}
    if dst_url:
        return push(src, dst, storage_options, progress)
    if storage_options:
        raise ValueError("storage_options apply to a URL (s3://, gs://, az://, https://), not to local paths")
    with reporter(progress, "copy", "shard") as report:
        samples, shards, files, nbytes, restarts = _zrecord._copy_dataset(os.fspath(src), os.fspath(dst), report)
    return {"samples": samples, "shards": shards, "files": files, "bytes": nbytes, "restarts": restarts}


LAYOUTS = ("dense", "sparse")


def set_layout(path: PathLike, layout: str, progress: Progress = False) -> tuple[int, int]:
    """Size the files of the store at ``path``, or of every store of the dataset of named
    fields at ``path``, as ``layout`` says (``zr layout PATH dense|sparse``).

    ``"dense"``: each file as long as what it holds, so ``cp``, ``rsync``, ``tar``,
    ``shutil.copytree`` and cloud sync tools copy the data and no more. Datasets of named
    fields are written dense. ``"sparse"``: the fixed sizes loaderx 0.5.4 needs (meta.zr
    256 MiB, each chunk file 4 GiB, mostly holes); :meth:`Dataset.write` of a single array
    writes it, and loaderx reads a dataset's fixed field stores after this.

    Each store changes atomically (killed anywhere, it is in one layout or the other; run
    this again to finish) and needs the only open handle, as compact does; records do not
    move, so saved loader states stay valid. Returns ``(stores, changed)``: the stores
    visited and how many had the other layout.
    """
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be 'dense' or 'sparse', not {layout!r}")
    with reporter(progress, "layout") as report:
        return _zrecord._set_layout(os.fspath(path), layout, report)
