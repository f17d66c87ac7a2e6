"""zrecord: a persistent record store and endless data loader for ML training.

A drop-in for loaderx 0.5.4 (``import zrecord as loaderx``) that reads and writes the same
stores, built on a Rust engine: gathers decode straight into numpy arrays across all cores
with the GIL released, and the DataLoader's sample → gather → collate pipeline runs in Rust
threads.

Public names:

- :class:`Zrecord`: a store of raw byte records (``append``, ``gather``, ``delete``, ...).
- :class:`Dataset`: named fixed and ragged fields over shards (``dataset.json``), or a
  numpy view of one loaderx store (``schema.json``); ``Dataset.write``; :class:`Field`.
- :class:`DataLoader`: endless batches, dicts of a Dataset's fields (or loaderx's
  ``{"data", "label"}`` for a dataset and a labelset); ``rank``/``world_size``
  sharding, shuffled epochs, ``state_dict()``/``load_state_dict()`` exact resume.
- :class:`Mixture`: weighted datasets read as one stream (batches gain ``"source"``).
- :func:`resolve_world`: the ``(rank, world_size)`` a DataLoader would use;
  :class:`RanksDisagreeError`: the ranks of a job would read different streams;
  :func:`save_state` / :func:`load_state`: a loader state saved on rank 0, atomically, and
  loaded on every rank from rank 0's copy.
- :class:`Sampler`: the endless index generator behind the loader.
- :func:`inspect`, :func:`verify`, :func:`stats`, :func:`convert`, :func:`export`,
  :func:`push`, :func:`pull`, :func:`concat`, :func:`set_layout` and :func:`list` (the
  datasets under a folder or prefix): the ``zr`` tools, returning the dataclasses of
  :mod:`zrecord.tools` (``progress=True`` shows a tqdm bar when tqdm is installed); the
  reading ones take URLs and ``storage_options`` as :class:`Dataset` does.
- :func:`write_part` / :func:`commit_parts`: one dataset written by many processes (a
  ``multiprocessing`` pool, a Slurm array job), each its own part, committed once.
- :class:`ZrecordError` and its subclasses (see :mod:`zrecord.errors`).
- :mod:`zrecord.torch` and :mod:`zrecord.jax`, imported only on request (``import
  zrecord.torch``; ``import zrecord`` imports neither torch nor jax): a DataLoader's batches
  as torch tensors (no copy, optional pinning and device moves) or as global ``jax.Array`` values
  prefetched to the devices, with ``state_dict()`` still the position after the last batch
  handed out.
- ``MAX_RECORD_LEN`` (1 MiB), ``MAX_RECORDS`` (2^24), ``CODECS``, ``DEFAULT_MIN_SAVINGS``
  (0.125: the least fraction compression must save for a record to be stored compressed),
  ``__version__``.
"""

from ._zrecord import DEFAULT_MIN_SAVINGS, MAX_RECORD_LEN, MAX_RECORDS, Zrecord, __version__
from ._world import RanksDisagreeError, load_state, resolve_world, save_state
from .dataloader import DataLoader, Mixture
from ._write import CODECS
from .dataset import Dataset, Field, split
from .text import tokenize
from .pack import Pack
from . import vision
from .errors import (
    BufferTooSmallError,
    ChecksumError,
    ChecksumsLostWarning,
    DecodeError,
    FormatError,
    IndexOutOfRangeError,
    InternalError,
    LockedError,
    MetadataError,
    OutOfMemoryError,
    RecordTooLargeError,
    StoreClosedError,
    StoreFullError,
    StoreIOError,
    ZrecordError,
)
from .parts import commit_parts, write_part
from .sampler import Sampler
from .tools import (
    BadRecord,
    ChunkUse,
    Conversion,
    DatasetInspection,
    DatasetVerification,
    Inspection,
    Schema,
    StoreInspection,
    StoreVerification,
    Verification,
    concat,
    convert,
    copy,
    export,
    inspect,
    list,
    pull,
    push,
    remote_stats,
    set_layout,
    stats,
    verify,
)

__all__ = [
    "vision",
    "BadRecord",
    "BufferTooSmallError",
    "CODECS",
    "ChecksumError",
    "ChecksumsLostWarning",
    "ChunkUse",
    "Conversion",
    "DataLoader",
    "Dataset",
    "DatasetInspection",
    "DatasetVerification",
    "Field",
    "DEFAULT_MIN_SAVINGS",
    "DecodeError",
    "FormatError",
    "IndexOutOfRangeError",
    "Inspection",
    "InternalError",
    "LockedError",
    "MetadataError",
    "MAX_RECORDS",
    "MAX_RECORD_LEN",
    "Mixture",
    "OutOfMemoryError",
    "Pack",
    "RecordTooLargeError",
    "Sampler",
    "RanksDisagreeError",
    "Schema",
    "StoreClosedError",
    "StoreFullError",
    "StoreIOError",
    "StoreInspection",
    "StoreVerification",
    "Verification",
    "Zrecord",
    "ZrecordError",
    "__version__",
    "commit_parts",
    "concat",
    "convert",
    "copy",
    "export",
    "inspect",
    "list",
    "load_state",
    "pull",
    "push",
    "remote_stats",
    "resolve_world",
    "save_state",
    "set_layout",
    "split",
    "stats",
    "tokenize",
    "verify",
    "write_part",
]
