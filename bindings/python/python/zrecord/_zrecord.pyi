"""Type stubs for the native module ``zrecord._zrecord`` (pyo3)."""

import os
from typing import Any, Callable, Iterator, Literal, Optional, SupportsIndex, Union

import numpy as np
import numpy.typing as npt

_Path = Union[str, "os.PathLike[str]"]
_Codec = Literal["raw", "flate", "zstd"]
# Anything numpy turns into an integer array: an int, a sequence of ints, an integer array.
_Indices = Union[SupportsIndex, "npt.ArrayLike"]
# A C-contiguous numpy array of any non-object dtype, or any object with the buffer protocol.
_Buffer = Any
# A progress reporter: called as reporter(done, total) now and then, with the GIL held.
_Reporter = Optional[Callable[[int, int], None]]

MAX_RECORD_LEN: int
MAX_RECORDS: int
# Codec name -> on-disk tag (zrecord_core::Codec::ALL).
CODECS: dict[str, int]
__version__: str
# The core's error table (zrecord_core::error): (code, WIT name, Python class, message).
ERROR_KINDS: tuple[tuple[int, str, str, str], ...]
BOUNDARY_ERROR_KINDS: tuple[tuple[int, str, str, str], ...]

class Zrecord:
    """A zrecord store: a persistent, dense collection of independently compressed byte
    records, addressed ``0..len(store)``."""

    def __init__(
        self,
        path: _Path,
        codec: str = "flate",
        *,
        create: Optional[bool] = None,
        read_only: bool = False,
        verify: str = "auto",
        checksums: bool = True,
    ) -> None:
        """Open the store at ``path``; create it if missing unless ``create=False`` or
        ``read_only=True`` (then a missing store is ``StoreIOError`` / ``FormatError``).
        ``verify`` ("auto", "always", "never") sets when reads check checksums;
        ``checksums=False`` writes without keeping them, as loaderx does."""
    @classmethod
    def open_read_only(cls, path: _Path, codec: str = "flate") -> "Zrecord":
        """Open an existing store without the right to change it; never creates anything."""
    @property
    def read_only(self) -> bool:
        """True if opened read-only (``append``, ``delete``, ``compact`` raise ``ValueError``)."""
    @property
    def codec(self) -> _Codec:
        """Default compression for ``append``."""
    @property
    def path(self) -> "os.PathLike[str]":
        """The store directory."""
    @property
    def closed(self) -> bool:
        """True once ``close()`` has been called."""
    @property
    def verify(self) -> str:
        """When reads check checksums: "auto", "always" or "never"."""
    @property
    def checksums(self) -> bool:
        """True if the store keeps per-record checksums (``checksums.zrc``)."""
    def seal(self, progress: _Reporter = None) -> dict[str, int]:
        """Checksum every unchecked record that decodes: ``{"already", "sealed", "bad"}``."""
    def __len__(self) -> int: ...
    def sync(self) -> None:
        """Flush chunk data, then the record table and header, to disk."""
    def lengths(self, idxs: _Indices) -> "npt.NDArray[np.uint32]":
        """The logical size of each record in ``idxs``."""
    def gather(self, idxs: _Indices, dst: _Buffer, stride: int) -> None:
        """Decode records ``idxs`` into ``dst``, record ``i`` at byte ``i * stride``."""
    def gather_var(self, idxs: _Indices, dst: _Buffer, offsets: "npt.ArrayLike") -> None:
        """Decode records ``idxs`` into ``dst``, record ``i`` at byte ``offsets[i]``."""
    def append(self, src: _Buffer, n: int, item_len: int, codec: Optional[str] = None) -> int:
        """Append ``n`` records of ``item_len`` bytes; returns the first new index."""
    def stage(self, src: _Buffer, n: int, item_len: int, codec: Optional[str] = None) -> int:
        """Write records as ``append`` does but leave them invisible and not durable until
        ``commit()``; returns the index the first will have."""
    def commit(self) -> None:
        """Make the staged records durable, then visible."""
    def discard(self) -> None:
        """Forget the staged records."""
    def append_var(
        self, src: _Buffer, offsets: "npt.ArrayLike", lens: "npt.ArrayLike", codec: Optional[str] = None
    ) -> int:
        """Append ragged records ``src[offsets[i]:][:lens[i]]``; returns the first new index."""
    def delete(self, idxs: _Indices) -> None:
        """Remove records, keeping the index space dense (needs exclusive access)."""
    def compact(self, progress: _Reporter = None) -> None:
        """Reclaim the space left by ``delete``, in place (needs exclusive access);
        ``progress(done, total)`` is called now and then, in records visited."""
    def stats(self) -> dict[str, int]:
        """``records``, ``live_bytes``, ``chunk_bytes`` and ``reclaimable``."""
    @property
    def generation(self) -> int:
        """Changes whenever records are deleted or compacted (by zrecord: a counter in
        ``generation.zrg``) or the append frontier moves (appends, and other writers'
        compacts). With ``len()`` it names the records behind the indices; compare for
        equality only."""
    def close(self) -> None:
        """Close the store; idempotent."""
    def __enter__(self) -> "Zrecord": ...
    def __exit__(self, *exc: object) -> None: ...

class Sampler:
    """An endless generator of index batches over ``0..length``; ``mode`` 0 sequential,
    1 IID, 2 shuffled epochs."""

    def __init__(self, length: int, batch_size: int, mode: int, seed: int = 42) -> None: ...
    @property
    def length(self) -> int: ...
    @property
    def batch_size(self) -> int: ...
    @property
    def mode(self) -> int: ...
    def next(self) -> "npt.NDArray[np.uint64]":
        """The next batch: a fresh uint64 array of ``batch_size`` indices."""
    def __iter__(self) -> Iterator["npt.NDArray[np.uint64]"]: ...
    def __next__(self) -> "npt.NDArray[np.uint64]": ...

class _Pipeline:
    """The DataLoader's threads: the native ``Loader`` over the core's stream (internal)."""

    def __init__(
        self,
        sources: list[list[Zrecord]],
        itemsizes: list[int],
        dtypes: list[np.dtype],
        shapes: list[list[int]],
        batch_size: int,
        mode: int,
        seed: int,
        weights: Optional[list[float]] = None,
        rank: int = 0,
        world_size: int = 1,
        num_workers: int = 4,
        prefetch_size: int = 4,
        state: Optional[str] = None,
        warm: Optional[bool] = None,
        datasets: Optional[list[Any]] = None,
        pads: Optional[dict[str, bytes]] = None,
        fetch: Optional[Callable[["npt.NDArray[np.uint64]"], tuple]] = None,
        length: Optional[int] = None,
        on_error: str = "raise",
        transform: Optional[Callable[[Any], Any]] = None,
        pack: Optional[dict[str, Any]] = None,
        passes: Optional[int] = None,
        images: Optional[dict[str, Any]] = None,
        blocks: Optional[tuple[int, int]] = None,
    ) -> None:
        """``sources``: one list of stores (one per field) per source; ``weights`` make it a
        mixture; ``state``: a saved state as JSON text; ``warm``: None (when the stores fit
        in a quarter of available memory), True or False. ``datasets`` (with ``pads``):
        datasets of named fields instead of stores. ``fetch`` and ``length``: a function
        the worker threads call (with the GIL) with each batch's indices, for a dataset of
        ``length`` samples that is not zrecord's. ``blocks``: ``(samples per block, blocks
        per window)`` of a block shuffle."""
    def next(self) -> tuple[Any, ...]:
        """One array per field, then (mixtures only) the int32 source array; for
        ``fetch``, the tuple it returned (or the exception it raised, raised here)."""
    def state(self) -> str:
        """The resume state after the last batch returned, as one line of JSON."""
    @property
    def step(self) -> int: ...
    @property
    def batch_size(self) -> int: ...
    @property
    def steps_per_epoch(self) -> Optional[int]: ...
    @property
    def valid(self) -> int:
        """Slots of the last batch holding samples (less than the batch size only in the
        last batch of a finite pass)."""
    @property
    def pass_steps(self) -> Optional[int]:
        """Global batches of a finite pass of samples (``passes=``), else None."""
    @property
    def finite(self) -> bool: ...
    def close(self) -> None: ...
    @property
    def closed(self) -> bool: ...
    @property
    def threads_alive(self) -> int: ...
    @property
    def warm_progress(self) -> Optional[tuple[int, int]]: ...

# The `zr` tools; `zrecord.tools` wraps these in dataclasses (use those).
def inspect(path: str, storage_options: Optional[dict[str, str]] = None) -> tuple[str, dict[str, Any]]:
    """``("store", report)`` (header, codec mix, chunk use, sizes and schema) or
    ``("dataset", report)`` with every store's under ``stores``; opened read-only."""
def verify(
    path: str, progress: _Reporter = None, seal: bool = False, storage_options: Optional[dict[str, str]] = None
) -> tuple[str, dict[str, Any]]:
    """``("store", {checked, bad_count, bad, ...})`` or ``("dataset", report)``."""
def stats(path: str, storage_options: Optional[dict[str, str]] = None) -> dict[str, int]:
    """What ``zr stats`` prints."""
def find_datasets(path: str, storage_options: Optional[dict[str, str]] = None) -> list[str]:
    """Datasets and stores at ``path`` or below it (directories or URLs), sorted."""
def convert(npy: str, path: str, codec: str, chunk_bytes: int, progress: _Reporter = None) -> dict[str, Any]:
    """``appended``, ``first_index`` and ``schema``."""
def export(
    path: str,
    npy: str,
    chunk_bytes: int,
    progress: _Reporter = None,
    verify: str = "auto",
    storage_options: Optional[dict[str, str]] = None,
) -> int:
    """Samples written to ``npy``."""
