//! Typed errors, one enum per concern, and the stable numeric codes loaderx 0.5.4 exposed.
//!
//! [`Error`] is what every engine call returns. Its [`Error::code`] is the contract the Python
//! and WIT layers expose: the codes -1 ..= -8 keep loaderx's meanings, -9 ..= -11 are ours.

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
    #[error("not a zrecord store: {0}")]
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
    /// The stable numeric code of this error (loaderx 0.5.4's codes for -1 ..= -8).
    pub fn code(&self) -> i32 {
        match self {
            Error::OutOfMemory => -1,
            Error::Io(_) => -2,
            Error::IndexOutOfRange { .. } => -3,
            Error::RecordTooLarge { .. } => -4,
            Error::StoreFull(_) => -5,
            Error::BufferTooSmall(_) => -6,
            Error::Decode { .. } => -7,
            Error::Format(_) => -8,
            Error::Locked(_) => -9,
            Error::InvalidArgument(_) => -10,
            Error::Checksum { .. } => -11,
        }
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
    /// The first four bytes are not `ZREC`.
    #[error("bad magic {found:02x?}, expected \"ZREC\"")]
    BadMagic {
        /// The bytes found.
        found: [u8; 4],
    },
    /// Written by a format version this crate does not know.
    #[error("format version {found} is not supported (this build reads version 1)")]
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
    /// Anything else.
    Other,
}

/// A failed file operation, with what was being done and the OS's reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IoError {
    /// The kind, for callers that branch on it.
    pub kind: IoErrorKind,
    /// What was being done, e.g. `write 3.zr at 4096`.
    pub context: String,
    /// The OS's message, e.g. `No space left on device (os error 28)`.
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
    pub fn from_std(e: std::io::Error, context: impl Into<String>) -> Self {
        use std::io::ErrorKind as K;
        let kind = match e.kind() {
            K::NotFound => IoErrorKind::NotFound,
            K::PermissionDenied | K::ReadOnlyFilesystem => IoErrorKind::PermissionDenied,
            K::StorageFull | K::QuotaExceeded => IoErrorKind::StorageFull,
            K::UnexpectedEof => IoErrorKind::UnexpectedEof,
            _ => IoErrorKind::Other,
        };
        IoError::new(kind, context, alloc::string::ToString::to_string(&e))
    }
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

    #[test]
    fn codes_are_loaderx_codes() {
        let io = IoError::new(IoErrorKind::Other, "x", "y");
        let cases: [(Error, i32); 11] = [
            (Error::OutOfMemory, -1),
            (Error::Io(io), -2),
            (Error::IndexOutOfRange { index: 1, length: 0 }, -3),
            (Error::RecordTooLarge { length: 2 << 20 }, -4),
            (Error::StoreFull("x"), -5),
            (Error::BufferTooSmall("x".into()), -6),
            (Error::Decode { index: 0, source: DecodeError::Corrupt }, -7),
            (Error::Format(FormatError::MissingMeta), -8),
            (Error::Locked("x".into()), -9),
            (Error::InvalidArgument("x".into()), -10),
            (Error::Checksum { index: 3, chunk: 1, offset: 9, failure: ChecksumFailure::Unchecked }, -11),
        ];
        for (e, code) in cases {
            assert_eq!(e.code(), code, "{e}");
            assert!(!e.to_string().is_empty());
        }
    }
}
