"""The job a loader is part of: its rank and world size, and ranks that agree or stop.

:func:`resolve_world` finds this process's rank and world size; :func:`check_ranks_agree`
makes sure every process of the job reads the same stream.

A sharded loader is correct only if every rank reads the same global stream: the same seed,
mode, global batch, position and dataset (length and generation), and the same world size.
Nothing else would notice a rank that resumed from another state, or started fresh beside
ranks that resumed: each would train on its slice of a different stream. So at its first
batch (and the first after a ``load_state_dict``) a loader with ``world_size > 1`` gathers
the state of every process of the job, when torch.distributed or JAX's multi-process runtime
is up, and raises :class:`RanksDisagreeError` on every rank, naming what differs, when they
are not all the same. The state is what ``state_dict()`` returns (JSON, under 1 KiB).

torch and jax are only looked at when the program imported them; zrecord imports neither.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, List, Mapping, Optional, Tuple, Union

import numpy as np

__all__ = ["RanksDisagreeError", "check_ranks_agree", "load_state", "resolve_world", "save_state"]


def _env_world() -> Optional[Tuple[int, int]]:
    """``RANK`` / ``WORLD_SIZE`` as torchrun sets them, if both are."""
    rank, world = os.environ.get("RANK"), os.environ.get("WORLD_SIZE")
    if rank is None or world is None:
        return None
    try:
        return int(rank), int(world)
    except ValueError:
        raise ValueError(f"RANK={rank!r} and WORLD_SIZE={world!r} must be integers") from None


def _torch_world() -> Optional[Tuple[int, int]]:
    """An initialised torch.distributed process group's rank and size. torch is only
    looked at when the program imported it: zrecord never imports torch."""
    torch = sys.modules.get("torch")
    dist = getattr(torch, "distributed", None) if torch is not None else None
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    return int(dist.get_rank()), int(dist.get_world_size())


def _jax_world() -> Optional[Tuple[int, int]]:
    """``jax.process_index()`` / ``process_count()`` once ``jax.distributed.initialize``
    ran. jax is only looked at when the program imported it, and whether its distributed
    client is up is asked without starting a backend: ``jax.distributed.is_initialized()``
    (jax >= 0.5.1), else the client field that function reads on older versions."""
    jax = sys.modules.get("jax")
    if jax is None:
        return None
    dist = getattr(jax, "distributed", None)
    is_initialized = getattr(dist, "is_initialized", None)
    if is_initialized is not None:
        up = bool(is_initialized())
    else:
        state = getattr(sys.modules.get("jax._src.distributed"), "global_state", None)
        up = getattr(state, "client", None) is not None
    if not up:
        return None
    return int(jax.process_index()), int(jax.process_count())


def resolve_world(rank: Optional[int] = None, world_size: Optional[int] = None) -> Tuple[int, int]:
    """This process's ``(rank, world_size)``, as :class:`DataLoader` resolves them.

    Explicit arguments win. What is not given comes from the first of: an initialised
    ``torch.distributed`` process group (looked at only if ``torch`` is already imported);
    the ``RANK`` and ``WORLD_SIZE`` environment variables (torchrun sets them);
    ``jax.process_index()`` / ``jax.process_count()`` (only if ``jax`` is already imported
    and ``jax.distributed.initialize()`` ran); else rank 0 of 1. ``world_size=1`` alone
    means rank 0. Raises ``ValueError`` when the result is not ``0 <= rank < world_size``.
    """
    for name, value in (("rank", rank), ("world_size", world_size)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            try:
                value = int(value.__index__())  # numpy integers and the like
            except (AttributeError, TypeError):
                raise TypeError(f"{name} must be an integer, not {type(value).__name__}") from None
            if name == "rank":
                rank = value
            else:
                world_size = value
    if rank is None or world_size is None:
        if rank is None and world_size == 1:
            rank = 0
        else:
            found = _torch_world() or _env_world() or _jax_world() or (0, 1)
            if rank is None and world_size is None:
                rank, world_size = found
            elif rank is None:
                rank = found[0]
            else:
                world_size = found[1]
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    if not 0 <= rank < world_size:
        raise ValueError(f"rank must be in 0..{world_size - 1} for world_size {world_size}, got {rank}")
    return rank, world_size


class RanksDisagreeError(ValueError):
    """The ranks of a distributed job would read different streams (raised on every rank).

    Attributes:
        differences: ``[(key, {rank: value})]`` for each state key that differs.
    """

    def __init__(self, message: str, differences: List[Tuple[str, dict]]) -> None:
        super().__init__(message)
        self.differences = differences


def _gather_torch(text: str) -> Optional[List[str]]:
    world = _torch_world()
    if world is None:
        return None
    size = world[1]
    dist = sys.modules["torch"].distributed
    out: List[Any] = [None] * size
    dist.all_gather_object(out, text)
    return [str(t) for t in out]


def _gather_jax(text: str) -> Optional[List[str]]:
    world = _jax_world()
    if world is None:
        return None
    count = world[1]
    from jax.experimental import multihost_utils  # jax is imported: the program did

    raw = text.encode()
    lengths = np.asarray(multihost_utils.process_allgather(np.array([len(raw)], dtype=np.int32))).reshape(-1)
    padded = np.zeros(int(lengths.max()), dtype=np.uint8)
    padded[: len(raw)] = np.frombuffer(raw, dtype=np.uint8)
    rows = np.asarray(multihost_utils.process_allgather(padded)).reshape(count, -1)
    return [bytes(row[: int(n)]).decode() for row, n in zip(rows, lengths)]


def _runtime_up() -> bool:
    """Whether a runtime ``_gather`` goes through (torch.distributed or JAX) is up."""
    return _torch_world() is not None or _jax_world() is not None


def _gather(text: str) -> Optional[List[str]]:
    """Every process's ``text`` in rank order, through whichever runtime is up; None when
    neither is."""
    texts = _gather_torch(text)
    return texts if texts is not None else _gather_jax(text)


def _differences(states: List[dict]) -> List[Tuple[str, dict]]:
    keys = sorted(set().union(*states))
    out = []
    for key in keys:
        values = [json.dumps(s.get(key), sort_keys=True) for s in states]
        if len(set(values)) > 1:
            out.append((key, {r: s.get(key) for r, s in enumerate(states)}))
    return out


def _message(differences: List[Tuple[str, dict]], ranks: int) -> str:
    parts = []
    for key, by_rank in differences:
        # Group the ranks by value: "rank 0 has 5; ranks 1,2,3 have 0".
        groups: dict = {}
        for rank, value in by_rank.items():
            groups.setdefault(json.dumps(value, sort_keys=True), []).append(rank)
        said = "; ".join(
            f"rank{'s' if len(rs) > 1 else ''} {','.join(map(str, rs))} {'have' if len(rs) > 1 else 'has'} {v}"
            for v, rs in groups.items()
        )
        parts.append(f"{key}: {said}")
    return (
        f"the {ranks} processes of this job would read different data streams ({' | '.join(parts)}). "
        "Every rank must make the same DataLoader and resume from the same state: save "
        "state_dict() on rank 0 and load that state on every rank (broadcast it when the hosts "
        "do not share a disk)"
    )


def check_ranks_agree(state_text: str, world_size: int) -> None:
    """Gathers every process's ``state_text`` (plus its loader's ``world_size``) and raises
    :class:`RanksDisagreeError` on every process if they differ. Does nothing in a job of
    one process, or when neither torch.distributed nor JAX's multi-process runtime is up."""
    mine = json.dumps({**json.loads(state_text), "world_size": world_size}, sort_keys=True)
    texts = _gather(mine)
    if texts is None or len(texts) < 2:
        return
    states = [json.loads(t) for t in texts]
    differences = _differences(states)
    if differences:
        raise RanksDisagreeError(_message(differences, len(states)), differences)


def save_state(path: Union[str, "os.PathLike[str]"], state: Mapping[str, Any]) -> None:
    """Saves a loader's ``state_dict()`` as JSON on rank 0 (see :func:`resolve_world`) and
    does nothing on the other ranks: written beside ``path``, flushed to disk and renamed
    over it, so a crash leaves the old state or the new one, never half of one."""
    if resolve_world()[0] != 0:
        return
    path = os.fspath(path)
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with open(tmp, "w") as f:
            json.dump(dict(state), f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def load_state(path: Union[str, "os.PathLike[str]"]) -> Optional[dict]:
    """Rank 0's saved state, on every rank: rank 0 reads ``path`` (None when it does not
    exist) and, when torch.distributed or JAX's multi-process runtime is up, every process
    gets rank 0's copy through one all-gather, so the hosts need not share a disk and a
    stale file on another host is never read. Every process of the job must call it; a
    file rank 0 cannot read or parse raises ``ValueError`` (or ``OSError``) on every rank."""
    name = os.fspath(path)
    payload: dict = {"state": None}
    if resolve_world()[0] == 0:
        try:
            with open(name) as f:
                payload = {"state": json.load(f)}
        except FileNotFoundError:
            pass
        except (OSError, ValueError) as e:
            payload = {"error": f"{name}: not a saved loader state: {e}"}
    texts = _gather(json.dumps(payload))
    got = payload if texts is None else json.loads(texts[0])
    if "error" in got:
        raise ValueError(got["error"])
    return got["state"]
