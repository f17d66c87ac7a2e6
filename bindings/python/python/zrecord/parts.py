"""One dataset written by many processes: each writes a numbered part, one commits them.

For writers that share nothing but the destination: a ``multiprocessing`` pool, the tasks
of a Slurm array job, hosts writing to one bucket. Each calls :func:`write_part` with its
own part number; when all have finished, one process calls :func:`commit_parts`, which
adds every part to the dataset at once, in part order (readers see all of them or none).

The rules (one part per number, a re-run replaces its part, a commit that names the parts
it expects refuses to go on without one) are the native engine's
(``host-native/src/dataset/saved_parts.rs``); this module only writes the part's samples
with :meth:`Dataset.write` and hands it over.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Union

from . import _zrecord
from ._progress import Progress
from ._write import WRITE_CHUNK_BYTES, _named_fields
from .dataset import Dataset

__all__ = ["write_part", "commit_parts"]

PathLike = Union[str, "os.PathLike[str]"]


def _is_url(dest: PathLike) -> bool:
    return "://" in os.fspath(dest)


def write_part(
    dest: PathLike,
    part: int,
    data: Any,
    *,
    storage_options: Optional[dict] = None,
    codec: "str | Mapping[str, str]" = "flate",
    chunk_bytes: int = WRITE_CHUNK_BYTES,
    progress: Progress = False,
    min_savings: Optional[float] = None,
    shard_records: Optional[int] = None,
    dtype: "Mapping[str, Any] | None" = None,
    skip_empty: bool = False,
) -> int:
    """Write ``data`` (named fields, in any form :meth:`Dataset.write` takes) as part
    ``part`` of the dataset at ``dest``, a local directory or a URL; returns the samples
    written. Nothing is readable until :func:`commit_parts`.

    Locally the part is the dataset ``dest/.zrecord-part-NNNNNN`` (on a filesystem every
    writer and the committing process share); in an object store its shards are uploaded
    under names of their own and a small record of the part is kept under
    ``dest/.zrecord-parts/``. Writing a part number again (a task that failed and is run
    again) replaces that part: its earlier samples are not committed, and its earlier
    uploads are deleted.
    """
    if not _named_fields(data):
        raise TypeError("write_part takes named fields (a dict of fields, a DataFrame, Arrow, ...), not one array")
    part = int(part)
    if part < 0:
        raise ValueError(f"part must be a number >= 0, got {part}")
    options = dict(codec=codec, chunk_bytes=chunk_bytes, progress=progress, min_savings=min_savings,
                   shard_records=shard_records, dtype=dtype, skip_empty=skip_empty)
    if _is_url(dest):
        scratch = Path(tempfile.mkdtemp(prefix="zrecord-part-"))
        try:
            local = scratch / "part"
            Dataset.write(local, data, **options).close()
            return _zrecord._save_part(local, os.fspath(dest), part, storage_options)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    if storage_options:
        raise ValueError(f"storage_options apply to a URL (s3://, gs://, az://, https://), not to the local path {dest}")
    local = Path(dest) / _zrecord._part_dir(part)
    # An earlier attempt of this part (finished or not) is replaced.
    shutil.rmtree(local, ignore_errors=True)
    Path(dest).mkdir(parents=True, exist_ok=True)
    written = Dataset.write(local, data, **options)
    try:
        return len(written)
    finally:
        written.close()


def commit_parts(
    dest: PathLike,
    parts: "int | Iterable[int] | None" = None,
    *,
    mode: str = "create",
    storage_options: Optional[dict] = None,
) -> int:
    """Commit every part written to ``dest`` with :func:`write_part` as one dataset, in part
    order; returns the samples added.

    Args:
        dest: the destination the parts were written to (a local directory or a URL).
        parts: the parts expected: ``n`` for parts ``0..n-1``, or the part numbers. A part
            expected but not written (its task failed or has not run), not finished, or
            written but not expected is an error naming it, and nothing is committed.
            ``None`` commits whatever parts are there.
        mode: ``"create"`` refuses a destination that holds a dataset already;
            ``"append"`` adds the parts to it (its fields must be the parts').
        storage_options: for a URL, as :class:`Dataset` takes them.

    A commit interrupted after the dataset took the parts and before their records were
    removed is finished by calling it again (the parts are not added twice).
    """
    if mode not in ("create", "append"):
        raise ValueError(f'mode must be "create" or "append", got {mode!r}')
    if parts is None:
        expected = None
    elif isinstance(parts, int):
        expected = list(range(parts))
    else:
        expected = [int(p) for p in parts]
    _, samples, _ = _zrecord._commit_saved(os.fspath(dest), expected, storage_options, mode == "append")
    return samples
