"""The endless DataLoader: batches of ``{"data": ..., "label": ...}`` forever.

For zrecord datasets the whole sample → gather → collate pipeline runs in Rust threads that
never take the GIL (see ``_Pipeline``); Python only wraps each finished batch, and calls
``transform`` when one is given. Batch ``k`` is always the sampler's ``k``-th draw, whatever
the number of workers, so a seed fixes the stream.

Any other dataset object with ``__len__`` and ``__getitems__`` (loaderx's, your own) is
served by Python threads, as loaderx serves it.
"""

from __future__ import annotations

import atexit
import os
import queue
import threading
import weakref
from typing import Any, Callable, Optional

import numpy as np

from ._zrecord import _Pipeline
from .dataset import Dataset
from .sampler import Sampler, check_seed

__all__ = ["DataLoader"]

Transform = Callable[[tuple], tuple]

# Loaders not yet closed, closed at interpreter exit so that no thread outlives it.
_LIVE: "weakref.WeakSet[DataLoader]" = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for loader in list(_LIVE):
        loader.close()


class _ThreadedPipeline:
    """loaderx's pipeline for datasets that are not zrecord datasets: Python threads."""

    _POLL = 0.1

    def __init__(self, dataset, labelset, num_workers, batch_size, prefetch_size, mode, seed):
        self._dataset, self._labelset = dataset, labelset
        self._sampler = Sampler(len(dataset), batch_size, mode, seed)
        depth = max(1, prefetch_size)
        self._indices: queue.Queue = queue.Queue(maxsize=depth)
        self._batches: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._pid = os.getpid()
        self._threads = [threading.Thread(target=self._sample, name="zrecord-sampler", daemon=True)]
        self._threads += [
            threading.Thread(target=self._fetch, name=f"zrecord-loader-{i}", daemon=True)
            for i in range(max(1, num_workers))
        ]
        for t in self._threads:
            t.start()

    def _put(self, q: queue.Queue, item: Any) -> bool:
        while not self._stop.is_set():
            try:
                q.put(item, timeout=self._POLL)
                return True
            except queue.Full:
                continue
        return False

    def _sample(self) -> None:
        while not self._stop.is_set():
            self._put(self._indices, self._sampler.next())

    def _fetch(self) -> None:
        while not self._stop.is_set():
            try:
                idxs = self._indices.get(timeout=self._POLL)
            except queue.Empty:
                continue
            try:
                item: Any = (self._dataset.__getitems__(idxs), self._labelset.__getitems__(idxs))
            except BaseException as e:  # handed to the consumer, raised there
                item = e
            self._put(self._batches, item)

    def next(self):
        if os.getpid() != self._pid:
            raise RuntimeError("this DataLoader was created in a parent process; create a new one after fork()")
        while True:
            if self._stop.is_set():
                raise StopIteration
            try:
                item = self._batches.get(timeout=self._POLL)
            except queue.Empty:
                continue
            if isinstance(item, BaseException):
                raise item
            return item

    def close(self) -> None:
        self._stop.set()
        if os.getpid() != self._pid:
            return
        for t in self._threads:
            if t is not threading.current_thread():
                t.join()

    @property
    def closed(self) -> bool:
        return self._stop.is_set()

    @property
    def threads_alive(self) -> int:
        return sum(t.is_alive() for t in self._threads)


def _describe(obj: Any) -> str:
    """What a transform returned, for an error message."""
    kind = type(obj).__name__
    if isinstance(obj, (tuple, list)):
        return f"a {kind} of {len(obj)} items"
    if isinstance(obj, np.ndarray):
        return f"an ndarray of shape {obj.shape}"
    return "None" if obj is None else f"a {kind}"


class DataLoader:
    """An endless iterator of ``{"data": batch, "label": batch}`` dicts.

    Args:
        dataset: samples; a :class:`Dataset` (fast path) or any object with ``__len__`` and
            ``__getitems__(idxs)``.
        labelset: labels, of the same length as ``dataset``.
        num_workers: gathering threads (0 gathers inside ``next()``).
        batch_size: samples per batch.
        prefetch_size: batches prepared ahead of the consumer.
        mode: ``Sampler.Mode.IID`` (1, default) or ``Sampler.Mode.SEQUENTIAL`` (0).
        seed: seed of the IID stream, an integer in ``0 .. 2**64 - 1``.
        transform: called as ``transform((data, label))`` and must return a
            ``(data, label)`` pair (a tuple or list of two); anything else is a
            ``TypeError`` naming what it returned. Only called when given.

    There are no epochs, so ``len()`` raises ``TypeError``. ``close()`` (or leaving a
    ``with`` block) stops and joins every thread promptly, even when the consumer stopped
    mid-stream; loaders still open at interpreter exit are closed then. A loader is bound
    to the process that made it: after ``fork()``, make a new one in the child.

    Raises:
        ValueError: ``dataset`` and ``labelset`` differ in length, a size is invalid, or
            ``seed`` is outside ``0 .. 2**64 - 1`` (loaderx 0.5.4 raised ``OverflowError``
            from its C binding there).
        TypeError: ``seed`` is not an integer.
    """

    def __init__(
        self,
        dataset: Any,
        labelset: Any,
        num_workers: int = 4,
        batch_size: int = 256,
        prefetch_size: int = 4,
        mode: int = 1,
        seed: int = 42,
        transform: Optional[Transform] = None,
    ) -> None:
        self.dataset = dataset
        self.labelset = labelset
        if len(dataset) != len(labelset):
            raise ValueError("dataset and labelset must have the same length")
        if num_workers < 0:
            raise ValueError(f"num_workers must be >= 0, got {num_workers}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        seed = check_seed(seed)
        self.transform = transform
        self.batch_size = batch_size
        if isinstance(dataset, Dataset) and isinstance(labelset, Dataset):
            self._pipeline: Any = _Pipeline(
                dataset.store, dataset._itemsize, dataset.dtype, dataset.shape,
                labelset.store, labelset._itemsize, labelset.dtype, labelset.shape,
                num_workers, batch_size, prefetch_size, int(mode), int(seed),
            )
        else:
            self._pipeline = _ThreadedPipeline(
                dataset, labelset, num_workers, batch_size, prefetch_size, int(mode), int(seed)
            )
        _LIVE.add(self)

    def __len__(self) -> int:
        raise TypeError("Eternal loader has no length.")

    def __iter__(self) -> "DataLoader":
        return self

    def __next__(self) -> dict:
        data, label = self._pipeline.next()
        if self.transform is not None:
            out = self.transform((data, label))
            if not isinstance(out, (tuple, list)) or len(out) != 2:
                raise TypeError(f"transform must return a (data, label) pair, but returned {_describe(out)}")
            data, label = out
        return {"data": data, "label": label}

    @property
    def closed(self) -> bool:
        """True once :meth:`close` has been called."""
        return self._pipeline.closed

    def close(self) -> None:
        """Stop and join every worker thread. Idempotent; iteration then stops."""
        pipeline = getattr(self, "_pipeline", None)
        if pipeline is not None:
            pipeline.close()
        _LIVE.discard(self)

    def __enter__(self) -> "DataLoader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - late in interpreter shutdown, module globals may be gone
            pass
