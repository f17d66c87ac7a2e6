"""Feeding JAX: a :class:`zrecord.DataLoader`'s batches as global ``jax.Array``\\ s.

``import zrecord.jax`` imports jax; ``import zrecord`` never does. Each process runs its own
loader, which reads its rank's slice of every global batch (rank and world size default to
``jax.process_index()`` and ``jax.process_count()`` once ``jax.distributed.initialize()``
has run), and the wrapper assembles the slices into one global array per key with
``jax.make_array_from_process_local_data``::

    mesh = Mesh(jax.devices(), ("batch",))
    batches = zrecord.jax.loader(loader, NamedSharding(mesh, P("batch")), prefetch=2)
    for batch in batches:
        state = train_step(state, batch["data"], batch["label"])   # global arrays
        ...
        checkpoint["data"] = batches.state_dict()

- **Layout.** Row ``r * b + i`` of a global array is rank ``r``'s sample ``i`` (``b`` the
  per-process batch size) when process ``r`` owns the ``r``-th block of rows, as it does on
  a mesh over ``jax.devices()`` in their order: the global array is then zrecord's global
  batch, the same whatever the number of processes. The first batch checks that the
  loader's rank and world size agree with the block of rows and the number of blocks the
  sharding gives this process (a loader made before ``jax.distributed.initialize()`` would
  not), and raises ``ValueError`` if not.
- **Prefetch.** After ``next()`` returns batch ``t``, batches ``t + 1 .. t + prefetch`` are
  already on their way to the devices (JAX copies asynchronously), so the transfer overlaps
  the step that uses batch ``t``.
- **Exact state.** Each prefetched batch carries the loader's state taken right after it
  was read; ``state_dict()`` returns the state of the last batch **handed out**, never of
  the ones prefetched behind it. Resuming from it (``loader.load_state_dict`` or
  ``DataLoader(..., state=...)``, then a new wrapper) yields the batch after the last one
  handed out, whatever ``prefetch`` was.
- **Errors in order.** An exception from the loader while reading ahead is raised by the
  ``next()`` that would have returned that batch, after the batches before it.
- **Dtypes.** JAX without ``jax_enable_x64`` holds 64-bit integers and floats as 32-bit
  ones: an ``int64`` label becomes ``int32``.
"""

from __future__ import annotations

import collections
from typing import Any, Deque, Dict, Mapping, Optional, Tuple, Union

import jax
import numpy as np

from ._epochs import Epochs

__all__ = ["JaxLoader", "loader"]

ShardingTree = Union["jax.sharding.Sharding", Mapping[str, Any]]


def _row_block(sharding: "jax.sharding.Sharding", global_shape: Tuple[int, ...]) -> Optional[Tuple[int, int]]:
    """``(block, blocks)``: this process's devices hold rows ``block * b .. (block + 1) * b``
    of ``blocks * b``, or ``None`` when their rows are not one such block, where the check
    does not apply. A batch axis replicated on every process is block 0 of 1."""
    rows = global_shape[0]
    spans = set()
    for index in sharding.addressable_devices_indices_map(global_shape).values():
        start, stop, _ = index[0].indices(rows) if index else (0, rows, 1)
        spans.add((start, stop))
    lo, hi = min(s for s, _ in spans), max(e for _, e in spans)
    local = hi - lo
    covered = sum(e - s for s, e in spans)
    if local == 0 or covered != local or lo % local or rows % local:
        return None
    return lo // local, rows // local


class JaxLoader(Epochs):
    """Iterates global ``jax.Array`` batches; see the module docs. Made by :func:`loader`."""

    def __init__(self, source: Any, sharding: ShardingTree, prefetch: int = 2) -> None:
        if isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 0:
            raise ValueError(f"prefetch must be an int >= 0, got {prefetch!r}")
        self.loader = source
        self.sharding = sharding
        self.prefetch = prefetch
        # (global batch, the loader's state right after reading it), oldest first.
        self._queue: Deque[Tuple[Dict[str, Any], Optional[Dict[str, Any]]]] = collections.deque()
        self._handed: Optional[Dict[str, Any]] = None
        self._started = False
        self._checked = False
        self._ended = False
        # An error of the loader while reading ahead, raised when its turn comes.
        self._error: Optional[BaseException] = None

    def _global(self, sharding: "jax.sharding.Sharding", local: Any) -> "jax.Array":
        out = jax.make_array_from_process_local_data(sharding, np.asarray(local))
        if not self._checked:
            self._check_layout(sharding, out.shape)
        return out

    def _check_layout(self, sharding: "jax.sharding.Sharding", global_shape: Tuple[int, ...]) -> None:
        rank = getattr(self.loader, "rank", None)
        world = getattr(self.loader, "world_size", None)
        if not isinstance(rank, int) or not isinstance(world, int) or not global_shape:
            return
        block = _row_block(sharding, tuple(global_shape))
        if block is not None and block != (rank, world):
            raise ValueError(
                f"the loader reads rank {rank} of {world}, but the sharding gives this process "
                f"(jax.process_index() {jax.process_index()} of {jax.process_count()}) row block "
                f"{block[0]} of {block[1]}: make the DataLoader after jax.distributed.initialize(), "
                f"or pass rank={block[0]}, world_size={block[1]}"
            )

    def _to_global(self, local: Mapping[str, Any]) -> Dict[str, Any]:
        out = {}
        for key, value in local.items():
            if isinstance(self.sharding, jax.sharding.Sharding):
                sharding = self.sharding
            elif key in self.sharding:
                sharding = self.sharding[key]
            else:
                raise ValueError(f"the batch has {key!r} but the sharding dict has only {sorted(self.sharding)}")
            out[key] = jax.tree_util.tree_map(lambda x: self._global(sharding, x), value)
        # Every array of the first batch passed: the layout cannot change after it.
        self._checked = True
        return out

    def _read(self) -> bool:
        try:
            local = next(self.loader)
        except StopIteration:
            return False
        state = self.loader.state_dict() if hasattr(self.loader, "state_dict") else None
        self._queue.append((self._to_global(local), state))
        return True

    def __iter__(self) -> "JaxLoader":
        return self

    def __next__(self) -> Dict[str, "jax.Array"]:
        self._started = True
        while self._error is None and not self._ended and len(self._queue) <= self.prefetch:
            try:
                self._ended = not self._read()
            except Exception as e:  # noqa: BLE001 - raised in its turn, after the batches before it
                self._error = e
        if not self._queue:
            if self._error is not None:
                error, self._error = self._error, None
                raise error
            raise StopIteration
        batch, self._handed = self._queue.popleft()
        return batch

    def state_dict(self) -> Dict[str, Any]:
        """The loader's state after the last batch this wrapper returned: prefetched batches
        are not counted. Before the first batch, the loader's own state."""
        if self._handed is not None:
            return self._handed
        if self._queue:  # pragma: no cover - a batch is handed out whenever one is queued
            raise RuntimeError("internal: batches were prefetched before any was handed out")
        return self.loader.state_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resumes the wrapped loader at ``state``; only before the first batch."""
        if self._started:
            raise RuntimeError(
                "load_state_dict() must come before the first batch: this wrapper has read "
                "ahead; make a new loader with state=... instead"
            )
        self.loader.load_state_dict(state)

    @property
    def steps_per_epoch(self) -> Optional[int]:
        """The wrapped loader's batches per epoch (``None`` when it has no epochs)."""
        return self.loader.steps_per_epoch

    @property
    def step(self) -> int:
        """Global batches this wrapper handed out (resumed ones included): the ``step`` of
        :meth:`state_dict`, never counting the batches prefetched behind it."""
        if self._handed is not None:
            return self._handed["step"]
        return self.loader.step

    def _epoch_of(self, step: int) -> Optional[Tuple[int, int]]:
        epoch_of = getattr(self.loader, "_epoch_of", None)  # a zrecord DataLoader's
        return None if epoch_of is None else epoch_of(step)

    def close(self) -> None:
        """Drops the prefetched batches and closes the wrapped loader."""
        self._queue.clear()
        self.loader.close()

    def __enter__(self) -> "JaxLoader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"zrecord.jax.loader({self.loader!r}, {self.sharding!r}, prefetch={self.prefetch})"


def loader(source: Any, sharding: ShardingTree, prefetch: int = 2) -> JaxLoader:
    """Wraps ``source`` (a :class:`zrecord.DataLoader`, or any iterator of dicts of numpy
    arrays) so that it yields dicts of global ``jax.Array``\\ s.

    Args:
        source: this process's loader: its batches are this process's rows of each global
            batch.
        sharding: a ``jax.sharding.Sharding`` for every array (typically
            ``NamedSharding(mesh, PartitionSpec("batch"))``), or a dict of them by key
            (``{"data": ..., "label": ...}``).
        prefetch: batches sent to the devices ahead of the one returned (0: none).

    Raises:
        ValueError: ``prefetch`` is negative; from the first ``next()``, the loader's rank or
            world size disagrees with the rows the sharding gives this process.
    """
    return JaxLoader(source, sharding, prefetch=prefetch)
