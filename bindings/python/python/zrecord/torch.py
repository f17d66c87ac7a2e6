"""Feeding PyTorch: a :class:`zrecord.DataLoader`'s batches as torch tensors.

``import zrecord.torch`` imports torch; ``import zrecord`` never does. ::

    import zrecord, zrecord.torch

    loader = zrecord.DataLoader(data, label, batch_size=64, mode=zrecord.Sampler.Mode.SHUFFLE)
    batches = zrecord.torch.loader(loader, device="cuda", pin_memory=True)
    for batch in batches:
        batch["data"], batch["label"]      # torch.Tensor on the device
        ...
        checkpoint["data"] = batches.state_dict()

Three promises:

- **No copy.** Each numpy array of a batch becomes a tensor through ``torch.from_numpy``,
  which shares its memory. The only copies are the ones asked for: pinning (which is a copy
  into page-locked memory) and the move to ``device``. A read-only array (a ``transform``
  that returned a view of a read-only buffer) is copied once, because a torch tensor is
  always writable and writing through it would fault.
- **Exact state.** The wrapper pulls a batch from the loader only when the caller asks for
  one, so ``state_dict()`` (the loader's, passed through) is the position after the last
  batch handed out, never one that was moved ahead.
- **Pinning only where it means something.** ``pin_memory=True`` pins when torch has an
  accelerator (``torch.accelerator.is_available()``, or ``torch.cuda.is_available()`` on
  an older torch). Without one there is no host-to-device copy for pinning to speed up, and
  torch cannot pin at all (it raises "Found no NVIDIA driver"), so the wrapper warns once,
  when it is made, and leaves the batches unpinned, as ``torch.utils.data.DataLoader``
  does. ``pinned`` says which happened.
"""

from __future__ import annotations

import warnings
from typing import Any, Dict, Mapping, Optional, Tuple, Union

import numpy as np
import torch

from ._epochs import Epochs

__all__ = ["TorchLoader", "accelerator_available", "loader", "to_tensors"]

Device = Union[str, int, "torch.device"]


def accelerator_available() -> bool:
    """Whether torch has a device that pinned host memory speeds copies to."""
    acc = getattr(torch, "accelerator", None)
    if acc is not None and hasattr(acc, "is_available"):
        return bool(acc.is_available())
    return bool(torch.cuda.is_available())


def _tensor(key: str, array: np.ndarray) -> "torch.Tensor":
    if not array.flags.writeable:
        array = array.copy()
    try:
        return torch.from_numpy(array)
    except (TypeError, RuntimeError, ValueError) as e:
        raise TypeError(
            f"batch[{key!r}] (an ndarray of dtype {array.dtype}, shape {array.shape}) "
            f"cannot become a torch tensor: {e}"
        ) from None


def to_tensors(
    batch: Any,
    device: Optional[Device] = None,
    pin_memory: bool = False,
    _key: str = "",
) -> Any:
    """``batch`` with every ndarray made a tensor (``torch.from_numpy``, no copy), pinned if
    ``pin_memory``, and moved to ``device`` with ``non_blocking=True`` if given. Dicts,
    lists and tuples are walked; other values are returned as they are. Unlike
    :func:`loader`, this pins when told to, so without an accelerator torch raises: ask
    :func:`accelerator_available` first."""
    if isinstance(batch, np.ndarray):
        t = _tensor(_key, batch)
        if pin_memory:
            t = t.pin_memory()
        if device is not None:
            t = t.to(device, non_blocking=True)
        return t
    if isinstance(batch, Mapping):
        return {k: to_tensors(v, device, pin_memory, f"{_key}.{k}" if _key else str(k)) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        items = [to_tensors(v, device, pin_memory, f"{_key}[{i}]") for i, v in enumerate(batch)]
        return type(batch)(items) if isinstance(batch, list) else tuple(items)
    return batch


class TorchLoader(Epochs):
    """Iterates a loader's batches as dicts of torch tensors; see the module docs.

    Made by :func:`loader`. ``state_dict()``, ``load_state_dict()``, ``steps_per_epoch``
    and ``close()`` are the wrapped loader's (``.loader``), which stays exact because a
    batch is pulled from it only inside ``next()``.
    """

    def __init__(self, source: Any, device: Optional[Device] = None, pin_memory: bool = False) -> None:
        self.loader = source
        self.device = torch.device(device) if device is not None else None
        self.pinned = bool(pin_memory) and accelerator_available()
        if pin_memory and not self.pinned:
            warnings.warn(
                "zrecord.torch.loader(pin_memory=True): torch has no accelerator here, so "
                "batches are not pinned (pinning only speeds host-to-device copies)",
                UserWarning,
                stacklevel=3,
            )

    def __iter__(self) -> "TorchLoader":
        return self

    def __next__(self) -> Dict[str, "torch.Tensor"]:
        return to_tensors(next(self.loader), self.device, self.pinned)

    def state_dict(self) -> Dict[str, Any]:
        """The wrapped loader's state: the position after the last batch this wrapper
        returned (nothing is read ahead here)."""
        return self.loader.state_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resumes the wrapped loader at ``state`` (before the first batch)."""
        self.loader.load_state_dict(state)

    @property
    def steps_per_epoch(self) -> Optional[int]:
        """The wrapped loader's batches per epoch (``None`` when it has no epochs)."""
        return self.loader.steps_per_epoch

    @property
    def step(self) -> int:
        """Global batches handed out (the wrapped loader's: nothing is read ahead here)."""
        return self.loader.step

    def _epoch_of(self, step: int) -> Optional[Tuple[int, int]]:
        epoch_of = getattr(self.loader, "_epoch_of", None)  # a zrecord DataLoader's
        return None if epoch_of is None else epoch_of(step)

    def close(self) -> None:
        """Closes the wrapped loader."""
        self.loader.close()

    def __enter__(self) -> "TorchLoader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"zrecord.torch.loader({self.loader!r}, device={self.device}, pinned={self.pinned})"


def loader(source: Any, device: Optional[Device] = None, pin_memory: bool = False) -> TorchLoader:
    """Wraps ``source`` (a :class:`zrecord.DataLoader`, or any iterator of dicts of numpy
    arrays) so that it yields dicts of torch tensors that share the batch's memory.

    Args:
        source: the loader; its ``state_dict()`` stays exact (see :class:`TorchLoader`).
        device: where to move each tensor (``"cuda"``, ``torch.device("cuda", rank)``...),
            with ``non_blocking=True``; ``None`` keeps them on the CPU, without a copy.
        pin_memory: pin each batch before moving it, when torch has an accelerator; without
            one, a ``UserWarning`` now and no pinning.

    Raises:
        TypeError: from ``next()``, when an array has a dtype torch has no type for (its
            key is named).
    """
    return TorchLoader(source, device=device, pin_memory=pin_memory)
