"""Text in, tokens out: ``zrecord.tokenize`` encodes documents with a Hugging Face
``tokenizer.json`` in Rust (the ``tokenizers`` crate, the same ids as its Python package),
on every core, into a dataset with a ragged ``tokens`` field, one sample per document.
The work is ``host-native/src/dataset/text.rs``; this module picks the reader."""

from __future__ import annotations

import os
from pathlib import Path
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
    file (one document), a ``.parquet`` file (its ``text_field`` column, read with pyarrow
    ``batch_size`` rows at a time), a directory of any one of those kinds, or an iterable
    of strings (a list, a generator, a Hugging Face dataset's column). Files are read by
    the Rust side; Parquet and iterables by Python, a block at a time, and encoded without
    the GIL. Memory stays bounded by a block and the longest document. Nothing is visible
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
    write); an iterable of strings gives the tokens only.
    """
    if eos is not None and not (isinstance(eos, int) and 0 <= eos < 1 << 32):
        raise ValueError(f"eos must be a token id from 0 to 2**32 - 1, not {eos!r}")
    out, tok = str(out), str(tokenizer)
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        parquet = _parquet_files(path)
        if parquet is None:
            with reporter(progress, "tokenize", unit="B") as report:
                _zrecord._tokenize_files(str(path), tok, out, text_field, eos, codec, skip_empty, shard_records, report,
                                         keep_fields)
            return Dataset(out)
        kept, blocks = _parquet_blocks(parquet, text_field, batch_size, keep_fields)
    elif isinstance(source, (bytes, bytearray)):
        raise TypeError("tokenize takes a path or an iterable of strings, not bytes")
    else:
        kept, blocks = [], _string_blocks(source, batch_size)
    writer = _zrecord._TextWriter(out, tok, eos, codec, skip_empty, shard_records, kept)
    try:
        for texts, extras in blocks:
            writer.write(texts, extras)
        writer.commit()
    except BaseException:
        writer.discard()
        raise
    return Dataset(out)


def _string_blocks(source: Iterable[Any], batch_size: int) -> Iterator[tuple]:
    """Blocks of ``batch_size`` documents of an iterable of strings (no kept fields)."""
    block: list = []
    for k, text in enumerate(source):
        if not isinstance(text, str):
            raise TypeError(f"document {k} is {type(text).__name__}, not str")
        block.append(text)
        if len(block) >= batch_size:
            yield block, []
            block = []
    yield block, []


def _parquet_files(path: Path) -> Optional[list]:
    """The Parquet files ``path`` names (itself, or a directory's in name order), or None
    when it names none."""
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix == ".parquet")
        return files or None
    return [path] if path.suffix == ".parquet" else None


def _parquet_kind(t) -> Optional[str]:
    """What an Arrow column type keeps as (the JSON Lines rule), or None to leave it out."""
    import pyarrow.types as pt

    if pt.is_string(t) or pt.is_large_string(t):
        return "string"
    if pt.is_integer(t):
        return "integer"
    if pt.is_floating(t):
        return "number"
    if pt.is_boolean(t):
        return "boolean"
    return None


def _parquet_blocks(files: list, text_field: str, batch_size: int, keep_fields: bool) -> tuple:
    """The columns kept beside the text (``(name, kind)``, by the first file's schema) and
    the files' blocks: ``(texts, values of each kept column)``."""
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise ImportError("tokenizing Parquet needs pyarrow (pip install pyarrow)") from None
    schema = pq.ParquetFile(files[0]).schema_arrow
    kept = [(f.name, _parquet_kind(f.type)) for f in schema if keep_fields and f.name != text_field]
    kept = [(n, k) for n, k in kept if k is not None]
    if any(n == "tokens" for n, _ in kept):
        raise ValueError(f'{files[0]}: a column "tokens" clashes with the token field (keep_fields=False keeps none)')

    def blocks():
        for f in files:
            pf = pq.ParquetFile(f)
            names = pf.schema_arrow.names
            if text_field not in names:
                raise ValueError(f"{f}: no column {text_field!r} (its columns: {names}); "
                                 "text_field names the one holding the text")
            for name, kind in kept:
                if name not in names or _parquet_kind(pf.schema_arrow.field(name).type) != kind:
                    raise ValueError(f"{f}: no {kind} column {name!r}, which {files[0]} has "
                                     "(keep_fields=False keeps none)")
            columns = [text_field] + [n for n, _ in kept]
            for batch in pf.iter_batches(batch_size=batch_size, columns=columns):
                texts = batch.column(0).to_pylist()
                if None in texts:
                    raise ValueError(f"{f}: column {text_field!r} holds a null (row {texts.index(None)} of a batch)")
                extras = []
                for k, (name, _) in enumerate(kept, start=1):
                    col = batch.column(k)
                    if col.null_count:
                        raise ValueError(f"{f}: column {name!r} holds a null (keep_fields=False keeps none)")
                    extras.append(col.to_pylist())
                yield texts, extras

    return kept, blocks()
