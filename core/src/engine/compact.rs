//! Compact: the **Compact** rule of `docs/format.md`, "Ordering rules".
//!
//! Live records are visited in physical order `(chunk_id, offset)` and packed densely from
//! chunk 0 offset 0 in that order, so none moves to a higher address and no write lands on
//! a record not yet moved. Records move in batches of at most [`COMPACT_BATCH_BYTES`] and
//! [`COMPACT_BATCH_RECORDS`]; a batch whose destinations overlap its sources goes through a
//! park area past the frontier first. Every step is synced before the next can overwrite
//! what it still needs, so an entry never points at bytes that are not durable, and no write
//! lands on bytes a durable entry still points at.

use alloc::vec::Vec;
use core::ops::Range;

use once_cell::race::OnceBox;

use super::{Store, Writer};
use crate::error::{Error, FormatError, Result};
use crate::format::{FileLayout, Header, RecordLoc, CHUNK_FILE_LEN, MAX_CHUNKS};
use crate::io::{Backend, LockMode, StorageFile};

/// Compact moves at most this many bytes, and this many records, between two syncs.
const COMPACT_BATCH_BYTES: u64 = 64 << 20;
const COMPACT_BATCH_RECORDS: usize = 1024;

/// One payload compact moves, with the entries (a range of the sorted live list) that
/// point at it.
struct Move {
    group: Range<usize>,
    from: RecordLoc,
    to: (u16, u32),
}

impl Move {
    /// True if this move's destination overlaps the payload at `src`.
    fn lands_on(&self, src: &RecordLoc) -> bool {
        let (start, len) = (u64::from(self.to.1), u64::from(self.from.phys_length));
        self.to.0 == src.chunk_id
            && start < u64::from(src.offset) + u64::from(src.phys_length)
            && u64::from(src.offset) < start + len
    }
}

impl<B: Backend> Store<B> {
    /// Repacks the live records densely, in place, and deletes chunk files past the new
    /// frontier. Records are visited in physical order and packed in that order, so none
    /// moves to a higher address and no write lands on a record not yet moved; each entry
    /// is updated as soon as its record lands. A record whose new place overlaps its old one
    /// is first copied past the frontier, so its entry never points at half-moved bytes.
    /// Interrupted at any point, the store is consistent, and running compact again
    /// finishes the job. `progress(done, total)` is called as records are visited.
    pub fn compact(&mut self, w: &mut Writer, progress: &mut dyn FnMut(u64, u64)) -> Result<()> {
        w.check_writable()?;
        w.check_nothing_staged()?;
        self.backend.lock(LockMode::Exclusive)?;
        let result = self.reload(w).and_then(|()| self.bumped_compact(w, progress));
        self.backend.unlock(LockMode::Exclusive);
        result
    }

    /// Compacts, then raises the generation. After, not before: compact is what frees a
    /// full disk, where even the 16 bytes of `generation.zrg` find no room, and it never
    /// changes which record sits at which index, so a crash between the two leaves no saved
    /// state pointing at other records (the counter only keeps a later frontier from
    /// matching an earlier one). A failed raise is an error, after a complete compact.
    ///
    /// A compact that found nothing to reclaim (the store was already dense) moved no
    /// record and left the frontier where it was: the generation stays, so the states
    /// saved from the store stay valid.
    fn bumped_compact(&mut self, w: &mut Writer, progress: &mut dyn FnMut(u64, u64)) -> Result<()> {
        let before = self.header();
        self.compact_locked(w, progress)?;
        if self.header() == before {
            return Ok(());
        }
        self.bump_generation()
    }

    fn compact_locked(&mut self, w: &mut Writer, progress: &mut dyn FnMut(u64, u64)) -> Result<()> {
        let h = w.header;
        let mut live: Vec<(RecordLoc, u32)> = Vec::new();
        live.try_reserve_exact(h.length as usize).map_err(|_| Error::OutOfMemory)?;
        for i in 0..h.length {
            let loc = self.entry(i)?;
            loc.check(&h).map_err(|source| Error::Decode { index: u64::from(i), source })?;
            live.push((loc, i));
        }
        live.sort_unstable_by_key(|(l, i)| (l.chunk_id, l.offset, *i));
        // Entries sharing the exact same bytes (left by an interrupted delete) move together;
        // partially overlapping records mean a damaged store, so nothing is touched.
        for pair in live.windows(2) {
            let ((a, ai), (b, bi)) = (pair[0], pair[1]);
            let same = (a.chunk_id, a.offset, a.phys_length) == (b.chunk_id, b.offset, b.phys_length);
            if !same && a.chunk_id == b.chunk_id && u64::from(a.offset) + u64::from(a.phys_length) > u64::from(b.offset)
            {
                return Err(FormatError::OverlappingRecords { a: ai, b: bi }.into());
            }
        }

        // Plan: where each group of entries sharing a payload lands.
        let total = live.len() as u64;
        let mut frontier = (0u16, 0u64);
        // Where the packed payloads of each chunk end, chunk by chunk (a dense store cuts
        // its files there).
        let mut chunk_ends: Vec<u64> = Vec::new();
        let mut moves: Vec<Move> = Vec::new();
        let mut g = 0;
        while g < live.len() {
            let (loc, _) = live[g];
            let mut end = g + 1;
            while end < live.len() && (live[end].0.chunk_id, live[end].0.offset) == (loc.chunk_id, loc.offset) {
                end += 1;
            }
            let phys = u64::from(loc.phys_length);
            if frontier.1 + phys > self.capacity {
                frontier = (frontier.0 + 1, 0);
            }
            if (frontier.0, frontier.1) > (loc.chunk_id, u64::from(loc.offset)) {
                // Only a store placed with a larger chunk capacity gets here; moving up
                // could land on records not yet moved, so the record stays where it is.
                frontier = (loc.chunk_id, u64::from(loc.offset));
            }
            let to = (frontier.0, frontier.1 as u32);
            if to != (loc.chunk_id, loc.offset) {
                moves.push(Move { group: g..end, from: loc, to });
            }
            frontier.1 += phys;
            let c = usize::from(frontier.0);
            if chunk_ends.len() <= c {
                chunk_ends.resize(c + 1, 0);
            }
            chunk_ends[c] = chunk_ends[c].max(frontier.1);
            g = end;
        }

        // Move in batches. Within a batch every payload is read first; if any destination
        // overlaps any source of the batch, the batch is first copied to a park area past
        // the frontier and its entries pointed there. Each step is synced before the next
        // one can overwrite what the previous one still needs, so a kill or a power cut
        // anywhere leaves every entry pointing at intact bytes.
        let batch_cap = self.capacity.min(COMPACT_BATCH_BYTES) as usize;
        let mut park: Option<(u16, u32)> = None;
        let mut buf = Vec::new();
        let mut m = 0;
        while m < moves.len() {
            let mut end = m;
            let mut bytes = 0usize;
            while end < moves.len() && end - m < COMPACT_BATCH_RECORDS {
                let phys = moves[end].from.phys_length as usize;
                if end > m && bytes + phys > batch_cap {
                    break;
                }
                bytes += phys;
                end += 1;
            }
            let batch = &moves[m..end];
            buf.clear();
            buf.try_reserve(bytes).map_err(|_| Error::OutOfMemory)?;
            let mut at = Vec::with_capacity(batch.len());
            for mv in batch {
                at.push(buf.len());
                let start = buf.len();
                buf.resize(start + mv.from.phys_length as usize, 0);
                self.chunk(mv.from.chunk_id)?.read_at(u64::from(mv.from.offset), &mut buf[start..])?;
            }
            let overlap = batch.iter().any(|t| batch.iter().any(|s| t.lands_on(&s.from)));
            if overlap {
                let spot = match park {
                    Some(spot) => spot,
                    None => {
                        let spot = self.make_park_area(w, batch_cap as u64)?;
                        park = Some(spot);
                        spot
                    }
                };
                self.chunk(spot.0)?.write_at(u64::from(spot.1), &buf)?;
                // Syncs the parked bytes and the header that covers them.
                self.sync_files(w, spot.0..=spot.0)?;
                for (mv, &off) in batch.iter().zip(&at) {
                    self.move_entries(&live[mv.group.clone()], (spot.0, spot.1 + off as u32), &mv.from)?;
                }
                self.sync_table(w)?;
            }
            for (mv, &off) in batch.iter().zip(&at) {
                let len = mv.from.phys_length as usize;
                self.chunk(mv.to.0)?.write_at(u64::from(mv.to.1), &buf[off..off + len])?;
            }
            self.sync_files(w, batch[0].to.0..=batch[batch.len() - 1].to.0)?;
            for (mv, &off) in batch.iter().zip(&at) {
                // After a park the entries point into the park area, and so do their slots.
                let from = match park {
                    Some(spot) if overlap => RecordLoc { chunk_id: spot.0, offset: spot.1 + off as u32, ..mv.from },
                    _ => mv.from,
                };
                self.move_entries(&live[mv.group.clone()], mv.to, &from)?;
            }
            self.sync_table(w)?;
            progress(batch[batch.len() - 1].group.end as u64, total);
            m = end;
        }
        progress(total, total);

        let old_tail = w.header.tail_chunk;
        let new = Header { tail_chunk: frontier.0, tail_offset: frontier.1 as u32, length: h.length };
        self.write_header(w, new)?;
        self.publish(&new);
        Self::poison_on_err(w, self.meta.sync())?;
        for id in (new.tail_chunk + 1)..=old_tail {
            self.chunks[usize::from(id)] = OnceBox::new();
            self.backend.remove_chunk(id)?;
        }
        // Give the freed tail of the last chunk back to the file system: cut the file at the
        // frontier, then extend it again, sparse, in a sparse store; in a dense one, cut
        // every earlier chunk at the end of what it now holds too.
        let tail = self.chunk(new.tail_chunk)?;
        tail.set_len(u64::from(new.tail_offset))?;
        match self.layout {
            FileLayout::Sparse => tail.set_len(CHUNK_FILE_LEN)?,
            FileLayout::Dense => {
                for (id, &end) in chunk_ends.iter().enumerate().take(usize::from(new.tail_chunk)) {
                    let file = self.chunk(id as u16)?;
                    if file.len()? > end {
                        file.set_len(end)?;
                    }
                }
            }
        }
        Self::poison_on_err(w, self.backend.sync_dir())?;
        Ok(())
    }

    /// Reserves `len` bytes past the current frontier (in a new chunk if the tail chunk has
    /// no room), extends the header over them, and returns where they start. Nothing live
    /// is there, and the final header of the compact drops them again.
    fn make_park_area(&self, w: &mut Writer, len: u64) -> Result<(u16, u32)> {
        let mut h = w.header;
        if u64::from(h.tail_offset) + len > self.capacity {
            if u32::from(h.tail_chunk) + 1 >= MAX_CHUNKS {
                return Err(Error::StoreFull("no room to move records during compact"));
            }
            h.tail_chunk += 1;
            h.tail_offset = 0;
            self.create_chunk(w, h.tail_chunk)?;
        }
        let at = (h.tail_chunk, h.tail_offset);
        h.tail_offset += len as u32;
        self.write_header(w, h)?;
        self.publish(&h);
        Ok(at)
    }

    /// Points the entries of `group`, now at `loc`, to `to`, and moves each one's checksum
    /// with it: a slot that trusted the entry at `loc` is rewritten for the entry at `to`
    /// (the stored bytes, and so their checksum, are the same); an unchecked one stays so.
    fn move_entries(&self, group: &[(RecordLoc, u32)], to: (u16, u32), loc: &RecordLoc) -> Result<()> {
        let moved = RecordLoc { chunk_id: to.0, offset: to.1, ..*loc };
        for &(_, index) in group {
            let sum = self.expected_sum(index, loc)?;
            self.write_entries(index, &[moved])?;
            if let (Some(sum), Some(f)) = (sum, self.kept_sums()) {
                self.write_sums(f, index, &[moved], &[sum])?;
            }
        }
        Ok(())
    }
}
