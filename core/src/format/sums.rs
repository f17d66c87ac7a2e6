//! The bytes of `checksums.zrc`, the side file holding a 64-bit checksum of every record's
//! stored bytes: a zrecord addition that loaderx 0.5.4 neither reads nor writes.
//!
//! The file is a 32-byte header followed by one 32-byte slot per record-table entry, slot
//! `i` for entry `i`, at a fixed offset (created sparse at its full size, as meta.zr is).
//! A slot carries, besides the checksum, an exact copy of the table entry it was taken
//! for, and a seal over both. A checksum is trusted only while its slot is sealed and its
//! copy equals the entry now in the table; any other slot (never written, torn, damaged, or
//! left behind when a writer that does not keep checksums, such as loaderx, moved or
//! replaced the entry) is *unchecked*, never a reason to call the record damaged. That is
//! what makes every crash and every foreign writer safe: the side file can only fall
//! behind the table, and where it does, it says so. The byte diagram is in
//! `docs/format.md`, "checksums.zrc"; keep the two in step.
//!
//! The header also keeps the *covered header*: a copy of meta.zr's header as zrecord last
//! wrote it. While meta.zr's header still equals it, no other writer has changed the store
//! since, so a table entry that differs from its slot's copy (and whose bytes do not match
//! the checksum) is damage, not a foreign writer's work.
//!
//! ```text
//! offset  size  field
//!      0     4  magic "ZRCS"
//!      4     2  version u16 = 1
//!      6     2  algorithm u16 = 1 (XXH3-64, seed 0)
//!      8     4  slot_len u32 = 32
//!     12     4  slots u32 = 2^24
//!     16     8  reserved, 0
//!     24     8  seal: XXH3-64 of bytes 0..24, u64
//!     32    16  covered header: meta.zr's 16-byte header as zrecord last wrote it
//!     48     8  nonce u64: drawn when zrecord created the store, folded into its
//!               generation (0: none; a store from before nonces, or one whose side file
//!               was made again)
//!     56     8  seal: XXH3-64 with seed COVER_SEAL_KEY of bytes 32..56, u64
//!
//! offset 64 + 32*i: slot i
//!      0    16  the table entry the checksum was taken for, as in meta.zr
//!     16     8  checksum: XXH3-64 (seed 0) of the entry's stored bytes, u64
//!     24     8  seal: XXH3-64 with seed (SLOT_SEAL_KEY ^ i) of bytes 0..24 of the slot, u64
//! ```

use twox_hash::XxHash3_64;

use super::{Header, RecordLoc, ENTRY_LEN, HEADER_LEN, MAX_RECORDS};

/// Name of the checksum side file inside the store directory.
pub const SUMS_FILE: &str = "checksums.zrc";
/// Name of the side file that records that the store keeps checksums, written whenever
/// zrecord creates [`SUMS_FILE`]: while it exists, a missing or unusable `checksums.zrc`
/// is a loss to report, not a store loaderx alone wrote (`docs/format.md`, "checksums.zrk").
pub const SUMS_MARK_FILE: &str = "checksums.zrk";
/// The whole content of [`SUMS_MARK_FILE`]: magic "ZRCK", version 1 (u16), two zero bytes.
pub const SUMS_MARK: [u8; 8] = *b"ZRCK\x01\x00\x00\x00";
/// First four bytes of the side file.
pub const SUMS_MAGIC: [u8; 4] = *b"ZRCS";
/// The only side-file version this crate reads and writes.
pub const SUMS_VERSION: u16 = 1;
/// Algorithm 1: XXH3-64 with seed 0 over the record's stored bytes.
pub const SUMS_ALGORITHM: u16 = 1;
/// Size of the header (the fixed part and the covered header).
pub const SUMS_HEADER_LEN: usize = 64;
/// Size of the fixed part of the header.
pub const SUMS_ID_LEN: usize = 32;
/// Where the covered header's block starts, and its size.
pub const COVER_OFFSET: u64 = 32;
/// Size of the covered header's block.
pub const COVER_LEN: usize = 32;
/// Seed of the covered header's seal.
pub const COVER_SEAL_KEY: u64 = 0x5a52_4353_434f_5652; // "ZRCSCOVR"
/// Size of one slot. 32 divides the 512-byte sector, so a slot never straddles two sectors
/// and a torn write leaves each slot old or new (the seal catches anything else).
pub const SLOT_LEN: usize = 32;
/// Exact size of the side file.
pub const SUMS_LEN: u64 = SUMS_HEADER_LEN as u64 + MAX_RECORDS as u64 * SLOT_LEN as u64;
/// Mixed into each slot's seal seed with the slot index, so that a slot copied to another
/// index, or an all-zero slot, is not sealed.
pub const SLOT_SEAL_KEY: u64 = 0x5a52_4353_5345_414c; // "ZRCSSEAL"

const _: () = assert!(512usize.is_multiple_of(SLOT_LEN) && SUMS_HEADER_LEN.is_multiple_of(SLOT_LEN));
const _: () = assert!(SUMS_LEN == 536_870_976);

/// The checksum zrecord keeps of a record's stored bytes (XXH3-64, seed 0).
///
/// Measured on this project's 2-core benchmark machine (`docs/format.md`, "checksums.zrc"):
/// XXH3-64 runs at 13-26 GB/s on 256 B to 150 KiB records, faster than hardware CRC32C
/// and 4-8x faster than a portable (no_std) CRC32C, and its 64 bits make an accidental match
/// of damaged bytes a 2^-64 event.
#[inline]
pub fn checksum(stored: &[u8]) -> u64 {
    XxHash3_64::oneshot(stored)
}

/// Byte offset of slot `index` inside the side file.
pub const fn slot_offset(index: u32) -> u64 {
    SUMS_HEADER_LEN as u64 + index as u64 * SLOT_LEN as u64
}

/// The fixed part of the side file's header (its first 32 bytes).
pub fn encode_header() -> [u8; SUMS_ID_LEN] {
    let mut b = [0u8; SUMS_ID_LEN];
    b[0..4].copy_from_slice(&SUMS_MAGIC);
    b[4..6].copy_from_slice(&SUMS_VERSION.to_le_bytes());
    b[6..8].copy_from_slice(&SUMS_ALGORITHM.to_le_bytes());
    b[8..12].copy_from_slice(&(SLOT_LEN as u32).to_le_bytes());
    b[12..16].copy_from_slice(&MAX_RECORDS.to_le_bytes());
    let seal = XxHash3_64::oneshot(&b[..24]);
    b[24..32].copy_from_slice(&seal.to_le_bytes());
    b
}

/// What a side file's header says about the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SumsHeader {
    /// Version 1, XXH3-64, intact: its slots can be used.
    Usable,
    /// A version or algorithm this build does not know, sealed intact: written by a newer
    /// zrecord. Its slots are not read, and it is never overwritten.
    Newer,
    /// Not a side file header at all (short, wrong magic, bad seal): damaged. No slot is
    /// trusted; a writer may initialise the file again (every checksum then comes back
    /// only through its own slot's seal and entry copy).
    Damaged,
}

/// Classifies the first bytes of a side file.
pub fn decode_header(b: &[u8]) -> SumsHeader {
    if b.len() < SUMS_ID_LEN || b[0..4] != SUMS_MAGIC {
        return SumsHeader::Damaged;
    }
    if b[24..32] != XxHash3_64::oneshot(&b[..24]).to_le_bytes() {
        return SumsHeader::Damaged;
    }
    if b[..SUMS_ID_LEN] == encode_header() {
        SumsHeader::Usable
    } else {
        SumsHeader::Newer
    }
}

/// The covered header's block: `header`, as zrecord has just written it to meta.zr, and
/// the store's creation `nonce` (0 for none), which every rewrite of the block carries.
pub fn encode_covered(header: &Header, nonce: u64) -> [u8; COVER_LEN] {
    let mut b = [0u8; COVER_LEN];
    b[..HEADER_LEN].copy_from_slice(&header.encode());
    b[HEADER_LEN..24].copy_from_slice(&nonce.to_le_bytes());
    let seal = XxHash3_64::oneshot_with_seed(COVER_SEAL_KEY, &b[..24]);
    b[24..32].copy_from_slice(&seal.to_le_bytes());
    b
}

/// The covered header and the nonce, if the block is sealed and holds a valid header.
/// (Builds before nonces wrote zeros where the nonce is, and read past it.)
pub fn decode_covered(b: &[u8]) -> Option<(Header, u64)> {
    let b = b.get(..COVER_LEN)?;
    if b[24..32] != XxHash3_64::oneshot_with_seed(COVER_SEAL_KEY, &b[..24]).to_le_bytes() {
        return None;
    }
    let mut h = [0u8; HEADER_LEN];
    h.copy_from_slice(&b[..HEADER_LEN]);
    let mut nonce = [0u8; 8];
    nonce.copy_from_slice(&b[HEADER_LEN..24]);
    Some((Header::decode(&h).ok()?, u64::from_le_bytes(nonce)))
}

fn slot_seal(index: u32, body: &[u8]) -> u64 {
    XxHash3_64::oneshot_with_seed(SLOT_SEAL_KEY ^ u64::from(index), body)
}

/// Encodes slot `index`: the checksum `sum` of the stored bytes of `entry`.
pub fn encode_slot(index: u32, entry: &RecordLoc, sum: u64) -> [u8; SLOT_LEN] {
    let mut b = [0u8; SLOT_LEN];
    b[..ENTRY_LEN].copy_from_slice(&entry.encode());
    b[16..24].copy_from_slice(&sum.to_le_bytes());
    let seal = slot_seal(index, &b[..24]);
    b[24..32].copy_from_slice(&seal.to_le_bytes());
    b
}

/// The sealed contents of slot `index`: the entry it was taken for and the checksum, or
/// `None` if the slot is not sealed (never written, torn or damaged).
pub fn decode_slot(index: u32, b: &[u8]) -> Option<(RecordLoc, u64)> {
    let b = b.get(..SLOT_LEN)?;
    if b[24..32] != slot_seal(index, &b[..24]).to_le_bytes() {
        return None;
    }
    let sum = u64::from_le_bytes([b[16], b[17], b[18], b[19], b[20], b[21], b[22], b[23]]);
    Some((RecordLoc::decode(&b[..ENTRY_LEN]), sum))
}

/// The checksum slot `index` holds for `entry`, if the slot is sealed and was taken for
/// exactly that entry; `None` means the entry is unchecked.
pub fn slot_sum(index: u32, slot: &[u8], entry: &RecordLoc) -> Option<u64> {
    decode_slot(index, slot).and_then(|(e, sum)| (e == *entry).then_some(sum))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry() -> RecordLoc {
        RecordLoc { offset: 0x0102_0304, phys_length: 900, logic_length: 1200, chunk_id: 7, codec: 1 }
    }

    #[test]
    fn checksum_is_xxh3_64_seed_0() {
        // Published XXH3-64 test vectors (empty input, and "a" is checked by round trip).
        assert_eq!(checksum(b""), 0x2d06_8005_38d3_94c2);
        assert_ne!(checksum(b"a"), checksum(b"b"));
        // Values from a second implementation (xxhash-rust 0.8.15) for each of XXH3's length
        // classes (1-3, 17-128, 129-240, long with and without a partial stripe), so a
        // change of hashing crate or of its SIMD dispatch cannot change what a store holds.
        let golden: [(usize, u64, u64); 5] = [
            (3, 0x3698_b801_91e6_25f9, 0xcbe5_66a3_13d4_bb11),
            (100, 0x1efb_aa65_2af7_dfb7, 0x7a94_ce5c_d1f3_26ad),
            (200, 0xc063_67d4_05bd_c71d, 0x6fbe_6f1e_f91c_6477),
            (1000, 0x404e_1417_800e_b486, 0xc5ae_7dd5_863e_43c8),
            (12288, 0x09de_28ee_1534_270b, 0x08d2_60d3_2a29_6be6),
        ];
        for (len, plain, seeded) in golden {
            let buf: alloc::vec::Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
            assert_eq!(checksum(&buf), plain, "{len} bytes");
            assert_eq!(XxHash3_64::oneshot_with_seed(SLOT_SEAL_KEY, &buf), seeded, "{len} bytes, seeded");
        }
    }

    #[test]
    fn header_bytes_and_classes() {
        let h = encode_header();
        assert_eq!(&h[..16], &[b'Z', b'R', b'C', b'S', 1, 0, 1, 0, 32, 0, 0, 0, 0, 0, 0, 1]);
        assert_eq!(h[16..24], [0; 8]);
        assert_eq!(decode_header(&h), SumsHeader::Usable);
        assert_eq!(decode_header(&h[..31]), SumsHeader::Damaged);
        assert_eq!(SUMS_ID_LEN + COVER_LEN, SUMS_HEADER_LEN);
        assert_eq!(decode_header(&[0u8; 32]), SumsHeader::Damaged);
        for at in 0..SUMS_ID_LEN {
            let mut d = h;
            d[at] ^= 0x10;
            assert_eq!(decode_header(&d), SumsHeader::Damaged, "byte {at}");
        }
        // A sealed header of another version is a newer writer's, not damage.
        let mut v2 = h;
        v2[4] = 2;
        let seal = XxHash3_64::oneshot(&v2[..24]);
        v2[24..].copy_from_slice(&seal.to_le_bytes());
        assert_eq!(decode_header(&v2), SumsHeader::Newer);
    }

    #[test]
    fn covered_header_round_trip_and_damage() {
        let h = Header { tail_chunk: 2, tail_offset: 77, length: 9 };
        let b = encode_covered(&h, 0);
        assert_eq!(b[..16], h.encode());
        assert_eq!(b[16..24], [0; 8], "no nonce: the bytes builds before nonces wrote");
        assert_eq!(decode_covered(&b), Some((h, 0)));
        assert_eq!(decode_covered(&[0u8; COVER_LEN]), None);
        for at in 0..COVER_LEN {
            let mut d = b;
            d[at] ^= 4;
            assert_eq!(decode_covered(&d), None, "byte {at}");
        }
        // The nonce sits in what was reserved, under the same seal.
        let b = encode_covered(&h, 0x0102_0304_0506_0708);
        assert_eq!(b[16..24], [8, 7, 6, 5, 4, 3, 2, 1]);
        assert_eq!(decode_covered(&b), Some((h, 0x0102_0304_0506_0708)));
        let mut d = b;
        d[20] ^= 1;
        assert_eq!(decode_covered(&d), None, "the seal covers the nonce");
    }

    #[test]
    fn slot_round_trip_and_bytes() {
        let e = entry();
        let s = encode_slot(5, &e, 0x1122_3344_5566_7788);
        assert_eq!(s[..16], e.encode());
        assert_eq!(s[16..24], [0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11]);
        assert_eq!(decode_slot(5, &s), Some((e, 0x1122_3344_5566_7788)));
        assert_eq!(slot_sum(5, &s, &e), Some(0x1122_3344_5566_7788));
    }

    #[test]
    fn a_slot_covers_only_its_own_index_and_entry() {
        let e = entry();
        let s = encode_slot(5, &e, 42);
        assert_eq!(decode_slot(6, &s), None, "copied to another slot");
        assert_eq!(decode_slot(0, &[0u8; SLOT_LEN]), None, "a hole in the sparse file");
        assert_eq!(decode_slot(5, &s[..31]), None);
        // Another entry in the table (a foreign writer moved or replaced it): unchecked.
        for other in [
            RecordLoc { offset: e.offset + 1, ..e },
            RecordLoc { chunk_id: 8, ..e },
            RecordLoc { phys_length: 901, ..e },
            RecordLoc { logic_length: 1, ..e },
            RecordLoc { codec: 0, ..e },
        ] {
            assert_eq!(slot_sum(5, &s, &other), None, "{other:?}");
        }
        // Any damaged byte of the slot makes it unchecked, never a different checksum.
        for at in 0..SLOT_LEN {
            for bit in 0..8 {
                let mut d = s;
                d[at] ^= 1 << bit;
                assert_eq!(slot_sum(5, &d, &e), None, "bit {bit} of byte {at}");
            }
        }
    }
}
