"""Exceptions raised by zrecord.

Every failure of a store operation is a :class:`ZrecordError` (a ``RuntimeError``, as in
loaderx 0.5.4) whose ``code`` is one of the stable numeric codes below. Each code also has
its own subclass, so callers can catch one kind without comparing numbers; a few of them
also derive from the built-in exception Python users would reach for (an out-of-range index
is an ``IndexError`` too, which also ends ``for sample in dataset`` loops cleanly; a failed
file operation is an ``OSError`` too).

Bad arguments (unknown codec, a non-contiguous or read-only buffer, indices that are not
integers, and the core's code -10) are ``ValueError`` / ``TypeError``, not ``ZrecordError``.

The codes, their names and these classes come from one table in the Rust core
(``ERROR_KINDS`` in ``core/src/error.rs``, exported as ``zrecord._zrecord.ERROR_KINDS``);
``core/tests/error_table.rs`` and ``tests/test_errors.py`` fail when this module drifts
from it.

=====  =========================  ====================================================
code   class                      meaning
=====  =========================  ====================================================
-1     OutOfMemoryError           out of memory (also a ``MemoryError``)
-2     StoreIOError               file I/O failed (also an ``OSError``; ``errno`` is set
                                  when the kind of failure has one)
-3     IndexOutOfRangeError       index out of range (also an ``IndexError``)
-4     RecordTooLargeError        record exceeds the 1 MiB limit (or is empty)
-5     StoreFullError             store is full (2^24 records or 4096 chunks)
-6     BufferTooSmallError        buffer too small
-7     DecodeError                stored record failed to decode
-8     FormatError                not a zrecord store, or written by a newer version
-9     LockedError                another handle, thread or loader holds the store
-9     StoreClosedError           the store was closed (a ``LockedError``, and a ``ValueError``
                                  like I/O on a closed file)
-10    ValueError                 invalid argument (Python's own ``ValueError``)
-11    ChecksumError              stored record failed its checksum (``checksums.zrc``), or
                                  has none under ``verify="always"``
-100   InternalError              a bug in zrecord, reported instead of crashing
=====  =========================  ====================================================
"""

from __future__ import annotations

__all__ = [
    "ZrecordError",
    "OutOfMemoryError",
    "StoreIOError",
    "IndexOutOfRangeError",
    "RecordTooLargeError",
    "StoreFullError",
    "BufferTooSmallError",
    "DecodeError",
    "FormatError",
    "MetadataError",
    "LockedError",
    "StoreClosedError",
    "ChecksumError",
    "InternalError",
    "ChecksumsLostWarning",
    "error_for",
]

# Default messages: loaderx 0.5.4's for its codes, so that str(ZrecordError(code)) reads the
# same; the core table's one-line meanings for the others.
_MESSAGES = {
    -1: "out of memory",
    -2: "file I/O failed",
    -3: "index out of range",
    -4: "record exceeds the 1048576 byte limit",
    -5: "store is full",
    -6: "buffer too small",
    -7: "stored record failed to decode",
    -8: "not a zrecord store, or written by a newer version",
    -9: "store is locked",
    -10: "invalid argument",
    -11: "stored record failed its checksum",
    -100: "internal error",
}


class ZrecordError(RuntimeError):
    """A store operation failed; ``code`` tells how (see the table in this module).

    ``ZrecordError(code)`` builds the exception for ``code`` with loaderx's message;
    ``ZrecordError(code, message)`` with a message of your own.
    """

    code: int

    def __init__(self, code: int, message: str | None = None) -> None:
        super().__init__(message if message is not None else _MESSAGES.get(code, f"unknown zrecord error {code}"))
        self.code = code

    def __reduce__(self):
        return (type(self), (self.code, str(self)))


class _Coded(ZrecordError):
    """A subclass whose code is fixed: ``Cls(message)`` or ``Cls(code, message)``."""

    CODE = 0

    def __init__(self, *args) -> None:
        if args and isinstance(args[0], int) and not isinstance(args[0], bool):
            code, args = args[0], args[1:]
        else:
            code = self.CODE
        super().__init__(code, *args[:1])

    def __reduce__(self):
        return (type(self), (self.code, str(self)))


class OutOfMemoryError(_Coded, MemoryError):
    """Code -1: an allocation the operation needed could not be made."""

    CODE = -1


class StoreIOError(_Coded, OSError):
    """Code -2: the operating system refused a file operation (see the message).

    Also an ``OSError``, so ``except OSError`` handlers catch it; ``errno`` is the
    ``errno`` module's value when the failure is one of "not found", "permission denied"
    or "no space left", else ``None``. ``str()`` is zrecord's message, not ``[Errno N]``.
    """

    CODE = -2


class IndexOutOfRangeError(_Coded, IndexError):
    """Code -3: an index is negative or at or past ``len(store)``."""

    CODE = -3


class RecordTooLargeError(_Coded):
    """Code -4: a record is longer than ``MAX_RECORD_LEN`` (1 MiB) or empty."""

    CODE = -4


class StoreFullError(_Coded):
    """Code -5: the store holds 2^24 records, or its 4096 chunks are full."""

    CODE = -5


class BufferTooSmallError(_Coded):
    """Code -6: a destination or source buffer cannot hold what was asked for."""

    CODE = -6


class DecodeError(_Coded):
    """Code -7: a stored record is damaged or its table entry is invalid."""

    CODE = -7


class FormatError(_Coded):
    """Code -8: the directory is not a zrecord store of a version this build reads."""

    CODE = -8


class LockedError(_Coded):
    """Code -9: another handle, thread or DataLoader holds the store in a way that
    excludes this call (``delete`` and ``compact`` need it alone)."""

    CODE = -9


class StoreClosedError(LockedError, ValueError):
    """Code -9: the store (or dataset) was closed."""


class MetadataError(FormatError, ValueError):
    """Code -8: a dataset's ``schema.json`` or ``dataset.json`` is unreadable, not JSON, or
    not a zrecord dataset's; the message names the file. Also a ``ValueError``, which
    loaderx 0.5.4 raised for a foreign schema."""


class ChecksumError(_Coded):
    """Code -11: a record's stored bytes do not match the checksum zrecord kept for them
    (``checksums.zrc``), so it is damaged and nothing of it was decoded; or, in a store
    opened with ``verify="always"``, the record has no checksum. The message names the
    record and its chunk."""

    CODE = -11


class InternalError(_Coded):
    """Code -100: a bug in zrecord was caught at the boundary instead of crashing.

    The core never returns this code; it sits apart from the core's codes (-1, -2, ...) so
    that they can grow without colliding with it.
    """

    CODE = -100


class ChecksumsLostWarning(UserWarning):
    """A store that kept checksums was opened without its ``checksums.zrc`` (deleted, or
    damaged beyond use): its records read unchecked until the file is restored or the store
    is sealed again (``zrecord.verify(path, seal=True)``); ``verify`` fails meanwhile."""


_BY_CODE = {
    cls.CODE: cls
    for cls in (
        OutOfMemoryError,
        StoreIOError,
        IndexOutOfRangeError,
        RecordTooLargeError,
        StoreFullError,
        BufferTooSmallError,
        DecodeError,
        FormatError,
        LockedError,
        ChecksumError,
        InternalError,
    )
}


def metadata_error(message: str) -> MetadataError:
    """The :class:`MetadataError` for ``message``."""
    return MetadataError(message)


def error_for(code: int, message: str | None = None) -> ZrecordError:
    """The exception for ``code``: its subclass, or a plain ``ZrecordError`` if unknown."""
    cls = _BY_CODE.get(code)
    if cls is None:
        return ZrecordError(code, message)
    return cls(code, message) if message is not None else cls(code)
