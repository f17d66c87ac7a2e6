//! The bytes of `delete.zrj`, the redo journal through which a delete that rewrites live
//! table slots commits.
//!
//! Delete overwrites live 16-byte table slots, which no ordering of writes can make atomic;
//! the journal does. It holds the header before the delete, the new length, and the final
//! contents of every slot below the new length that the delete rewrites, sealed by a
//! checksum. This module knows its bytes and when it applies to a store; writing it,
//! replaying it and removing it is the engine's (`engine/delete.rs`), in the order that
//! `docs/format.md` ("Ordering rules", Delete) gives. The byte diagram is in
//! `docs/format.md`, "delete.zrj"; keep the two in step.
//!
//! Layout, every integer little-endian (n = move count):
//!
//! ```text
//! offset  size  field
//!      0     4  magic "ZRDJ"
//!      4     2  version u16 = 1
//!      6     2  tail_chunk  u16  \
//!      8     4  tail_offset u32   } the store's header before the delete
//!     12     4  length      u32  /
//!     16     4  new_length  u32     the length after it
//!     20     4  n           u32     number of moves
//!     24   20n  n moves: slot u32, then the slot's final 16-byte table entry
//! 24+20n     8  FNV-1a 64 of bytes 0 .. 24+20n, u64
//! ```

use alloc::vec::Vec;

use super::{Header, RecordLoc, ENTRY_LEN};

/// Name of the side file holding a delete's redo journal while the delete runs.
pub const DELETE_JOURNAL: &str = "delete.zrj";
/// First four bytes of every journal.
pub const JOURNAL_MAGIC: [u8; 4] = *b"ZRDJ";
/// The only journal version this crate reads and writes.
pub const JOURNAL_VERSION: u16 = 1;
/// Size of the fixed part before the moves.
pub const JOURNAL_HEAD_LEN: usize = 24;
/// Size of one move: the slot and its new entry.
pub const JOURNAL_MOVE_LEN: usize = 4 + ENTRY_LEN;
/// Size of the checksum that ends the journal.
pub const JOURNAL_SUM_LEN: usize = 8;
/// The largest journal: one move per record slot.
pub const MAX_JOURNAL_LEN: u64 =
    (JOURNAL_HEAD_LEN + JOURNAL_SUM_LEN) as u64 + JOURNAL_MOVE_LEN as u64 * crate::format::MAX_RECORDS as u64;

const _: () = assert!(JOURNAL_MOVE_LEN == 20);

/// The redo journal of one delete.
///
/// A journal that fails to decode (short, wrong magic or version, bad checksum, a move
/// count that does not match its size, a slot at or past the new length) was never
/// completely written, so the delete it belonged to touched nothing. One that decodes but
/// does not [apply](DeleteJournal::applies_to) to the store's current header is stale.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeleteJournal {
    /// The store's header before the delete.
    pub header: Header,
    /// The number of live records after the delete; at most `header.length`.
    pub new_length: u32,
    /// Each table slot below `new_length` that the delete rewrites, with its final entry.
    pub moves: Vec<(u32, RecordLoc)>,
}

/// FNV-1a, 64-bit: offset basis 0xcbf29ce484222325, prime 0x100000001b3.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

impl DeleteJournal {
    /// Encodes the journal, checksum included.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(JOURNAL_HEAD_LEN + self.moves.len() * JOURNAL_MOVE_LEN + JOURNAL_SUM_LEN);
        b.extend_from_slice(&JOURNAL_MAGIC);
        b.extend_from_slice(&JOURNAL_VERSION.to_le_bytes());
        b.extend_from_slice(&self.header.tail_chunk.to_le_bytes());
        b.extend_from_slice(&self.header.tail_offset.to_le_bytes());
        b.extend_from_slice(&self.header.length.to_le_bytes());
        b.extend_from_slice(&self.new_length.to_le_bytes());
        b.extend_from_slice(&(self.moves.len() as u32).to_le_bytes());
        for (slot, e) in &self.moves {
            b.extend_from_slice(&slot.to_le_bytes());
            b.extend_from_slice(&e.encode());
        }
        let sum = fnv1a(&b);
        b.extend_from_slice(&sum.to_le_bytes());
        b
    }

    /// Decodes a journal, or `None` if it is not a complete, intact one (see the type's
    /// documentation). Whether it belongs to the store is [`DeleteJournal::applies_to`].
    pub fn decode(b: &[u8]) -> Option<Self> {
        let u32_at = |at: usize| u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        if b.len() < JOURNAL_HEAD_LEN + JOURNAL_SUM_LEN
            || b[..4] != JOURNAL_MAGIC
            || b[4..6] != JOURNAL_VERSION.to_le_bytes()
        {
            return None;
        }
        let (body, sum) = b.split_at(b.len() - JOURNAL_SUM_LEN);
        if fnv1a(body).to_le_bytes() != sum {
            return None;
        }
        let header =
            Header { tail_chunk: u16::from_le_bytes([b[6], b[7]]), tail_offset: u32_at(8), length: u32_at(12) };
        let (new_length, count) = (u32_at(16), u32_at(20) as usize);
        if body.len() != JOURNAL_HEAD_LEN + count.checked_mul(JOURNAL_MOVE_LEN)? || new_length > header.length {
            return None;
        }
        let moves: Vec<(u32, RecordLoc)> = body[JOURNAL_HEAD_LEN..]
            .chunks_exact(JOURNAL_MOVE_LEN)
            .map(|m| (u32::from_le_bytes([m[0], m[1], m[2], m[3]]), RecordLoc::decode(&m[4..])))
            .collect();
        if moves.iter().any(|&(slot, _)| slot >= new_length) {
            return None;
        }
        Some(DeleteJournal { header, new_length, moves })
    }

    /// True if the journal belongs to a store whose header is `current`: the same frontier,
    /// and either the length from before the delete (the header was not yet rewritten) or
    /// the one after it (the header was, the slots may not all be). Replaying it then is
    /// safe either way, since every write it makes is idempotent.
    pub fn applies_to(&self, current: &Header) -> bool {
        let same_tail = (current.tail_chunk, current.tail_offset) == (self.header.tail_chunk, self.header.tail_offset);
        same_tail && (current.length == self.header.length || current.length == self.new_length)
    }

    /// The header the delete leaves: the old frontier with the new length.
    pub fn new_header(&self) -> Header {
        Header { length: self.new_length, ..self.header }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> DeleteJournal {
        DeleteJournal {
            header: Header { tail_chunk: 2, tail_offset: 0x0a0b_0c0d, length: 10 },
            new_length: 7,
            moves: alloc::vec![
                (1, RecordLoc { offset: 5, phys_length: 6, logic_length: 7, chunk_id: 1, codec: 1 }),
                (6, RecordLoc { offset: 0x0102_0304, phys_length: 9, logic_length: 9, chunk_id: 2, codec: 0 }),
            ],
        }
    }

    /// Replaces the checksum so that a test reaches the checks behind it.
    fn reseal(b: &mut [u8]) {
        let at = b.len() - JOURNAL_SUM_LEN;
        let sum = fnv1a(&b[..at]);
        b[at..].copy_from_slice(&sum.to_le_bytes());
    }

    #[test]
    fn fnv1a_is_the_published_function() {
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn round_trip_and_bytes() {
        let j = sample();
        let b = j.encode();
        assert_eq!(b.len(), JOURNAL_HEAD_LEN + 2 * JOURNAL_MOVE_LEN + JOURNAL_SUM_LEN);
        assert_eq!(b.len(), 72);
        #[rustfmt::skip]
        let head: [u8; 24] = [
            b'Z', b'R', b'D', b'J', // magic
            1, 0,                   // version
            2, 0,                   // tail_chunk
            0x0d, 0x0c, 0x0b, 0x0a, // tail_offset
            10, 0, 0, 0,            // length
            7, 0, 0, 0,             // new_length
            2, 0, 0, 0,             // move count
        ];
        assert_eq!(b[..24], head);
        assert_eq!(b[24..28], [1, 0, 0, 0]);
        assert_eq!(b[28..44], j.moves[0].1.encode());
        assert_eq!(b[44..48], [6, 0, 0, 0]);
        assert_eq!(b[48..52], [4, 3, 2, 1], "the moved entry's offset, little-endian");
        assert_eq!(b[48..64], j.moves[1].1.encode());
        assert_eq!(b[64..72], fnv1a(&b[..64]).to_le_bytes());
        assert_eq!(DeleteJournal::decode(&b), Some(j));

        let empty = DeleteJournal { moves: Vec::new(), ..sample() };
        let b = empty.encode();
        assert_eq!(b.len(), JOURNAL_HEAD_LEN + JOURNAL_SUM_LEN);
        assert_eq!(DeleteJournal::decode(&b), Some(empty));
    }

    #[test]
    fn every_flipped_bit_and_every_cut_is_rejected() {
        let b = sample().encode();
        for at in 0..b.len() {
            for bit in 0..8 {
                let mut d = b.clone();
                d[at] ^= 1 << bit;
                assert_eq!(DeleteJournal::decode(&d), None, "bit {bit} of byte {at} flipped");
            }
        }
        for len in 0..b.len() {
            assert_eq!(DeleteJournal::decode(&b[..len]), None, "cut to {len} bytes");
        }
        let mut longer = b.clone();
        longer.push(0);
        assert_eq!(DeleteJournal::decode(&longer), None);
    }

    #[test]
    fn sealed_but_inconsistent_journals_are_rejected() {
        let good = sample().encode();
        let with = |at: usize, bytes: &[u8]| {
            let mut d = good.clone();
            d[at..at + bytes.len()].copy_from_slice(bytes);
            reseal(&mut d);
            DeleteJournal::decode(&d)
        };
        assert!(with(0, b"ZRDK").is_none(), "magic");
        assert!(with(4, &2u16.to_le_bytes()).is_none(), "version");
        assert!(with(20, &1u32.to_le_bytes()).is_none(), "fewer moves than bytes");
        assert!(with(20, &3u32.to_le_bytes()).is_none(), "more moves than bytes");
        assert!(with(20, &u32::MAX.to_le_bytes()).is_none(), "absurd move count");
        assert!(with(16, &11u32.to_le_bytes()).is_none(), "new length above the old one");
        assert!(with(44, &7u32.to_le_bytes()).is_none(), "slot at the new length");
        // The same edits that keep the journal consistent still decode.
        assert_eq!(with(16, &10u32.to_le_bytes()).map(|j| j.new_length), Some(10));
        assert_eq!(with(44, &0u32.to_le_bytes()).map(|j| j.moves[1].0), Some(0));
    }

    #[test]
    fn applies_before_and_after_its_header_only() {
        let j = sample();
        assert!(j.applies_to(&j.header));
        assert!(j.applies_to(&j.new_header()));
        assert_eq!(j.new_header(), Header { length: 7, ..j.header });
        assert!(!j.applies_to(&Header { length: 8, ..j.header }));
        assert!(!j.applies_to(&Header { tail_offset: j.header.tail_offset + 1, ..j.header }));
        assert!(!j.applies_to(&Header { tail_chunk: 3, ..j.header }));
    }
}
