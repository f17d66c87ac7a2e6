//! Typed errors, one enum per concern, and the table of stable numeric codes.
//!
//! [`Error`] is what every engine call returns. Its [`Error::code`] is the contract every
//! binding exposes: the codes -1 ..= -8 keep loaderx 0.5.4's meanings, the later ones are
//! ours. [`ERROR_KINDS`] is the one list of those codes, with the name each surface uses;
//! the WIT `error-code` enum, the Python exception classes, the JavaScript bindings and the
//! wasmtime-py wrapper are checked against it by `core/tests/error_table.rs`.
//!
//! Adding a kind: a variant here, its [`ErrorKind`] constant, its entry at the end of
//! [`ERROR_KINDS`] (codes run -1, -2, ... without gaps, in table order), then whatever
//! `cargo test -p zrecord-core --test error_table` names: the WIT case, the Python class,
//! the JavaScript and wasm-Python tables, the guest's WIT mapping.

use alloc::string::String;
use core::fmt;

/// Result alias used across the crate.
pub type Result<T, E = Error> = core::result::Result<T, E>;

/// Everything a store operation can fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An allocation the operation needed could not be made.
    #[error("out of memory")]
    OutOfMemory,
    /// The host's file I/O failed.
    #[error(transparent)]
    Io(#[from] IoError),
    /// A record index at or past the store's length.
    #[error("index {index} out of range for a store of {length} records")]
    IndexOutOfRange {
        /// The offending index.
        index: u64,
        /// The store's length when the call started.
        length: u32,
    },
    /// A record longer than [`crate::MAX_RECORD_LEN`], or of length zero.
    #[error("record of {length} bytes is outside the 1..={max} byte limit", max = crate::MAX_RECORD_LEN)]
    RecordTooLarge {
        /// Length of the offending record.
        length: u64,
    },
    /// The store has no room for the batch: 2^24 records or 4096 chunks.
    #[error("store is full: {0}")]
    StoreFull(&'static str),
    /// The caller's buffer cannot hold what was asked for.
    #[error("buffer too small: {0}")]
    BufferTooSmall(String),
    /// A stored record is damaged or its table entry is invalid.
    #[error("record {index} failed to decode: {source}")]
    Decode {
        /// Index of the record.
        index: u64,
        /// What is wrong with it.
        source: DecodeError,
    },
    /// The directory is not a zrecord store of a version this crate reads.
    #[error("{}", format_message(.0))]
    Format(#[from] FormatError),
    /// Another handle or process holds the store in a way that excludes this call.
    #[error("store is locked: {0}")]
    Locked(String),
    /// An argument is malformed (unknown codec, mismatched lengths, overlapping regions...).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A record's stored bytes do not match the checksum kept for them in `checksums.zrc`
    /// (the record is damaged), or, under `verify = always`, the record has none.
    #[error("record {index} (chunk {chunk}, offset {offset}) {failure}")]
    Checksum {
        /// Index of the record.
        index: u64,
        /// The chunk file holding its stored bytes.
        chunk: u16,
        /// Where they start in that chunk.
        offset: u32,
        /// What failed.
        failure: ChecksumFailure,
    },
}

/// How a record failed its checksum check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ChecksumFailure {
    /// The stored bytes hash to `found`, but `expected` was recorded when they were written.
    Mismatch {
        /// The checksum recorded for the record.
        expected: u64,
        /// The checksum of the bytes now stored.
        found: u64,
    },
    /// The table entry is not the one the checksum was taken for and its bytes do not match
    /// it, in a store no other writer has changed since zrecord last did: the table entry is
    /// damaged.
    EntryChanged {
        /// The checksum recorded for the entry that was there.
        expected: u64,
        /// The checksum of the bytes the entry now points at.
        found: u64,
    },
    /// The record has no checksum (see `Stats::unchecked`) and the store was opened with
    /// `verify = always`.
    Unchecked,
}

impl fmt::Display for ChecksumFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ChecksumFailure::Mismatch { expected, found } => {
                write!(f, "fails its checksum: the stored bytes hash to {found:016x}, {expected:016x} was recorded")
            }
            ChecksumFailure::EntryChanged { expected, found } => write!(
                f,
                "has a damaged table entry: it is not the entry checksummed ({expected:016x}), and the bytes it \
                 points at hash to {found:016x}"
            ),
            ChecksumFailure::Unchecked => {
                write!(f, "has no checksum and verify is \"always\" (seal the store to checksum it)")
            }
        }
    }
}

impl Error {
    /// The kind of this error, with its stable code and the names the bindings use.
    pub fn kind(&self) -> &'static ErrorKind {
        match self {
            Error::OutOfMemory => &ErrorKind::OUT_OF_MEMORY,
            Error::Io(_) => &ErrorKind::IO,
            Error::IndexOutOfRange { .. } => &ErrorKind::INDEX_OUT_OF_RANGE,
            Error::RecordTooLarge { .. } => &ErrorKind::RECORD_TOO_LARGE,
            Error::StoreFull(_) => &ErrorKind::STORE_FULL,
            Error::BufferTooSmall(_) => &ErrorKind::BUFFER_TOO_SMALL,
            Error::Decode { .. } => &ErrorKind::DECODE,
            Error::Format(_) => &ErrorKind::BAD_FORMAT,
            Error::Locked(_) => &ErrorKind::LOCKED,
            Error::InvalidArgument(_) => &ErrorKind::INVALID_ARGUMENT,
            Error::Checksum { .. } => &ErrorKind::CHECKSUM,
        }
    }

    /// The stable numeric code of this error (loaderx 0.5.4's codes for -1 ..= -8).
    pub fn code(&self) -> i32 {
        self.kind().code
    }
}

/// One stable error kind and the name each surface gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ErrorKind {
    /// The stable numeric code: Python's `ZrecordError.code`, the JavaScript and wasm-Python
    /// `code`, the number the CLIs print.
    pub code: i32,
    /// The kebab-case name: the WIT `error-code` case, which the JavaScript bindings and
    /// `zr_wasm.py` report as `kind`.
    pub name: &'static str,
    /// The Python exception raised for it: a class of `zrecord.errors`, or a built-in one
    /// where Python users expect it.
    pub python: &'static str,
    /// What it means, in one line. Also the default message of the Python exception (loaderx
    /// 0.5.4's wording for -1 ..= -8, so `str(ZrecordError(code))` reads the same).
    pub message: &'static str,
}

impl ErrorKind {
    /// -1: an allocation could not be made.
    pub const OUT_OF_MEMORY: ErrorKind =
        ErrorKind { code: -1, name: "out-of-memory", python: "OutOfMemoryError", message: "out of memory" };
    /// -2: the host's file I/O failed.
    pub const IO: ErrorKind = ErrorKind { code: -2, name: "io", python: "StoreIOError", message: "file I/O failed" };
    /// -3: a record index at or past the store's length.
    pub const INDEX_OUT_OF_RANGE: ErrorKind = ErrorKind {
        code: -3,
        name: "index-out-of-range",
        python: "IndexOutOfRangeError",
        message: "index out of range",
    };
    /// -4: a record of zero bytes or over the 1 MiB limit.
    pub const RECORD_TOO_LARGE: ErrorKind = ErrorKind {
        code: -4,
        name: "record-too-large",
        python: "RecordTooLargeError",
        message: "record exceeds the 1048576 byte limit",
    };
    /// -5: 2^24 records or 4096 chunks reached.
    pub const STORE_FULL: ErrorKind =
        ErrorKind { code: -5, name: "store-full", python: "StoreFullError", message: "store is full" };
    /// -6: a destination or source buffer is too small for the request.
    pub const BUFFER_TOO_SMALL: ErrorKind =
        ErrorKind { code: -6, name: "buffer-too-small", python: "BufferTooSmallError", message: "buffer too small" };
    /// -7: a stored record is damaged.
    pub const DECODE: ErrorKind =
        ErrorKind { code: -7, name: "decode", python: "DecodeError", message: "stored record failed to decode" };
    /// -8: not a zrecord store (or a malformed `.npy` / `schema.json`).
    pub const BAD_FORMAT: ErrorKind = ErrorKind {
        code: -8,
        name: "bad-format",
        python: "FormatError",
        message: "not a zrecord store, or written by a newer version",
    };
    /// -9: another handle holds the store (Python also uses it for a closed store).
    pub const LOCKED: ErrorKind =
        ErrorKind { code: -9, name: "locked", python: "LockedError", message: "store is locked" };
    /// -10: a malformed argument; Python raises `ValueError`.
    pub const INVALID_ARGUMENT: ErrorKind =
        ErrorKind { code: -10, name: "invalid-argument", python: "ValueError", message: "invalid argument" };
    /// -11: a record's stored bytes fail their checksum (`checksums.zrc`), or, under
    /// `verify = "always"`, a record has none.
    pub const CHECKSUM: ErrorKind = ErrorKind {
        code: -11,
        name: "checksum",
        python: "ChecksumError",
        message: "stored record failed its checksum",
    };
    /// A panic caught at a binding's boundary (the Python extension): a bug in zrecord,
    /// reported instead of crashing the interpreter. The core never returns it, so it is not
    /// a WIT case; its code sits apart so the core's codes can keep growing from -11.
    pub const INTERNAL: ErrorKind =
        ErrorKind { code: -100, name: "internal", python: "InternalError", message: "internal error" };

    /// The kind with `code`, among [`ERROR_KINDS`] and [`BOUNDARY_ERROR_KINDS`].
    pub fn from_code(code: i32) -> Option<&'static ErrorKind> {
        ERROR_KINDS.iter().chain(BOUNDARY_ERROR_KINDS).find(|k| k.code == code)
    }
}

/// Every kind [`Error::code`] returns, in code order: entry `i` has code `-(i + 1)`. The WIT
/// `error-code` enum lists the same names in the same order.
pub const ERROR_KINDS: &[ErrorKind] = &[
    ErrorKind::OUT_OF_MEMORY,
    ErrorKind::IO,
    ErrorKind::INDEX_OUT_OF_RANGE,
    ErrorKind::RECORD_TOO_LARGE,
    ErrorKind::STORE_FULL,
    ErrorKind::BUFFER_TOO_SMALL,
    ErrorKind::DECODE,
    ErrorKind::BAD_FORMAT,
    ErrorKind::LOCKED,
    ErrorKind::INVALID_ARGUMENT,
    ErrorKind::CHECKSUM,
];

/// Kinds a binding raises at its own boundary, never returned by the core: not WIT cases,
/// but their codes are as stable and must not collide with [`ERROR_KINDS`].
pub const BOUNDARY_ERROR_KINDS: &[ErrorKind] = &[ErrorKind::INTERNAL];

/// A container error (a `.npy` input, `schema.json`) names that file's problem itself; blaming
/// the store for a bad `.npy` input sent users looking in the wrong place.
fn format_message(e: &FormatError) -> String {
    match e {
        FormatError::Container(m) => m.clone(),
        other => alloc::format!("not a zrecord store: {other}"),
    }
}

/// Why a directory is not a readable zrecord store.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FormatError {
    /// meta.zr does not exist and the store was not opened for creation.
    #[error("meta.zr is missing")]
    MissingMeta,
    /// meta.zr has the wrong size (loaderx 0.5.4 always writes 16 + 2^24 * 16 bytes).
    #[error("meta.zr is {found} bytes, expected {expected}")]
    MetaSize {
        /// Size found.
        found: u64,
        /// Size required.
        expected: u64,
    },
    /// A dense store's meta.zr is shorter than its live entries, or longer than the table.
    #[error(
        "meta.zr is {found} bytes, but a dense store of {length} records needs {needed} to 268435472 (cut short?)"
    )]
    DenseMetaSize {
        /// Size found.
        found: u64,
        /// The records the header claims.
        length: u32,
        /// The least size those records need.
        needed: u64,
    },
    /// The first four bytes are not `ZREC`.
    #[error("bad magic {found:02x?}, expected \"ZREC\"")]
    BadMagic {
        /// The bytes found.
        found: [u8; 4],
    },
    /// Written by a format version this crate does not know.
    #[error("format version {found} is not supported (this build reads versions 1, sparse, and 2, dense)")]
    UnsupportedVersion {
        /// The version found.
        found: u16,
    },
    /// The header claims more records than the table holds.
    #[error("header length {length} exceeds the 2^24 record limit")]
    LengthTooLarge {
        /// The claimed length.
        length: u32,
    },
    /// The header's tail chunk is past the 4096-chunk limit.
    #[error("header tail chunk {tail_chunk} exceeds the 4096 chunk limit")]
    TailChunkTooLarge {
        /// The claimed chunk.
        tail_chunk: u16,
    },
    /// A chunk file the header says exists is missing.
    #[error("chunk file {chunk}.zr is missing")]
    MissingChunk {
        /// The chunk id.
        chunk: u16,
    },
    /// Live records overlap on disk, which no writer produces.
    #[error("records {a} and {b} overlap on disk")]
    OverlappingRecords {
        /// One record.
        a: u32,
        /// The other.
        b: u32,
    },
    /// The live records of a chunk claim more stored bytes than were ever written to it:
    /// their entries overlap (many entries pointing at one payload, a decompression bomb),
    /// which no writer produces. Refused before any record is read, so a hostile table
    /// cannot make a scan decode the same bytes over and over.
    #[error(
        "the records of chunk {chunk}.zr claim {claimed} stored bytes, more than the {written} bytes \
         written to it: their table entries overlap"
    )]
    ImpossibleTable {
        /// The chunk id.
        chunk: u16,
        /// Sum of the stored lengths of its live records.
        claimed: u64,
        /// How far the chunk was written.
        written: u64,
    },
    /// A delete was interrupted (its journal, `delete.zrj`, is still there) and a
    /// read-only handle cannot finish it.
    #[error("an interrupted delete must be finished first: open the store writable once")]
    InterruptedDelete,
    /// A `.npy` or `schema.json` file is malformed or unsupported.
    #[error("{0}")]
    Container(String),
}

/// Why one stored record cannot be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The entry names a codec tag this build does not know.
    #[error("unknown codec tag {tag}")]
    UnknownCodec {
        /// The tag.
        tag: u8,
    },
    /// The entry claims an empty record, which no writer stores.
    #[error("entry claims an empty record")]
    EmptyRecord,
    /// The entry's lengths exceed the 1 MiB record limit.
    #[error("entry lengths (logical {logic}, stored {phys}) exceed the record limit")]
    LengthOverLimit {
        /// Logical length.
        logic: u32,
        /// Stored length.
        phys: u32,
    },
    /// A raw record whose stored and logical lengths differ.
    #[error("raw record with stored length {phys} != logical length {logic}")]
    RawLengthMismatch {
        /// Logical length.
        logic: u32,
        /// Stored length.
        phys: u32,
    },
    /// The entry points past its chunk's frontier or past the chunk file.
    #[error("entry points outside its chunk (chunk {chunk}, offset {offset}, {phys} bytes)")]
    OutOfBounds {
        /// Chunk id.
        chunk: u16,
        /// Offset in the chunk.
        offset: u32,
        /// Stored length.
        phys: u32,
    },
    /// The DEFLATE stream would produce more bytes than the logical length.
    #[error("compressed stream expands past its logical length of {logic} bytes")]
    TooLong {
        /// Logical length.
        logic: u32,
    },
    /// The DEFLATE stream ends before producing the logical length.
    #[error("compressed stream stops after {produced} of {logic} bytes")]
    TooShort {
        /// Bytes produced.
        produced: usize,
        /// Logical length.
        logic: u32,
    },
    /// The DEFLATE stream is malformed.
    #[error("corrupt compressed stream")]
    Corrupt,
    /// A record of a bytes or string field does not end in the stop byte
    /// ([`crate::dataset::values::STOP_BYTE`]).
    #[error("ends in byte {found:#04x}, not the stop byte of a bytes or string field")]
    NoStopByte {
        /// The last byte found.
        found: u8,
    },
    /// A record of a string field is not UTF-8.
    #[error("is not UTF-8 (first bad byte at {at})")]
    NotUtf8 {
        /// Byte offset of the first invalid sequence within the value.
        at: u32,
    },
    /// A value a loader's image pipeline decodes is not an image it can use (not JPEG,
    /// PNG or WebP, a cut or corrupt one, or more pixels than its `max_pixels`).
    #[error("{0}")]
    Image(crate::image::ImageError),
}

/// What kind of I/O failure happened, as far as the core needs to know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum IoErrorKind {
    /// The file or directory does not exist.
    NotFound,
    /// Permission denied.
    PermissionDenied,
    /// The device is full (ENOSPC) or a quota was hit.
    StorageFull,
    /// A read ended before the requested bytes.
    UnexpectedEof,
    /// A previous sync failed, so the handle refuses further writes.
    Poisoned,
    /// Something other than a regular file (a FIFO, a device, a socket) where a store file
    /// or an input file belongs: refused before it is read, since reading a FIFO can wait
    /// forever.
    NotRegularFile,
    /// A loop of symbolic links.
    SymlinkLoop,
    /// A store file that is a symbolic link leading out of the store (refused by the
    /// native `zr` unless `--follow-symlinks`, and always by `zr-wasm`'s sandbox).
    OutsideStore,
    /// Anything else.
    Other,
}

impl IoErrorKind {
    /// The one message every host prints for this kind, whatever its OS calls it or numbers
    /// it (a permission error is errno 13 on Linux and 2 under WASI): `zr` and `zr-wasm`
    /// print the same line. `None` for [`IoErrorKind::Other`], whose message is the OS's
    /// own words without their number.
    pub fn message(self) -> Option<&'static str> {
        Some(match self {
            IoErrorKind::NotFound => "no such file or directory",
            IoErrorKind::PermissionDenied => "permission denied",
            IoErrorKind::StorageFull => "no space left on the device",
            IoErrorKind::UnexpectedEof => "the file ends before the bytes asked for",
            IoErrorKind::Poisoned => "an earlier write or sync failed; reopen the store",
            IoErrorKind::NotRegularFile => "not a regular file (a FIFO, a device or a socket)",
            IoErrorKind::SymlinkLoop => "too many levels of symbolic links",
            IoErrorKind::OutsideStore => {
                "a symbolic link leading out of the store (the native zr follows it with --follow-symlinks)"
            }
            IoErrorKind::Other => return None,
        })
    }
}

/// A failed file operation, with what was being done and the OS's reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IoError {
    /// The kind, for callers that branch on it.
    pub kind: IoErrorKind,
    /// What was being done, e.g. `write 3.zr at 4096`.
    pub context: String,
    /// Why, from the table every host shares ([`IoErrorKind::message`]), e.g. `no space
    /// left on the device`.
    pub message: String,
}

impl IoError {
    /// Builds an error from its parts.
    pub fn new(kind: IoErrorKind, context: impl Into<String>, message: impl Into<String>) -> Self {
        IoError { kind, context: context.into(), message: message.into() }
    }
}

#[cfg(feature = "std")]
impl IoError {
    /// Converts a `std::io::Error` from a host's file call, naming what was being done. The
    /// one mapping of OS error kinds every std host (native, wasm guest) shares.
    ///
    /// The message comes from [`IoErrorKind::message`], so it is the same on every host; an
    /// error of no listed kind keeps the OS's words without " (os error N)", whose number
    /// differs between hosts. An error made by zrecord itself (`io::Error::other` with an
    /// [`IoErrorKind`] message) keeps its kind.
    pub fn from_std(e: std::io::Error, context: impl Into<String>) -> Self {
        use std::io::ErrorKind as K;
        let os = e.raw_os_error();
        let kind = match e.kind() {
            _ if os.is_some() && os == loop_errno() => IoErrorKind::SymlinkLoop,
            _ if os.is_some() && os == escape_errno() => IoErrorKind::OutsideStore,
            K::NotFound => IoErrorKind::NotFound,
            K::PermissionDenied | K::ReadOnlyFilesystem => IoErrorKind::PermissionDenied,
            K::StorageFull | K::QuotaExceeded => IoErrorKind::StorageFull,
            K::UnexpectedEof => IoErrorKind::UnexpectedEof,
            _ => {
                let text = alloc::string::ToString::to_string(&e);
                let ours = IoErrorKind::TABLE.iter().find(|k| k.message() == Some(text.as_str()));
                match ours {
                    Some(&k) => k,
                    None => {
                        let words = text.find(" (os error ").map_or(text.as_str(), |at| &text[..at]);
                        return IoError::new(IoErrorKind::Other, context, words);
                    }
                }
            }
        };
        IoError::new(kind, context, kind.message().unwrap_or_default())
    }

    /// A `std::io::Error` of `kind`, for a host's own refusals (a FIFO, a link out of the
    /// store) made where a `std::io::Error` is expected; [`IoError::from_std`] gives back
    /// the kind.
    pub fn std_error(kind: IoErrorKind) -> std::io::Error {
        std::io::Error::other(kind.message().unwrap_or("I/O error"))
    }
}

impl IoErrorKind {
    /// Every kind with a message of its own.
    pub const TABLE: &'static [IoErrorKind] = &[
        IoErrorKind::NotFound,
        IoErrorKind::PermissionDenied,
        IoErrorKind::StorageFull,
        IoErrorKind::UnexpectedEof,
        IoErrorKind::Poisoned,
        IoErrorKind::NotRegularFile,
        IoErrorKind::SymlinkLoop,
        IoErrorKind::OutsideStore,
    ];
}

/// ELOOP, which `std::io::ErrorKind` names only on nightly: 40 on Linux, 32 under WASI.
#[cfg(all(feature = "std", any(unix, target_os = "wasi")))]
fn loop_errno() -> Option<i32> {
    Some(libc::ELOOP)
}

/// What the wasm guest gets when its sandbox refuses a path that leads out of a preopened
/// directory (a `..` or a symbolic link): wasmtime answers `not-permitted` (EPERM), which
/// nothing else in the guest's file calls produces. Natively EPERM means other things.
#[cfg(all(feature = "std", target_os = "wasi"))]
fn escape_errno() -> Option<i32> {
    Some(libc::EPERM)
}

#[cfg(all(feature = "std", not(target_os = "wasi")))]
fn escape_errno() -> Option<i32> {
    None
}

#[cfg(all(feature = "std", not(any(unix, target_os = "wasi"))))]
fn loop_errno() -> Option<i32> {
    None
}

impl fmt::Display for IoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "file I/O failed: {}: {}", self.context, self.message)
    }
}

impl core::error::Error for IoError {}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;
    use alloc::vec;
    use alloc::vec::Vec;

    /// One error of every variant; the exhaustive match makes a new variant fail to compile
    /// here until it is listed.
    fn one_of_each() -> Vec<Error> {
        let all = vec![
            Error::OutOfMemory,
            Error::Io(IoError::new(IoErrorKind::Other, "x", "y")),
            Error::IndexOutOfRange { index: 1, length: 0 },
            Error::RecordTooLarge { length: 2 << 20 },
            Error::StoreFull("x"),
            Error::BufferTooSmall("x".into()),
            Error::Decode { index: 0, source: DecodeError::Corrupt },
            Error::Format(FormatError::MissingMeta),
            Error::Locked("x".into()),
            Error::InvalidArgument("x".into()),
            Error::Checksum { index: 3, chunk: 1, offset: 9, failure: ChecksumFailure::Unchecked },
        ];
        for e in &all {
            match e {
                Error::OutOfMemory
                | Error::Io(_)
                | Error::IndexOutOfRange { .. }
                | Error::RecordTooLarge { .. }
                | Error::StoreFull(_)
                | Error::BufferTooSmall(_)
                | Error::Decode { .. }
                | Error::Format(_)
                | Error::Locked(_)
                | Error::InvalidArgument(_)
                | Error::Checksum { .. } => {}
            }
        }
        all
    }

    #[test]
    fn codes_are_loaderx_codes() {
        let expected = [-1, -2, -3, -4, -5, -6, -7, -8, -9, -10, -11];
        for (e, code) in one_of_each().into_iter().zip(expected) {
            assert_eq!(e.code(), code, "{e}");
            assert!(!e.to_string().is_empty());
        }
    }

    #[test]
    fn the_table_runs_from_minus_one_without_gaps() {
        for (i, k) in ERROR_KINDS.iter().enumerate() {
            assert_eq!(k.code, -(i as i32) - 1, "ERROR_KINDS[{i}] is {k:?}: codes run -1, -2, ... in table order");
        }
    }

    #[test]
    fn every_variant_has_its_own_table_entry() {
        let all = one_of_each();
        assert_eq!(all.len(), ERROR_KINDS.len(), "one Error variant per ERROR_KINDS entry");
        for (e, k) in all.iter().zip(ERROR_KINDS) {
            assert_eq!(e.kind(), k, "{e:?}");
            assert_eq!(ErrorKind::from_code(e.code()), Some(k));
        }
    }

    #[test]
    fn codes_and_names_are_unique_and_well_formed() {
        let all: Vec<&ErrorKind> = ERROR_KINDS.iter().chain(BOUNDARY_ERROR_KINDS).collect();
        for (i, a) in all.iter().enumerate() {
            assert!(a.code < 0, "{a:?}: codes are negative");
            assert!(
                !a.name.is_empty() && a.name.bytes().all(|b| b.is_ascii_lowercase() || b == b'-'),
                "{a:?}: names are kebab-case (they are WIT enum cases)"
            );
            assert!(a.python.bytes().all(|b| b.is_ascii_alphanumeric()) && a.python.ends_with("Error"), "{a:?}");
            assert!(!a.message.is_empty() && !a.message.contains('\n'), "{a:?}");
            for b in &all[i + 1..] {
                assert_ne!(a.code, b.code, "{a:?} and {b:?} share a code");
                assert_ne!(a.name, b.name, "{a:?} and {b:?} share a name");
                assert_ne!(a.python, b.python, "{a:?} and {b:?} share a Python class");
            }
        }
    }
}
