"""The endless index sampler, with loaderx's ``Sampler.Mode`` constants."""

from __future__ import annotations

import enum

from ._zrecord import Sampler as _NativeSampler

__all__ = ["Sampler"]


class Sampler(_NativeSampler):
    """An endless generator of index batches over ``0..length``.

    ``Sampler(length, batch_size, mode, seed=42)``. ``Sampler.Mode.SEQUENTIAL`` (0) slides a
    window of ``batch_size`` over the index space treated as a circle, so no batch is
    truncated at the tail; ``Sampler.Mode.IID`` (1) draws uniformly with replacement from a
    stream fixed by ``seed`` (the same stream on every platform). ``next()`` — or iterating —
    returns a fresh ``uint64`` array of ``batch_size`` indices, forever.
    """

    class Mode(enum.IntEnum):
        """How indices are drawn (plain ints, as loaderx's constants are)."""

        SEQUENTIAL = 0
        IID = 1

    def __repr__(self) -> str:
        return f"Sampler(length={self.length}, batch_size={self.batch_size}, mode={self.Mode(self.mode).name})"
