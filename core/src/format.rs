//! The meta.zr layout: a 16-byte header followed by a table of 2^24 16-byte record entries;
//! in [`journal`], the delete journal `delete.zrj`; and in [`sums`], the checksum side file
//! `checksums.zrc`.
//!
//! Every field is little-endian and is encoded and decoded explicitly here, which is the only
//! place in the code base that knows byte positions. The full specification, with diagrams,
//! is `docs/format.md`; keep the two in step.

use crate::codec::Codec;
use crate::error::FormatError;

pub mod journal;
pub mod sums;

pub use journal::DELETE_JOURNAL;

/// First four bytes of every meta.zr.
pub const MAGIC: [u8; 4] = *b"ZREC";
/// The format version of a sparse store, loaderx 0.5.4's layout ([`FileLayout::Sparse`]).
pub const VERSION: u16 = 1;
/// The format version of a dense store ([`FileLayout::Dense`]): the same bytes at the same
/// offsets, files sized to what they hold. loaderx 0.5.4 refuses it as an unknown version.
pub const DENSE_VERSION: u16 = 2;
/// Size of the header at the start of meta.zr.
pub const HEADER_LEN: usize = 16;
/// Size of one record-table entry.
pub const ENTRY_LEN: usize = 16;
/// Largest number of records a store can hold (the table is sized for exactly this many).
pub const MAX_RECORDS: u32 = 1 << 24;
/// Largest record, logical or physical, in bytes.
pub const MAX_RECORD_LEN: u32 = 1 << 20;
/// Largest number of chunk files (`0.zr` ..= `4095.zr`).
pub const MAX_CHUNKS: u32 = 1 << 12;
/// Size each chunk file is created at (sparse). Also the unit of `stats().chunk_bytes`.
pub const CHUNK_FILE_LEN: u64 = 1 << 32;
/// Default placement capacity of a chunk: `tail_offset` is a u32, so the frontier of a chunk
/// can reach at most `u32::MAX`.
pub const DEFAULT_CHUNK_CAPACITY: u64 = u32::MAX as u64;
/// Exact size of meta.zr.
pub const META_LEN: u64 = HEADER_LEN as u64 + MAX_RECORDS as u64 * ENTRY_LEN as u64;

// Which limit a store meets first (`docs/format.md`, "Limits"). A payload never straddles
// two chunks and a chunk places at most `DEFAULT_CHUNK_CAPACITY` = 2^32 - 1 bytes, so it
// holds 4096 records stored in at most 2^20 - 1 bytes each, but only 4095 stored in exactly
// 2^20 (the 4096th would end at byte 2^32). With every payload under 1 MiB the 2^24 record
// slots therefore run out first (4096 chunks x 4096 = 2^24); with payloads of exactly
// 1 MiB the chunks do, at 4096 x 4095 = 16 773 120 records.
const _: () = assert!(DEFAULT_CHUNK_CAPACITY / (MAX_RECORD_LEN as u64 - 1) == 4096);
const _: () = assert!(DEFAULT_CHUNK_CAPACITY / MAX_RECORD_LEN as u64 == 4095);
const _: () = assert!(MAX_CHUNKS as u64 * 4096 == MAX_RECORDS as u64);
const _: () = assert!(MAX_CHUNKS as u64 * 4095 == 16_773_120);
const _: () = assert!(META_LEN == 268_435_472);

/// How a store's files are sized (`docs/format.md`, "Two layouts"). The bytes at every
/// offset are the same in both; only the files' lengths and meta.zr's `version` differ.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Hash)]
pub enum FileLayout {
    /// loaderx 0.5.4's layout (version 1): meta.zr at its full 256 MiB, every chunk file
    /// created at 4 GiB and checksums.zrc at 512 MiB, all sparse. What loaderx needs.
    #[default]
    Sparse,
    /// zrecord's layout for datasets (version 2): meta.zr as long as the entries written,
    /// chunk files as long as the payloads written, checksums.zrc as long as the slots
    /// written; nothing is sparse, so any copy tool copies what is there.
    Dense,
}

impl FileLayout {
    /// Both layouts, sparse first.
    pub const ALL: [FileLayout; 2] = [FileLayout::Sparse, FileLayout::Dense];

    /// meta.zr's `version` for this layout.
    pub const fn version(self) -> u16 {
        match self {
            FileLayout::Sparse => VERSION,
            FileLayout::Dense => DENSE_VERSION,
        }
    }

    /// The layout a meta.zr `version` names, if any.
    pub const fn of_version(version: u16) -> Option<FileLayout> {
        match version {
            VERSION => Some(FileLayout::Sparse),
            DENSE_VERSION => Some(FileLayout::Dense),
            _ => None,
        }
    }

    /// `"sparse"` or `"dense"`, as the command line and `inspect` spell it.
    pub const fn name(self) -> &'static str {
        match self {
            FileLayout::Sparse => "sparse",
            FileLayout::Dense => "dense",
        }
    }

    /// The layout named `name` (see [`FileLayout::name`]).
    pub fn from_name(name: &str) -> Option<FileLayout> {
        FileLayout::ALL.into_iter().find(|l| l.name() == name)
    }

    /// Whether meta.zr may be `len` bytes long in a store of `length` records: exactly
    /// [`META_LEN`] when sparse; when dense, at least its live entries and at most
    /// [`META_LEN`] (entries past `length` are garbage, so a longer table is allowed).
    pub const fn meta_len_ok(self, len: u64, length: u32) -> bool {
        match self {
            FileLayout::Sparse => len == META_LEN,
            FileLayout::Dense => len >= entry_offset(length) && len <= META_LEN,
        }
    }
}

/// Byte offset of entry `index` inside meta.zr.
pub const fn entry_offset(index: u32) -> u64 {
    HEADER_LEN as u64 + index as u64 * ENTRY_LEN as u64
}

/// The global state at the start of meta.zr.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Header {
    /// Chunk holding the append frontier; the store has exactly chunks `0..=tail_chunk`.
    pub tail_chunk: u16,
    /// First free byte in `tail_chunk`.
    pub tail_offset: u32,
    /// Number of live records; entries `0..length` are live.
    pub length: u32,
}

impl Header {
    /// Encodes the header with version 1 (a sparse store's; the copies of the header in
    /// checksums.zrc and delete.zrj are always written so).
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        self.encode_as(FileLayout::Sparse)
    }

    /// Encodes the header, magic included, with `layout`'s version.
    pub fn encode_as(&self, layout: FileLayout) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..4].copy_from_slice(&MAGIC);
        b[4..6].copy_from_slice(&layout.version().to_le_bytes());
        b[6..8].copy_from_slice(&self.tail_chunk.to_le_bytes());
        b[8..12].copy_from_slice(&self.tail_offset.to_le_bytes());
        b[12..16].copy_from_slice(&self.length.to_le_bytes());
        b
    }

    /// Decodes and checks a header: magic, version (either layout's) and the limits of each
    /// field.
    pub fn decode(b: &[u8; HEADER_LEN]) -> Result<Self, FormatError> {
        Self::decode_with_layout(b).map(|(h, _)| h)
    }

    /// [`Header::decode`], and the layout its version names.
    pub fn decode_with_layout(b: &[u8; HEADER_LEN]) -> Result<(Self, FileLayout), FormatError> {
        if b[0..4] != MAGIC {
            return Err(FormatError::BadMagic { found: [b[0], b[1], b[2], b[3]] });
        }
        let version = u16::from_le_bytes([b[4], b[5]]);
        let layout = FileLayout::of_version(version).ok_or(FormatError::UnsupportedVersion { found: version })?;
        let h = Header {
            tail_chunk: u16::from_le_bytes([b[6], b[7]]),
            tail_offset: u32::from_le_bytes([b[8], b[9], b[10], b[11]]),
            length: u32::from_le_bytes([b[12], b[13], b[14], b[15]]),
        };
        if h.length > MAX_RECORDS {
            return Err(FormatError::LengthTooLarge { length: h.length });
        }
        if u32::from(h.tail_chunk) >= MAX_CHUNKS {
            return Err(FormatError::TailChunkTooLarge { tail_chunk: h.tail_chunk });
        }
        Ok((h, layout))
    }

    /// How far the chunk files have grown, counting every earlier chunk as full.
    pub fn chunk_bytes(&self) -> u64 {
        u64::from(self.tail_chunk) * CHUNK_FILE_LEN + u64::from(self.tail_offset)
    }
}

/// Where a record lives and how it is stored: one 16-byte entry of the record table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct RecordLoc {
    /// Byte offset inside the chunk file.
    pub offset: u32,
    /// Stored (possibly compressed) size.
    pub phys_length: u32,
    /// Original size; what a gather writes.
    pub logic_length: u32,
    /// Chunk file holding the record.
    pub chunk_id: u16,
    /// Codec tag, see [`Codec`]. Kept as the raw byte so that an unknown tag is reported when
    /// the record is read, not when the table is.
    pub codec: u8,
}

impl RecordLoc {
    /// Encodes the entry; the reserved byte is always written as zero.
    pub fn encode(&self) -> [u8; ENTRY_LEN] {
        let mut b = [0u8; ENTRY_LEN];
        b[0..4].copy_from_slice(&self.offset.to_le_bytes());
        b[4..8].copy_from_slice(&self.phys_length.to_le_bytes());
        b[8..12].copy_from_slice(&self.logic_length.to_le_bytes());
        b[12..14].copy_from_slice(&self.chunk_id.to_le_bytes());
        b[14] = self.codec;
        b
    }

    /// Decodes an entry. No validation: see [`RecordLoc::check`].
    pub fn decode(b: &[u8]) -> Self {
        RecordLoc {
            offset: u32::from_le_bytes([b[0], b[1], b[2], b[3]]),
            phys_length: u32::from_le_bytes([b[4], b[5], b[6], b[7]]),
            logic_length: u32::from_le_bytes([b[8], b[9], b[10], b[11]]),
            chunk_id: u16::from_le_bytes([b[12], b[13]]),
            codec: b[14],
        }
    }

    /// Checks the entry against the format's limits and the store's frontier, so that a bad
    /// entry is a typed error before any byte of it is read.
    pub fn check(&self, header: &Header) -> Result<Codec, crate::error::DecodeError> {
        use crate::error::DecodeError as D;
        let codec = Codec::from_tag(self.codec).ok_or(D::UnknownCodec { tag: self.codec })?;
        if self.logic_length == 0 || self.phys_length == 0 {
            return Err(D::EmptyRecord);
        }
        if self.logic_length > MAX_RECORD_LEN || self.phys_length > MAX_RECORD_LEN {
            return Err(D::LengthOverLimit { logic: self.logic_length, phys: self.phys_length });
        }
        if codec == Codec::Raw && self.phys_length != self.logic_length {
            return Err(D::RawLengthMismatch { logic: self.logic_length, phys: self.phys_length });
        }
        let end = u64::from(self.offset) + u64::from(self.phys_length);
        let past_frontier = self.chunk_id > header.tail_chunk
            || (self.chunk_id == header.tail_chunk && end > u64::from(header.tail_offset));
        if past_frontier || end > CHUNK_FILE_LEN {
            return Err(D::OutOfBounds { chunk: self.chunk_id, offset: self.offset, phys: self.phys_length });
        }
        Ok(codec)
    }
}

/// Name of chunk file `id` inside the store directory.
pub fn chunk_file_name(id: u16) -> alloc::string::String {
    alloc::format!("{id}.zr")
}

/// Name of the metadata file inside the store directory.
pub const META_FILE: &str = "meta.zr";

/// Name of the side file holding the store's generation counter (`docs/format.md`,
/// "generation.zrg"). zrecord writes it; loaderx does not know it.
pub const GENERATION_FILE: &str = "generation.zrg";
/// First four bytes of the generation file.
pub const GENERATION_MAGIC: [u8; 4] = *b"ZRGN";
/// The only generation file version this crate reads and writes.
pub const GENERATION_VERSION: u16 = 1;
/// Exact size of the generation file.
pub const GENERATION_LEN: usize = 16;
/// Bits of [`generation`] that hold the append frontier (`tail_chunk * 2^32 + tail_offset`
/// is below `2^12 * 2^32`).
pub const GENERATION_FRONTIER_BITS: u32 = 44;

/// Encodes the generation file: magic, version, two reserved zero bytes, then `counter`
/// (how many deletes and compacts zrecord began on the store).
pub fn encode_generation(counter: u64) -> [u8; GENERATION_LEN] {
    let mut b = [0u8; GENERATION_LEN];
    b[0..4].copy_from_slice(&GENERATION_MAGIC);
    b[4..6].copy_from_slice(&GENERATION_VERSION.to_le_bytes());
    b[8..16].copy_from_slice(&counter.to_le_bytes());
    b
}

/// The counter of a generation file, or `None` if the bytes are not one (another size,
/// magic or version, or reserved bytes that are not zero). An empty file is counter 0, as
/// a missing one is (hosts that cannot remove files leave side files empty).
pub fn decode_generation(b: &[u8]) -> Option<u64> {
    if b.is_empty() {
        return Some(0);
    }
    let b: &[u8; GENERATION_LEN] = b.try_into().ok()?;
    let version = u16::from_le_bytes([b[4], b[5]]);
    if b[0..4] != GENERATION_MAGIC || version != GENERATION_VERSION || b[6..8] != [0, 0] {
        return None;
    }
    Some(u64::from_le_bytes([b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]]))
}

/// The store's generation: its counter (modulo `2^20`) above the header's append frontier,
/// `counter << 44 | (tail_chunk * 2^32 + tail_offset)`.
///
/// zrecord's delete and compact raise the counter; a writer that does not know the file
/// (loaderx) moves the frontier on every append and compact, and its deletes change the
/// length, which readers compare beside the generation. So `(length, generation)` changes
/// whenever the records behind the indices may have changed, whoever changed them. (The
/// one blind spot: a foreign delete, compact and append that end on the very same length
/// and frontier.)
pub fn generation(counter: u64, header: &Header) -> u64 {
    let counter = counter & ((1 << (64 - GENERATION_FRONTIER_BITS)) - 1);
    (counter << GENERATION_FRONTIER_BITS) | header.chunk_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trip_and_bytes() {
        let h = Header { tail_chunk: 3, tail_offset: 0x0102_0304, length: 5 };
        let b = h.encode();
        assert_eq!(&b[..4], b"ZREC");
        assert_eq!(b, [b'Z', b'R', b'E', b'C', 1, 0, 3, 0, 4, 3, 2, 1, 5, 0, 0, 0]);
        assert_eq!(Header::decode(&b).unwrap(), h);
        let d = h.encode_as(FileLayout::Dense);
        assert_eq!(d[4..6], [2, 0]);
        assert_eq!(d[..4], b[..4]);
        assert_eq!(d[6..], b[6..]);
        assert_eq!(Header::decode_with_layout(&d).unwrap(), (h, FileLayout::Dense));
        assert_eq!(Header::decode_with_layout(&b).unwrap(), (h, FileLayout::Sparse));
    }

    #[test]
    fn meta_sizes_per_layout() {
        assert!(FileLayout::Sparse.meta_len_ok(META_LEN, 7));
        assert!(!FileLayout::Sparse.meta_len_ok(entry_offset(7), 7));
        assert!(FileLayout::Dense.meta_len_ok(entry_offset(7), 7));
        assert!(FileLayout::Dense.meta_len_ok(META_LEN, 7));
        assert!(!FileLayout::Dense.meta_len_ok(entry_offset(7) - 1, 7));
        assert!(!FileLayout::Dense.meta_len_ok(META_LEN + 1, 7));
        for l in FileLayout::ALL {
            assert_eq!(FileLayout::from_name(l.name()), Some(l));
            assert_eq!(FileLayout::of_version(l.version()), Some(l));
        }
    }

    #[test]
    fn header_rejects_bad_magic_version_and_limits() {
        let mut b = Header::default().encode();
        b[0] = b'X';
        assert!(matches!(Header::decode(&b), Err(FormatError::BadMagic { .. })));
        let mut b = Header::default().encode();
        b[4] = 3;
        assert!(matches!(Header::decode(&b), Err(FormatError::UnsupportedVersion { found: 3 })));
        let b = Header { length: MAX_RECORDS + 1, ..Default::default() }.encode();
        assert!(matches!(Header::decode(&b), Err(FormatError::LengthTooLarge { .. })));
        let b = Header { tail_chunk: 4096, ..Default::default() }.encode();
        assert!(matches!(Header::decode(&b), Err(FormatError::TailChunkTooLarge { .. })));
    }

    #[test]
    fn generation_file_bytes() {
        let b = encode_generation(0x0102_0304_0506_0708);
        assert_eq!(b, [b'Z', b'R', b'G', b'N', 1, 0, 0, 0, 8, 7, 6, 5, 4, 3, 2, 1]);
        assert_eq!(decode_generation(&b), Some(0x0102_0304_0506_0708));
        assert_eq!(decode_generation(&[]), Some(0));
        assert_eq!(decode_generation(&b[..15]), None);
        let mut bad = b;
        bad[0] = b'X';
        assert_eq!(decode_generation(&bad), None);
        let mut bad = b;
        bad[4] = 2;
        assert_eq!(decode_generation(&bad), None);
        let mut bad = b;
        bad[7] = 1;
        assert_eq!(decode_generation(&bad), None);
        let mut long = b.to_vec();
        long.push(0);
        assert_eq!(decode_generation(&long), None);
    }

    #[test]
    fn generation_puts_the_counter_above_the_frontier() {
        let h = Header { tail_chunk: 4095, tail_offset: u32::MAX, length: 9 };
        assert_eq!(generation(0, &h), (1 << 44) - 1);
        assert_eq!(generation(3, &h), (3 << 44) | ((1 << 44) - 1));
        // The counter wraps at 2^20 rather than spilling out of the u64.
        assert_eq!(generation(1 << 20, &Header::default()), 0);
        // Every field of the frontier moves it; the length does not (readers compare it).
        let base = Header { tail_chunk: 1, tail_offset: 7, length: 5 };
        assert_ne!(generation(1, &base), generation(1, &Header { tail_offset: 8, ..base }));
        assert_ne!(generation(1, &base), generation(1, &Header { tail_chunk: 2, ..base }));
        assert_ne!(generation(1, &base), generation(2, &base));
        assert_eq!(generation(1, &base), generation(1, &Header { length: 4, ..base }));
    }

    #[test]
    fn entry_round_trip_and_bytes() {
        let e = RecordLoc { offset: 11, phys_length: 14, logic_length: 100, chunk_id: 2, codec: 1 };
        let b = e.encode();
        assert_eq!(b, [11, 0, 0, 0, 14, 0, 0, 0, 100, 0, 0, 0, 2, 0, 1, 0]);
        assert_eq!(RecordLoc::decode(&b), e);
    }

    #[test]
    fn entry_check_catches_each_defect() {
        use crate::error::DecodeError as D;
        let h = Header { tail_chunk: 1, tail_offset: 100, length: 1 };
        let ok = RecordLoc { offset: 0, phys_length: 10, logic_length: 20, chunk_id: 1, codec: 1 };
        assert_eq!(ok.check(&h), Ok(Codec::Flate));
        let bad = |e: RecordLoc| e.check(&h).unwrap_err();
        assert!(matches!(bad(RecordLoc { codec: 9, ..ok }), D::UnknownCodec { tag: 9 }));
        assert!(matches!(bad(RecordLoc { logic_length: MAX_RECORD_LEN + 1, ..ok }), D::LengthOverLimit { .. }));
        assert!(matches!(bad(RecordLoc { codec: 0, ..ok }), D::RawLengthMismatch { .. }));
        assert_eq!(bad(RecordLoc::default()), D::EmptyRecord);
        assert_eq!(bad(RecordLoc { phys_length: 0, ..ok }), D::EmptyRecord);
        assert!(matches!(bad(RecordLoc { offset: 95, ..ok }), D::OutOfBounds { .. }));
        assert!(matches!(bad(RecordLoc { chunk_id: 2, ..ok }), D::OutOfBounds { .. }));
        assert!(matches!(bad(RecordLoc { offset: u32::MAX, chunk_id: 0, ..ok }), D::OutOfBounds { .. }));
    }
}
