"""Ray Data as the engine that writes and reads zrecord datasets.

``zrecord.ray.write(ray_dataset, path_or_url)`` writes with one task per CPU of the cluster
(:func:`write`); ``ray_dataset.write_datasink(zrecord.ray.Datasink(path_or_url))`` writes
with as many tasks as the dataset has blocks. Either writes one part per write
task (each its own small dataset: on a local destination in ``.zrecord-part-TASK``, for an
object store uploaded as ``shard-TASK``) and commits them all once, on the driver, as one
dataset. A task Ray runs again replaces its own part, so each sample is committed once;
re-running a failed conversion into an object store uploads only the objects that are not
there already. ``zrecord.ray.read(path_or_url)`` reads a dataset into Ray Data, one read task
per shard.

Every rule (fields, parts, the commit, the listing) is the native ``zrecord`` crate's
(``host-native/src/dataset/parts.rs``); this module converts Ray's blocks to columns.

Columns become fields by the rule ``Dataset.write`` follows (``docs/python.md``, "Which
field a column becomes"): a numeric column (or a tensor column of one shape) is a fixed
field of that dtype and shape; a column of 1-D numeric arrays of varying length is a ragged
field; a column of ``bytes`` is a bytes field and one of ``str`` a string field, read back
as Arrow binary and string columns. Every write task must see the same columns with the
same types.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import threading
import uuid
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np
import pyarrow as pa

from . import _zrecord
from ._columns import block as _block
from ._progress import Progress, reporter
from ._write import WRITE_CHUNK_BYTES, _check_codec
from .dataset import Dataset
from .errors import StoreIOError

try:
    import ray
    import ray.data
    from ray.data.block import BlockAccessor, BlockMetadata
    from ray.data.datasource import Datasink as _RayDatasink
    from ray.data.datasource import Datasource as _RayDatasource
    from ray.data.datasource import ReadTask
except ImportError as e:  # pragma: no cover - exercised only without ray installed
    raise ImportError("zrecord.ray needs Ray Data: pip install 'ray[data]'") from e

__all__ = ["Datasink", "read", "write"]


def _is_url(path: Any) -> bool:
    return isinstance(path, str) and _zrecord._is_url(path)


class _Counts:
    """Bytes written per write task, counting only each task's latest attempt: Ray runs a
    failed task again, and the bytes of the attempt it abandoned are written again."""

    def __init__(self) -> None:
        self.tasks: dict = {}

    def add(self, task: int, attempt: str, n: int) -> None:
        seen, done = self.tasks.get(task, (attempt, 0))
        self.tasks[task] = (attempt, (done if seen == attempt else 0) + n)

    def total(self) -> int:
        return sum(done for _, done in self.tasks.values())


@ray.remote(num_cpus=0)
class _Tally:
    """The bytes a sink's write tasks have written so far, for the driver's progress."""

    def __init__(self) -> None:
        self.counts = _Counts()

    def add(self, task: int, attempt: str, n: int) -> None:
        self.counts.add(task, attempt, n)

    def get(self) -> int:
        return self.counts.total()


# How often the driver asks the tally for the bytes written.
_PROGRESS_EVERY = 0.5


class Datasink(_RayDatasink):
    """Writes a Ray dataset as a zrecord dataset at ``path`` (a local directory, or a URL
    such as ``s3://bucket/prefix/train.zr`` with ``storage_options`` as for
    :class:`zrecord.Dataset`).

    ``mode`` says what happens when the destination holds a dataset already (Ray's
    ``SaveMode`` names; the enum or its string): ``"append"`` adds the samples to it (its
    fields must be the same; none there: it is created), ``"create"`` (or ``"error"``)
    refuses. The default appends to a local dataset, as :meth:`zrecord.Dataset.write` does,
    and refuses an object store prefix that holds one. An append to an object store uploads
    its shards under names of its own and replaces the listing once, conditionally: readers
    see every new sample at once, readers already open keep what they opened, and two jobs
    appending at once both land (docs/remote.md, "Appending").

    Nothing is visible until the driver commits, after every task succeeded; a job that
    fails leaves the destination as it was (a local one keeps no part; an object store
    keeps the uploaded objects unlisted, which a second run of a new dataset reuses).

    After ``write_datasink`` returns, ``samples`` is the number of samples committed.
    ``skip_empty=True`` leaves out samples with an empty ragged field instead of failing
    the task (as :meth:`zrecord.Dataset.write`).

    ``progress`` (as everywhere in zrecord: ``True`` for a tqdm bar, or a callable
    ``progress(done, total)``) counts the bytes of the blocks the write tasks have encoded
    (their Arrow size), summed across the cluster by a small actor and reported by a driver
    thread twice a second; ``total`` is 0 until the commit (Ray does not know the bytes to
    come) and then equals ``done``. Ray's own bars count rows.
    """

    def __init__(
        self,
        path: "str | Path",
        *,
        storage_options: "Mapping[str, str] | None" = None,
        codec: str = "flate",
        shard_records: "int | None" = None,
        min_savings: "float | None" = None,
        chunk_bytes: int = WRITE_CHUNK_BYTES,
        mode: Any = None,
        progress: Progress = False,
        skip_empty: bool = False,
    ) -> None:
        _check_codec(codec)
        if progress not in (True, False, None) and not callable(progress):
            raise TypeError(f"progress must be True, False, None or a callable(done, total), not {progress!r}")
        self.mode = _save_mode(mode)
        self.remote = _is_url(path)
        if storage_options is not None and not self.remote:
            raise ValueError(f"storage_options apply to a URL (s3://, gs://, az://, https://), not to {path}")
        self.path = str(path) if self.remote else str(Path(path).absolute())
        self.storage_options = dict(storage_options) if storage_options else None
        self.codec = codec
        self.shard_records = shard_records
        self.min_savings = min_savings
        self.chunk_bytes = int(chunk_bytes)
        self.skip_empty = bool(skip_empty)
        self.samples: "int | None" = None
        # The tally's name: write tasks find the actor by it (None: no progress).
        self._tally = f"zrecord-write-{uuid.uuid4().hex}" if progress else None
        self._progress = progress
        self._watch: "tuple[threading.Thread, threading.Event, contextlib.ExitStack] | None" = None

    def __getstate__(self) -> dict:
        # What travels to the write tasks: no driver thread, bar or callable.
        state = dict(self.__dict__)
        state["_progress"] = None
        state["_watch"] = None
        return state

    def get_name(self) -> str:
        return "ZrecordWrite"

    def on_write_start(self, schema: Any = None) -> None:
        if self.remote and self.mode != "append" and _zrecord._remote_listed(self.path, self.storage_options):
            # Refused before any task uploads: a write that is not an append names its
            # shards as a new dataset does, so its uploads would land on the objects of the
            # one already there.
            raise StoreIOError(
                f'{self.path}: a dataset is already there (remote.json); write to a new prefix, or add to it with '
                'mode="append"'
            )
        if not self.remote:
            if self.mode == "create" and (Path(self.path) / "dataset.json").exists():
                raise FileExistsError(f"{self.path}: a dataset is already there; mode='append' adds to it")
            Path(self.path).mkdir(parents=True, exist_ok=True)
            self._remove_parts()
        if self._tally is not None and self._watch is None:
            self._start_progress()

    def _start_progress(self) -> None:
        stack = contextlib.ExitStack()
        report = stack.enter_context(reporter(self._progress, "write", "byte"))
        tally = _Tally.options(name=self._tally).remote()
        stack.callback(ray.kill, tally)
        stop = threading.Event()

        def watch() -> None:
            done = -1
            while True:
                stopped = stop.wait(_PROGRESS_EVERY)
                try:
                    # Never backwards: a retried task's bytes count again from 0 (_Counts),
                    # and the bar waits until the redone bytes pass what it showed.
                    now = max(done, ray.get(tally.get.remote(), timeout=10))
                except Exception:  # noqa: BLE001 - progress never fails the write
                    now = done
                if report is not None and now >= 0 and (now != done or stopped):
                    report(now, now if stopped else 0)
                done = now
                if stopped:
                    return

        thread = threading.Thread(target=watch, name="zrecord-write-progress", daemon=True)
        thread.start()
        self._watch = (thread, stop, stack)

    def _stop_progress(self) -> None:
        if self._watch is None:
            return
        thread, stop, stack = self._watch
        self._watch = None
        stop.set()
        thread.join()
        stack.close()

    def _remove_parts(self) -> None:
        for leftover in Path(self.path).glob(".zrecord-part-*"):
            shutil.rmtree(leftover, ignore_errors=True)

    def write(self, blocks: Iterable[Any], ctx: Any) -> "str | None":
        """One write task: its blocks into its part; returns the part (JSON) or None when
        the task saw no sample."""
        task = int(ctx.task_idx)
        scratch = None
        if self.remote:
            scratch = Path(tempfile.mkdtemp(prefix="zrecord-part-"))
            part = scratch / "part"
        else:
            part = Path(self.path) / _zrecord._part_dir(task)
            # An earlier attempt of this task (Ray runs it again after a failure) wrote here.
            shutil.rmtree(part, ignore_errors=True)
        writer = None
        tally = None
        attempt = uuid.uuid4().hex  # a retried task counts anew (_Counts)
        if self._tally is not None:
            with contextlib.suppress(ValueError):  # no actor: the driver watches nothing
                tally = ray.get_actor(self._tally)
        try:
            for block in blocks:
                acc = BlockAccessor.for_block(block)
                rows = acc.num_rows()
                if rows == 0:
                    continue
                step = max(1, self.chunk_bytes * rows // max(1, acc.size_bytes()))
                for start in range(0, rows, step):
                    piece = BlockAccessor.for_block(acc.slice(start, min(rows, start + step)))
                    columns, specs = _block(piece.to_numpy())
                    if writer is None:
                        for spec in specs:
                            spec["codec"] = self.codec
                        writer = _zrecord._DatasetWriter(
                            part, specs, shard_records=self.shard_records, min_savings=self.min_savings,
                            skip_empty=self.skip_empty,
                        )
                    writer.write(columns)
                    if tally is not None:
                        tally.add.remote(task, attempt, piece.size_bytes())
            if tally is not None:
                # The tally has every byte of this task before the driver's last report:
                # one caller's actor calls run in order.
                with contextlib.suppress(Exception):
                    ray.get(tally.get.remote(), timeout=30)
            if writer is None:
                return None
            writer.commit()
            writer = None
            # An append names its shards after the write (Ray's id for it, the same in a
            # retried task), so they never meet the dataset's or another write's.
            tag = ""
            if self.remote and self.mode == "append":
                tag = str(ctx.kwargs.get("write_uuid") or "")[:16] or _zrecord._write_tag()
            return _zrecord._finish_part(part, self.path, task, self.storage_options, tag)
        finally:
            if writer is not None:
                writer.discard()
            if scratch is not None:
                shutil.rmtree(scratch, ignore_errors=True)

    def on_write_complete(self, write_result: Any) -> None:
        self._stop_progress()
        parts = [p for p in write_result.write_returns if p is not None]
        if not parts:
            self.samples = 0
            return
        self.samples = _zrecord._commit_parts(self.path, parts, self.storage_options, self.mode == "append")

    def on_write_failed(self, error: Exception) -> None:
        self._stop_progress()
        if not self.remote:
            self._remove_parts()


def write(
    dataset: "ray.data.Dataset",
    path: "str | Path",
    *,
    tasks: "int | None" = None,
    rows_per_task: "int | None" = None,
    **options: Any,
) -> int:
    """Write the Ray dataset ``dataset`` as a zrecord dataset at ``path`` with write tasks in
    parallel; returns the number of samples committed. ``options`` are :class:`Datasink`'s
    (``storage_options``, ``codec``, ``shard_records``, ``mode``, ``progress``, ...).

    Ray runs one write task per block, and a read merges small inputs into few blocks:
    ``ray.data.read_parquet`` of eight small files gives one block, so
    ``write_datasink(Datasink(...))`` writes with one task on one core, and
    ``override_num_blocks`` does not change it. Here the blocks are first redistributed
    into ``tasks`` of about equal size (default: the cluster's CPUs; Ray's
    ``repartition(tasks)``, which holds the blocks in Ray's object store, spilling to disk,
    until they are split), or, with ``rows_per_task``, cut as they stream by into blocks of
    that many rows (``repartition(target_num_rows_per_block=...)``; nothing is held, for
    inputs larger than the object store). Each task writes one part, and the parts are
    committed in task order: the samples come in the order Ray handed out the blocks (the
    input's order only with Ray's ``DataContext.execution_options.preserve_order``).
    """
    if tasks is not None and rows_per_task is not None:
        raise ValueError("give tasks or rows_per_task, not both")
    if rows_per_task is not None:
        if int(rows_per_task) < 1:
            raise ValueError(f"rows_per_task must be >= 1, got {rows_per_task}")
        dataset = dataset.repartition(target_num_rows_per_block=int(rows_per_task))
    else:
        count = int(tasks) if tasks is not None else int(ray.cluster_resources().get("CPU", 1))
        if count < 1:
            raise ValueError(f"tasks must be >= 1, got {tasks}")
        dataset = dataset.repartition(count)
    sink = Datasink(path, **options)
    dataset.write_datasink(sink)
    return int(sink.samples or 0)


def _save_mode(mode: Any) -> "str | None":
    """``mode`` as "append", "create" or None (the default), from a string or Ray's SaveMode."""
    if mode is None:
        return None
    name = str(getattr(mode, "value", mode)).lower()
    if name in ("append", "create", "error"):
        return "create" if name == "error" else name
    raise ValueError(f"mode {mode!r}: zrecord's Datasink takes 'append' or 'create' ('error')")


def _arrow_block(batch: dict) -> "pa.Table":
    """A batch holding Arrow string or binary columns as an Arrow block; its other columns
    made Arrow as Ray makes them (tensor columns for arrays of more than one dimension)."""
    others = {k: v for k, v in batch.items() if not isinstance(v, pa.Array)}
    table = BlockAccessor.batch_to_block(others) if others else None
    columns = {}
    for name, value in batch.items():
        columns[name] = value if isinstance(value, pa.Array) else table.column(name)
    return pa.table(columns)


class _Source(_RayDatasource):
    """A zrecord dataset as a Ray Data source: one read task per shard."""

    def __init__(self, path: "str | Path", storage_options: "Mapping[str, str] | None", batch_bytes: int) -> None:
        super().__init__()
        self.path = str(path)
        self.storage_options = dict(storage_options) if storage_options else None
        self.batch_bytes = batch_bytes
        with self._open() as ds:
            if not ds.is_multi_field:
                self.bounds = [0, len(ds)]
            else:
                self.bounds = list(ds._live().shard_bounds)
            self.fields = ds.fields
            self.footprint = sum(
                int(np.prod(f.shape, dtype=np.int64)) * f.dtype.itemsize for f in ds.fields if f.kind == "fixed"
            )

    def _open(self) -> Dataset:
        if self.storage_options is not None:
            return Dataset(self.path, storage_options=self.storage_options)
        return Dataset(self.path)

    def get_name(self) -> str:
        return "ZrecordRead"

    def estimate_inmemory_data_size(self) -> "int | None":
        return None

    def get_read_tasks(self, parallelism: int, per_task_row_limit: "int | None" = None, data_context: Any = None):
        tasks = []
        for start, end in zip(self.bounds, self.bounds[1:]):
            if end == start:
                continue
            meta = BlockMetadata(num_rows=end - start, size_bytes=None, input_files=None, exec_stats=None)
            tasks.append(ReadTask(self._reader(start, end), meta, per_task_row_limit=per_task_row_limit))
        return tasks

    def _reader(self, start: int, end: int):
        source = self
        rows = max(1, source.batch_bytes // max(1, source.footprint or 4096))

        def read_shard():
            with source._open() as ds:
                for at in range(start, end, rows):
                    batch = ds[at : min(end, at + rows)]
                    if not isinstance(batch, dict):
                        batch = {"data": batch}
                    for f in ds.fields:
                        if f.kind in ("bytes", "string", "image"):
                            kind = pa.string() if f.kind == "string" else pa.binary()
                            batch[f.name] = pa.array(batch[f.name], type=kind)
                        elif f.ragged:
                            col = np.empty(len(batch[f.name]), dtype=object)
                            col[:] = batch[f.name]
                            batch[f.name] = col
                    if any(f.kind in ("bytes", "string", "image") for f in ds.fields):
                        yield _arrow_block(batch)
                    else:
                        yield BlockAccessor.batch_to_block(batch)

        return read_shard


def read(
    path: "str | Path",
    *,
    storage_options: "Mapping[str, str] | None" = None,
    batch_bytes: int = 64 << 20,
    **read_args: Any,
) -> "ray.data.Dataset":
    """A zrecord dataset (local or at a URL) as a Ray dataset: one read task per shard,
    each yielding blocks of about ``batch_bytes``. A fixed field is a tensor column; a
    ragged field a column of 1-D arrays; a bytes field an Arrow binary column and a string
    field an Arrow string column. ``read_args`` go to ``ray.data.read_datasource``."""
    return ray.data.read_datasource(_Source(path, storage_options, batch_bytes), **read_args)
