"""Text in, tokens out: ``zrecord.tokenize`` encodes documents with a Hugging Face
``tokenizer.json`` in Rust (the ``tokenizers`` crate, the same ids as its Python package),
on every core, into a dataset with a ragged ``tokens`` field, one sample per document.
The work is ``host-native/src/dataset/text.rs``; this module picks the reader."""

from __future__ import annotations

import os
from typing import Any, Iterable, Iterator, Optional, Union


from . import _zrecord
from ._progress import Progress, reporter
from .dataset import Dataset

PathLike = Union[str, "os.PathLike[str]"]


def tokenize(
    source: Any,
    out: PathLike,
    *,
    tokenizer: PathLike,
    text_field: str = "text",
    eos: Optional[int] = None,
    codec: str = "flate",
    skip_empty: bool = False,
    shard_records: Optional[int] = None,
    batch_size: int = 8192,
    progress: Progress = False,
    keep_fields: bool = True,
) -> Dataset:
    """Encodes the documents of ``source`` with ``tokenizer`` (a ``tokenizer.json``) and adds
    them to the dataset ``out`` (created when missing) as the ragged field ``tokens``:
    ``uint16`` when the vocabulary (and ``eos``) fit 16 bits, else ``uint32``; ``eos``, when
    given, ends every document. Returns the dataset.

    ``source`` is a JSON Lines file (the text under ``text_field`` on each line), a ``.txt``
    file (one document), a ``.parquet`` file (its ``text_field`` column, a row per
    document), a directory of them, or an iterable of strings (a list, a generator, a
    Hugging Face dataset's column). Files are read by the Rust side (Parquet too: pyarrow is
    not needed); iterables by Python, ``batch_size`` strings at a time, encoded without the
    GIL. Memory stays bounded by a block and the longest document. Nothing is visible
    in ``out`` until every document is written (a failure or KeyboardInterrupt leaves it as
    it was). A document that encodes to no token (with no ``eos``) fails the write, naming
    it, or with ``skip_empty=True`` is left out and counted, as every writer does.
    ``zr convert TEXT OUT --tokenizer tokenizer.json`` is the same from the shell.

    JSON Lines objects keep their other fields beside ``tokens`` (``keep_fields=False``:
    the tokens only): the first object's strings become string fields, its integers
    ``int64``, its other numbers ``float64`` and its booleans ``bool``; nulls, arrays and
    objects are left out. Every later object must have each kept field, of the same kind
    (an error names the file and line). Parquet keeps its other columns the same way (string,
    integer, floating and boolean columns, by the first file's schema; a null fails the
    write, naming the file, column and row); an iterable of strings gives the tokens only.
    """
    if eos is not None and not (isinstance(eos, int) and 0 <= eos < 1 << 32):
        raise ValueError(f"eos must be a token id from 0 to 2**32 - 1, not {eos!r}")
    out, tok = str(out), str(tokenizer)
    if isinstance(source, (str, os.PathLike)):
        with reporter(progress, "tokenize", unit="B") as report:
            _zrecord._tokenize_files(str(source), tok, out, text_field, eos, codec, skip_empty, shard_records, report,
                                     keep_fields)
        return Dataset(out)
    if isinstance(source, (bytes, bytearray)):
        raise TypeError("tokenize takes a path or an iterable of strings, not bytes")
    blocks = _string_blocks(source, batch_size)
    writer = _zrecord._TextWriter(out, tok, eos, codec, skip_empty, shard_records)
    try:
        for texts in blocks:
            writer.write(texts)
        writer.commit()
    except BaseException:
        writer.discard()
        raise
    return Dataset(out)


def _string_blocks(source: Iterable[Any], batch_size: int) -> Iterator[list]:
    """Blocks of ``batch_size`` documents of an iterable of strings."""
    block: list = []
    for k, text in enumerate(source):
        if not isinstance(text, str):
            raise TypeError(f"document {k} is {type(text).__name__}, not str")
        block.append(text)
        if len(block) >= batch_size:
            yield block
            block = []
    yield block
