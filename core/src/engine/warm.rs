//! Warming: the bytes a store uses, read once in file order.
//!
//! A training loop reads records in random order. From a cold page cache that is one small
//! read per record (with `MADV_RANDOM`, exactly the record's pages), which a disk serves far
//! slower than the same bytes read front to back. When the whole store fits comfortably in
//! memory, reading it through once, in large sequential pieces, costs a fraction of the
//! random reads it saves, and every later epoch is warm anyway. [`Store::warm`] does that
//! through the host's [`StorageFile::warm`]; [`worth_warming`] is the rule a loader uses to
//! decide whether a store is small enough.

use alloc::vec::Vec;

use super::Store;
use crate::error::Result;
use crate::format::entry_offset;
use crate::format::sums::slot_offset;
use crate::io::{Backend, StorageFile};

/// Bytes asked of [`StorageFile::warm`] at a time: large enough for sequential reads at
/// disk speed, small enough that a stop request is seen within one read of a slow disk.
pub const WARM_PIECE: u64 = 2 << 20;

/// A store is worth warming when its used bytes are at most this share of the memory
/// available to the page cache (1/4): warming must not push out the rest of the working
/// set (the model, other stores), or a later epoch would read the evicted bytes again.
pub const WARM_SHARE_OF_MEMORY: u64 = 4;

/// Whether stores using `footprint` bytes in all ([`Store::footprint`]) should be warmed on
/// a machine with `available` bytes of memory free for the page cache (`None`: unknown,
/// then no). Larger stores are read as the loop asks, one record at a time.
pub fn worth_warming(footprint: u64, available: Option<u64>) -> bool {
    match available {
        Some(avail) => footprint > 0 && footprint <= avail / WARM_SHARE_OF_MEMORY,
        None => false,
    }
}

/// A file of the store and the extent of it that is in use.
#[derive(Clone, Copy)]
enum Part {
    Meta,
    Sums,
    Chunk(u16),
}

impl<B: Backend> Store<B> {
    /// The used extents, in the order [`Store::warm`] reads them: the record table (header
    /// and the live entries), the live records' checksum slots, then each chunk file up to
    /// where records end (a full chunk to its capacity, the tail chunk to the frontier).
    fn used_extents(&self) -> Vec<(Part, u64)> {
        let h = self.header();
        let mut parts = Vec::with_capacity(usize::from(h.tail_chunk) + 3);
        parts.push((Part::Meta, entry_offset(h.length)));
        if self.has_checksums() && h.length > 0 {
            parts.push((Part::Sums, slot_offset(h.length)));
        }
        for id in 0..=h.tail_chunk {
            let used = if id < h.tail_chunk { self.capacity } else { u64::from(h.tail_offset) };
            if used > 0 {
                parts.push((Part::Chunk(id), used));
            }
        }
        parts
    }

    /// Bytes [`Store::warm`] reads: the used part of every file of the store as last
    /// published (stored record bytes, with any garbage a delete left before a compact, the
    /// record table and the checksum slots).
    pub fn footprint(&self) -> u64 {
        self.used_extents().iter().map(|&(_, len)| len).sum()
    }

    /// Reads every used byte of the store ([`Store::footprint`]) through the host's
    /// [`StorageFile::warm`], file by file from the start, [`WARM_PIECE`] bytes at a time.
    /// Before each piece `keep_going(done, total)` is asked whether to go on (and told the
    /// progress); warming stops as soon as it says no. Returns the bytes covered.
    ///
    /// Warming changes nothing and takes no lock: it runs beside readers and an appender
    /// (records appended after it started are not covered). A file that fails to open is
    /// skipped; the read that needs it reports the failure.
    pub fn warm(&self, keep_going: &mut dyn FnMut(u64, u64) -> bool) -> Result<u64> {
        let parts = self.used_extents();
        let total: u64 = parts.iter().map(|&(_, len)| len).sum();
        let mut done = 0u64;
        for (part, len) in parts {
            let file: &B::File = match part {
                Part::Meta => &self.meta,
                Part::Sums => match self.sums.get() {
                    Some(f) => f,
                    None => {
                        done += len;
                        continue;
                    }
                },
                Part::Chunk(id) => match self.chunk(id) {
                    Ok(f) => f,
                    Err(_) => {
                        done += len;
                        continue;
                    }
                },
            };
            let mut at = 0u64;
            while at < len {
                if !keep_going(done, total) {
                    return Ok(done);
                }
                let piece = WARM_PIECE.min(len - at);
                file.warm(at, piece);
                at += piece;
                done += piece;
            }
        }
        keep_going(done, total);
        Ok(done)
    }
}

#[cfg(all(test, feature = "std"))]
mod tests {
    use alloc::vec;
    use alloc::vec::Vec;

    use super::{worth_warming, WARM_PIECE};
    use crate::codec::Codec;
    use crate::engine::{Batch, Options, Store};
    use crate::format::{entry_offset, sums::slot_offset};
    use crate::io::mem::MemBackend;
    use crate::io::Serial;

    #[test]
    fn the_rule_warms_what_fits_in_a_quarter_of_free_memory() {
        assert!(worth_warming(1 << 30, Some(4 << 30)));
        assert!(!worth_warming((1 << 30) + 1, Some(4 << 30)));
        assert!(!worth_warming(1, None), "unknown memory: never");
        assert!(!worth_warming(0, Some(4 << 30)), "nothing to read");
    }

    #[test]
    fn footprint_is_the_table_the_slots_and_the_used_chunk_bytes_and_warm_covers_it_in_pieces() {
        // A chunk capacity of 2.5 MiB holds two 1 MiB records: five make three chunks.
        let backend = MemBackend::new();
        let opts = Options { chunk_capacity: 5 << 19, ..Options::default() };
        let (store, mut w) = Store::open(backend, opts).unwrap();
        let rec = vec![7u8; 1 << 20];
        for _ in 0..5 {
            store
                .append(&mut w, &Batch::Fixed { src: &rec, count: 1, item_len: rec.len() }, Codec::Raw, &Serial)
                .unwrap();
        }
        let h = store.header();
        assert_eq!(h.tail_chunk, 2);
        assert!(store.has_checksums());
        let expect = entry_offset(5) + slot_offset(5) + 2 * (5 << 19) + (1 << 20);
        assert_eq!(store.footprint(), expect);

        let mut seen: Vec<(u64, u64)> = Vec::new();
        let covered = store
            .warm(&mut |done, total| {
                seen.push((done, total));
                true
            })
            .unwrap();
        assert_eq!(covered, expect);
        assert_eq!(seen.last(), Some(&(expect, expect)), "the last call reports the end");
        assert!(seen.windows(2).all(|p| p[1].0 - p[0].0 <= WARM_PIECE), "pieces of at most WARM_PIECE");

        // Told to stop, it stops before the next piece.
        let mut calls = 0;
        let covered = store
            .warm(&mut |_, _| {
                calls += 1;
                calls < 3
            })
            .unwrap();
        assert_eq!(calls, 3);
        assert!(covered > 0 && covered <= 2 * WARM_PIECE);
    }
}
