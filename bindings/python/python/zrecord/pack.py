"""``zrecord.Pack``: how a :class:`~zrecord.DataLoader` packs token documents into rows.

The packing itself (which document lands in which row, the rows' bytes, the resume
state) is Rust's: ``zrecord_core::stream::pack`` plans, the loader's workers write. This
class only names the choice and checks its types early.
"""

from __future__ import annotations

import operator
import os
from typing import Any, Optional

__all__ = ["Pack"]

_MODES = ("concat", "best_fit")


def _token(name: str, value: Any, optional: bool = True) -> Optional[int]:
    if value is None and optional:
        return None
    try:
        v = operator.index(value)
    except TypeError:
        raise TypeError(f"Pack {name} must be an int token id{' or None' if optional else ''}, not {value!r}") from None
    if v < 0:
        raise ValueError(f"Pack {name} must be a token id >= 0, got {v}")
    return v


class Pack:
    """Pack the ragged token field ``field`` of a Dataset into rows of ``seq_len`` tokens.

    ``DataLoader(ds, batch_size=B, pack=Pack(field="tokens", seq_len=L))`` yields dicts of
    ``(B, L)`` arrays: ``field`` (the tokens, in the field's dtype), ``"segment_ids"``
    (int32: the documents of each row numbered from 1, 0 for padding) and
    ``"positions"`` (int32: each document's tokens in the row counted from 0), and for a
    Mixture ``"source"`` (int32, per token).

    - ``mode="concat"``: documents in stream order, back to back, cut every ``L`` tokens;
      no padding, and a document may run on into the next row.
    - ``mode="best_fit"``: no document is cut unless it is longer than ``L`` (then into
      ``L``-token pieces); pieces wait in a window of ``window`` tokens (default: two
      global batches' worth) and each goes into the row with the least room that still
      holds it; ``pad`` fills the rest. ``DataLoader.stats["padding_fraction"]`` reports it.

    ``row_order``: with ``mode="concat"`` over one dataset in SHUFFLE mode or a Mixture
    (the default there), ``"shuffled"``: each epoch's documents, in the epoch's shuffled
    order, are cut into rows, and the rows are read in a second shuffle, so a global batch
    draws its rows from across the epoch (as Megatron-LM's GPT dataset does). Over one
    dataset the loader then has epochs (``steps_per_epoch``, ``epoch``, ``epoch_iter()``):
    ``floor(tokens / L)`` rows per epoch, whole global batches of them; the tokens past the
    epoch's last whole batch are not read that epoch, and no row crosses an epoch. Over a
    Mixture each source runs its own epochs of rows and every global batch holds each
    source's token share to within one row. ``"sequential"``: rows in the order they are
    cut, running on across epochs (the default for best_fit and the SEQUENTIAL and IID
    modes; ``"shuffled"`` is refused there).

    ``index_dir``: shuffled rows find a row's documents through a row index per epoch (the
    running token count at every 16th document of the epoch's order: 50 MB and about a
    second to build for 10^8 documents). Each one built is kept in this directory, where
    other ranks, worker processes and later runs read it instead of building it (a file
    that does not match, on a few spot checks, is rebuilt). ``None``: the default cache
    directory (``$ZRECORD_CACHE_DIR/rows``, else ``$XDG_CACHE_HOME/zrecord/rows``, else
    ``~/.cache/zrecord/rows``), for datasets of at least 2^20 documents; ``False``: none.
    ``keep_order``: datasets of at most this many documents (default 2^22) need no row
    index: each epoch's document order and lengths are kept in memory (8 bytes per
    document, 32 MiB at the default) and a row is placed without reading the table; 0
    always uses the index.

    ``bos`` / ``eos``: token ids put before / after every document. With a Mixture, the
    weights count tokens. The state of a packed loader resumes to the token, also with
    another world size or number of workers of the same global batch (``B * world_size``
    rows).
    """

    def __init__(
        self,
        field: str = "tokens",
        seq_len: int = 2048,
        mode: str = "concat",
        eos: Optional[int] = None,
        bos: Optional[int] = None,
        pad: int = 0,
        window: Optional[int] = None,
        row_order: Optional[str] = None,
        index_dir=None,
        keep_order: Optional[int] = None,
    ) -> None:
        if not isinstance(field, str):
            raise TypeError(f"Pack field must be a field name, not {field!r}")
        if mode not in _MODES:
            raise ValueError(f'Pack mode must be "concat" or "best_fit", not {mode!r}')
        seq = _token("seq_len", seq_len, optional=False)
        if not seq or seq >= 2**32:
            raise ValueError(f"Pack seq_len must be in 1..2^32, got {seq_len!r}")
        if window is not None and mode != "best_fit":
            raise ValueError("Pack window applies to mode='best_fit' only")
        if row_order not in (None, "shuffled", "sequential"):
            raise ValueError(f'Pack row_order must be "shuffled" or "sequential", not {row_order!r}')
        self.field = field
        self.seq_len = seq
        self.mode = mode
        self.eos = _token("eos", eos)
        self.bos = _token("bos", bos)
        self.pad = _token("pad", pad, optional=False)
        self.window = _token("window", window)
        if index_dir is True:
            raise ValueError("Pack index_dir is a directory, None (the default cache) or False (none)")
        self.row_order = row_order
        if keep_order is not None and (isinstance(keep_order, bool) or not isinstance(keep_order, int)
                                       or keep_order < 0):
            raise ValueError(f"Pack keep_order is a number of documents >= 0 or None, not {keep_order!r}")
        self.keep_order = keep_order
        self.index_dir = index_dir if index_dir is None or index_dir is False else os.fspath(index_dir)

    def _spec(self) -> dict:
        return dict(
            field=self.field, seq_len=self.seq_len, mode=self.mode, bos=self.bos, eos=self.eos, pad=self.pad,
            window=self.window, row_order=self.row_order, index_dir=self.index_dir, keep_order=self.keep_order,
        )

    def __repr__(self) -> str:
        named = (("eos", self.eos), ("bos", self.bos), ("window", self.window), ("row_order", self.row_order))
        extra = "".join(f", {k}={v!r}" for k, v in named if v is not None)
        pad = f", pad={self.pad}" if self.mode == "best_fit" else ""
        return f"zrecord.Pack(field={self.field!r}, seq_len={self.seq_len}, mode={self.mode!r}{extra}{pad})"
