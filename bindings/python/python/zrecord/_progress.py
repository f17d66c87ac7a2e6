"""Progress bars for long calls: tqdm when it is installed, otherwise none.

Every ``progress=`` argument in zrecord takes the same values:

- ``False`` / ``None``: no reports (the default);
- ``True``: a tqdm bar if ``tqdm`` can be imported, otherwise nothing; never an error;
- a callable ``progress(done, total)``: called now and then from the thread that waits
  for the call (with the GIL held), ``done`` and ``total`` in the call's units; a
  ``total`` of 0 with ``done`` above it means the total is not known (Ray's sink).

The native calls report at most every 100 ms (plus the first and the last report), so a
bar costs a few GIL round trips per second, whatever the number of records.
"""

from __future__ import annotations

import contextlib
from typing import Callable, Iterator, Optional, Union

Reporter = Callable[[int, int], None]
Progress = Union[bool, None, Reporter]

__all__ = ["Progress", "Reporter", "reporter"]


def _tqdm():
    try:
        from tqdm.auto import tqdm
    except Exception:  # noqa: BLE001 - not installed, or broken: no bar, as documented
        return None
    return tqdm


class _Bar:
    """Adapts ``(done, total)`` reports to a tqdm bar."""

    def __init__(self, tqdm, desc: str, unit: str) -> None:
        # Bytes read as KiB, MiB, ... and their rate as MiB/s.
        scaled = {"unit": "B", "unit_scale": True, "unit_divisor": 1024} if unit == "byte" else {"unit": unit}
        self._bar = tqdm(desc=desc, total=None, dynamic_ncols=True, leave=True, **scaled)

    def __call__(self, done: int, total: int) -> None:
        # A total of 0 with work done: the total is not known (a count and a rate, no end).
        total = total if total > 0 or done == 0 else None
        if self._bar.total != total:
            self._bar.total = total
        self._bar.update(done - self._bar.n)

    def close(self) -> None:
        self._bar.close()


@contextlib.contextmanager
def reporter(progress: Progress, desc: str, unit: str = "record") -> Iterator[Optional[Reporter]]:
    """The ``progress(done, total)`` callable for a ``progress=`` argument, or ``None``."""
    if progress is None or progress is False:
        yield None
        return
    if progress is True:
        tqdm = _tqdm()
        if tqdm is None:
            yield None
            return
        bar = _Bar(tqdm, desc, unit)
        try:
            yield bar
        finally:
            bar.close()
        return
    if callable(progress):
        yield progress
        return
    raise TypeError(f"progress must be True, False, None or a callable(done, total), not {type(progress).__name__}")
