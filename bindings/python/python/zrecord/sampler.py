"""The endless index sampler, with loaderx's ``Sampler.Mode`` constants."""

from __future__ import annotations

import enum
import operator
from typing import Any

import numpy as np

from ._zrecord import Sampler as _NativeSampler

__all__ = ["Sampler", "check_seed"]


def check_seed(seed: Any) -> int:
    """``seed`` as an int in ``0 .. 2**64 - 1``, or a clear ``TypeError`` / ``ValueError``
    (loaderx 0.5.4 raised ``OverflowError`` from its C binding for a negative seed)."""
    if isinstance(seed, (bool, np.bool_)):
        raise TypeError(f"seed must be an integer, not {type(seed).__name__}")
    try:
        value = operator.index(seed)
    except TypeError:
        raise TypeError(f"seed must be an integer, not {type(seed).__name__}") from None
    if not 0 <= value < 1 << 64:
        raise ValueError(f"seed must be in 0 .. 2**64 - 1, got {value}")
    return value


class Sampler(_NativeSampler):
    """An endless generator of index batches over ``0..length``.

    ``Sampler(length, batch_size, mode, seed=42)``. ``Sampler.Mode.SEQUENTIAL`` (0) slides a
    window of ``batch_size`` over the index space treated as a circle, so no batch is
    truncated at the tail; ``Sampler.Mode.IID`` (1) draws uniformly with replacement from a
    stream fixed by ``seed`` (the same stream on every platform); ``Sampler.Mode.SHUFFLE``
    (2) visits every index once per epoch, in an order fixed by ``(seed, epoch)``, and drops
    the ``length % batch_size`` indices of each epoch's order that would not fill a batch.
    ``next()`` — or iterating — returns a fresh ``uint64`` array of ``batch_size`` indices,
    forever.

    ``seed`` is an integer in ``0 .. 2**64 - 1``: another integer is a ``ValueError``,
    anything else a ``TypeError``.
    """

    def __new__(cls, length: int, batch_size: int, mode: int, seed: Any = 42) -> "Sampler":
        return super().__new__(cls, length, batch_size, mode, check_seed(seed))

    class Mode(enum.IntEnum):
        """How indices are drawn (plain ints, as loaderx's constants are)."""

        SEQUENTIAL = 0
        IID = 1
        SHUFFLE = 2

    def __repr__(self) -> str:
        return f"Sampler(length={self.length}, batch_size={self.batch_size}, mode={self.Mode(self.mode).name})"
