//! Samples longer than a record: a ragged, bytes or string sample of more than
//! [`MAX_RECORD_LEN`] bytes (a book, a long code file, a 10^7-token document) spans several
//! records of its field's store.
//!
//! A store's records are at most 1 MiB (the loaderx format's limit), and record `i` of a
//! field store is sample `i` of its shard. A long sample keeps that: its record holds the
//! sample's first piece, and the rest follows, in pieces, after the shard's samples:
//!
//! ```text
//! records 0 .. n                  one per sample (a long one's first piece)
//! records n .. n + m              continuation pieces, a long sample's in a row,
//!                                 long samples in sample order
//! record  n + m                   the long index (below)
//! ```
//!
//! Every piece but a sample's last is [`piece_len`] bytes (the most whole elements that fit
//! a record); the last holds the rest (1 byte to a piece). The shard's manifest entry lists
//! the field under `long` (`docs/format.md`), which is what tells a reader to look: a
//! store of a listed field holds more records than the shard's samples, and its last is
//! the index:
//!
//! ```text
//! offset 0     4           8           12                      12 + 8k
//! +-----------+-----------+-----------+-----------------------+
//! | "ZRLX"    | version 1 | count k   | k x (sample, more)    |   u32 little-endian each
//! +-----------+-----------+-----------+-----------------------+
//! ```
//!
//! `sample` is the long sample's record (strictly increasing), `more` its continuation
//! pieces (at least 1). The continuation records of the `j`-th entry start at `n` plus the
//! `more` of the entries before it. Lengths are the table's: nothing here repeats them.

use alloc::format;
use alloc::vec::Vec;

use crate::error::{Error, FormatError};
use crate::MAX_RECORD_LEN;

/// The long index's first bytes.
pub const LONG_MAGIC: [u8; 4] = *b"ZRLX";
/// The long index's version.
pub const LONG_VERSION: u32 = 1;
/// Bytes before the entries.
pub const LONG_HEADER_LEN: usize = 12;
/// Bytes of one entry.
pub const LONG_ENTRY_LEN: usize = 8;
/// The most long samples one store's index holds (so the index is one record); a writer
/// starts a new shard past it.
pub const MAX_LONG: usize = (MAX_RECORD_LEN as usize - LONG_HEADER_LEN) / LONG_ENTRY_LEN;
/// The longest sample of a ragged, bytes or string field, in bytes (a record's length in a
/// batch's offsets and a piece count are then both u32-sized).
pub const MAX_SAMPLE_LEN: u64 = u32::MAX as u64;

/// Bytes of every piece of a long sample but its last: the most whole elements of
/// `itemsize` bytes that fit a record.
pub fn piece_len(itemsize: u64) -> u64 {
    let item = itemsize.clamp(1, u64::from(MAX_RECORD_LEN));
    u64::from(MAX_RECORD_LEN) / item * item
}

/// Continuation records a sample of `len` bytes needs beyond its own (0 when it fits).
pub fn more_pieces(len: u64, piece: u64) -> u64 {
    len.div_ceil(piece.max(1)).saturating_sub(1)
}

/// One long sample of a store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LongSample {
    /// Its record (its index within the shard).
    pub sample: u32,
    /// The record of its first continuation piece.
    pub first: u32,
    /// Its continuation pieces.
    pub more: u32,
    /// Bytes of every piece but the last (its own record's length).
    pub piece: u32,
    /// Its whole length in bytes (0 until [`LongIndex::set_lengths`]).
    pub total: u64,
}

impl LongSample {
    /// The record holding piece `k` (0: the sample's own).
    pub fn record(&self, k: u64) -> u64 {
        if k == 0 {
            u64::from(self.sample)
        } else {
            u64::from(self.first) + k - 1
        }
    }

    /// Every record of the sample in order, with the byte offset of each within it.
    pub fn records(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        (0..=u64::from(self.more)).map(move |k| (self.record(k), k * u64::from(self.piece)))
    }

    /// The pieces that bytes `from..from + len` of the sample cross: (record, offset in
    /// the record, bytes there), in order.
    pub fn ranges(&self, from: u64, len: u64) -> impl Iterator<Item = (u64, u64, u64)> + '_ {
        let piece = u64::from(self.piece).max(1);
        let end = from.saturating_add(len).min(self.total);
        let first = from / piece;
        let last = if end > from { (end - 1) / piece } else { first.saturating_sub(1) };
        (first..=last).filter(move |_| end > from).map(move |k| {
            let start = (k * piece).max(from);
            let stop = ((k + 1) * piece).min(end);
            (self.record(k), start - k * piece, stop - start)
        })
    }
}

/// A store's long samples, in sample order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LongIndex {
    samples: Vec<LongSample>,
}

impl LongIndex {
    /// The index record of long samples given as (record, continuation pieces), in record
    /// order.
    pub fn encode(entries: &[(u32, u32)]) -> Vec<u8> {
        let mut out = Vec::with_capacity(LONG_HEADER_LEN + LONG_ENTRY_LEN * entries.len());
        out.extend_from_slice(&LONG_MAGIC);
        out.extend_from_slice(&LONG_VERSION.to_le_bytes());
        out.extend_from_slice(&(entries.len() as u32).to_le_bytes());
        for &(sample, more) in entries {
            out.extend_from_slice(&sample.to_le_bytes());
            out.extend_from_slice(&more.to_le_bytes());
        }
        out
    }

    /// Reads the index record of a store that holds `records` samples and `store_len`
    /// records in all; the entries must account for every record between.
    pub fn decode(bytes: &[u8], records: u64, store_len: u64) -> Result<LongIndex, FormatError> {
        let bad = |what: alloc::string::String| FormatError::Container(format!("long index: {what}"));
        if bytes.len() < LONG_HEADER_LEN || bytes[..4] != LONG_MAGIC {
            return Err(bad("the store's last record is not a long index".into()));
        }
        let word = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("four bytes"));
        let version = word(4);
        if version != LONG_VERSION {
            return Err(bad(format!("version {version} (this build reads {LONG_VERSION})")));
        }
        let count = word(8) as usize;
        if bytes.len() != LONG_HEADER_LEN + count * LONG_ENTRY_LEN {
            return Err(bad(format!("{} bytes for {count} entries", bytes.len())));
        }
        let mut samples = Vec::with_capacity(count);
        let mut next = records;
        for k in 0..count {
            let at = LONG_HEADER_LEN + k * LONG_ENTRY_LEN;
            let (sample, more) = (word(at), word(at + 4));
            if u64::from(sample) >= records || samples.last().is_some_and(|s: &LongSample| s.sample >= sample) {
                return Err(bad(format!("entry {k} names record {sample}: out of order or not a sample")));
            }
            if more == 0 {
                return Err(bad(format!("entry {k} (record {sample}) has no continuation")));
            }
            samples.push(LongSample { sample, first: next as u32, more, piece: 0, total: 0 });
            next += u64::from(more);
        }
        if next + 1 != store_len {
            return Err(bad(format!(
                "the entries account for {} records, the store holds {store_len} for {records} samples",
                next + 1
            )));
        }
        Ok(LongIndex { samples })
    }

    /// The long index of a field store that its shard lists as long, holding `records`
    /// samples and `store_len` records: read from its last record (`read`), with every long
    /// sample's length from the table (`lengths`, the store's table lengths of records).
    /// Hosts pass their store's own read and lengths.
    pub fn load(
        records: u64,
        store_len: u64,
        read: impl FnOnce(u64) -> Result<Vec<u8>, Error>,
        mut lengths: impl FnMut(&[u64], &mut [u32]) -> Result<(), Error>,
    ) -> Result<LongIndex, Error> {
        if store_len <= records {
            return Err(FormatError::Container(format!(
                "listed as holding long samples, but holds {store_len} records for {records} samples"
            ))
            .into());
        }
        let bytes = read(store_len - 1)?;
        let mut index = LongIndex::decode(&bytes, records, store_len)?;
        for k in 0..index.samples.len() {
            let pieces: Vec<u64> = index.samples[k].records().map(|(r, _)| r).collect();
            let mut lens = alloc::vec![0u32; pieces.len()];
            lengths(&pieces, &mut lens)?;
            index.set_lengths(k, &lens)?;
        }
        Ok(index)
    }

    /// The long samples, in sample order.
    pub fn samples(&self) -> &[LongSample] {
        &self.samples
    }

    /// The long sample whose own record is `sample`, if it is one.
    pub fn find(&self, sample: u64) -> Option<&LongSample> {
        let k = self.samples.binary_search_by_key(&sample, |s| u64::from(s.sample)).ok()?;
        Some(&self.samples[k])
    }

    /// Sets entry `k`'s lengths from its records' table lengths (`lens[0]` its own record's,
    /// then each continuation's): every piece but the last as long as the first, the last
    /// no longer.
    pub fn set_lengths(&mut self, k: usize, lens: &[u32]) -> Result<(), FormatError> {
        let s = &mut self.samples[k];
        let bad = |what: alloc::string::String| {
            FormatError::Container(format!("long index: record {}'s pieces {what}", s.sample))
        };
        if lens.len() != s.more as usize + 1 {
            return Err(bad(format!("are {} lengths for {} pieces", lens.len(), s.more + 1)));
        }
        let piece = lens[0];
        let (last, middle) = lens[1..].split_last().expect("at least one continuation");
        if piece == 0 || middle.iter().any(|&l| l != piece) || *last == 0 || *last > piece {
            return Err(bad(format!("have lengths {lens:?}: all but the last must be equal")));
        }
        s.piece = piece;
        s.total = u64::from(piece) * u64::from(s.more) + u64::from(*last);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_index_round_trips_and_checks_its_counts() {
        let bytes = LongIndex::encode(&[(2, 3), (7, 1)]);
        let mut ix = LongIndex::decode(&bytes, 10, 10 + 4 + 1).unwrap();
        assert_eq!(ix.samples()[1].first, 13);
        assert!(ix.find(7).is_some() && ix.find(3).is_none());
        ix.set_lengths(0, &[8, 8, 8, 5]).unwrap();
        assert_eq!(ix.samples()[0].total, 29);
        assert!(ix.set_lengths(1, &[8, 9]).is_err());
        // One record too many or too few, a sample past the shard, entries out of order.
        assert!(LongIndex::decode(&bytes, 10, 16).is_err());
        assert!(LongIndex::decode(&bytes, 7, 12).is_err());
        assert!(LongIndex::decode(&LongIndex::encode(&[(7, 1), (2, 3)]), 10, 15).is_err());
        assert!(LongIndex::decode(b"not an index", 10, 15).is_err());
    }

    #[test]
    fn ranges_cover_exactly_the_bytes_asked() {
        let s = LongSample { sample: 4, first: 100, more: 3, piece: 10, total: 35 };
        let got: Vec<_> = s.ranges(5, 20).collect();
        assert_eq!(got, [(4, 5, 5), (100, 0, 10), (101, 0, 5)]);
        let got: Vec<_> = s.ranges(30, 100).collect();
        assert_eq!(got, [(102, 0, 5)]);
        assert_eq!(s.ranges(35, 1).count(), 0);
        assert_eq!(s.ranges(3, 0).count(), 0);
        let all: Vec<_> = s.records().collect();
        assert_eq!(all, [(4, 0), (100, 10), (101, 20), (102, 30)]);
        assert_eq!(more_pieces(35, 10), 3);
        assert_eq!(more_pieces(10, 10), 0);
        assert_eq!(piece_len(3), u64::from(MAX_RECORD_LEN) / 3 * 3);
    }
}
