"""Epochs of a loader, for ``DataLoader`` and its torch and JAX wrappers alike.

The arithmetic is the core stream's (``Stream::epoch_of``); this only names it. A class
using :class:`Epochs` supplies ``step`` (global batches handed out) and ``_epoch_of(step)``
(``(epoch, step within it)``, or None for a stream without epochs), and is an iterator.
"""

from __future__ import annotations

from typing import Any, Iterator, Optional, Tuple


class Epochs:
    step: int

    def _epoch_of(self, step: int) -> Optional[Tuple[int, int]]:  # pragma: no cover - abstract
        raise NotImplementedError

    @property
    def epoch(self) -> Optional[int]:
        """The epoch of the next batch (0 first), counting resumed ones; None for the
        endless SEQUENTIAL, IID and mixture streams."""
        at = self._epoch_of(self.step)
        return None if at is None else at[0]

    @property
    def steps_left_in_epoch(self) -> Optional[int]:
        """Batches from the next one to the end of its epoch (``steps_per_epoch`` at an
        epoch's start); None without epochs."""
        at = self._epoch_of(self.step)
        if at is None:
            return None
        return self.steps_per_epoch - at[1]  # type: ignore[attr-defined]

    def epoch_iter(self) -> Iterator[Any]:
        """The rest of the current epoch, then stop: after a mid-epoch resume, the batches up
        to the epoch's end, not a whole epoch more. ``for batch in loader.epoch_iter()``
        once per epoch. A ``TypeError`` for a stream without epochs."""
        left = self.steps_left_in_epoch
        if left is None:
            raise TypeError("this loader's stream has no epochs (only SHUFFLE over one dataset has, packed in shuffled rows or not)")
        for _ in range(left):
            yield next(self)  # type: ignore[call-overload]
