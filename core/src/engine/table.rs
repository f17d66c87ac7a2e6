//! Reading many records at once: table entries, checksum slots and stored bytes of
//! neighbouring records with one I/O call per range, for every host.
//!
//! A host that maps its files (the native one) answers every lookup from the map, and these
//! functions cost it nothing but the decoding. A host that reads through calls (the wasm
//! guest, whose every read is a few wasi:filesystem calls) would otherwise pay one call per
//! entry, per slot and per record: scans of the whole store (`stats`, `inspect`, `verify`,
//! `export`, `seal`) read the table in runs of [`RUN_ENTRIES`] entries, their slots in the
//! same runs, and the stored bytes of records that lie close together in one chunk in spans
//! of at most [`SPAN_MAX`] bytes.
//!
//! What this module never does is trust what it read in bulk more than a single read: every
//! entry is still checked ([`RecordLoc::check`]) before its bytes are used, and a span that
//! cannot be read whole (a truncated chunk) is read again record by record, so each record
//! gets its own error.

use alloc::vec::Vec;
use core::ops::Range;

use super::sums::Slot;
use super::{Store, Verify};
use crate::codec::Codec;
use crate::error::{Error, IoErrorKind, Result};
use crate::format::sums::{decode_slot, slot_offset, SLOT_LEN};
use crate::format::{entry_offset, Header, RecordLoc, ENTRY_LEN};
use crate::io::{Backend, StorageFile};

/// Table entries read per call: 1 MiB of table.
pub const RUN_ENTRIES: u32 = 1 << 16;
/// The most bytes one span read of neighbouring records' stored bytes takes.
pub const SPAN_MAX: u64 = 4 << 20;
/// Two records whose stored bytes are at most this far apart are read in one span (the
/// bytes between them are read and dropped).
pub(super) const SPAN_GAP: u64 = 4096;
/// How far ahead of the entry it reads a loop over random indices asks for one
/// ([`Store::prefetch_entry`]).
pub(super) const ENTRIES_AHEAD: usize = 8;
/// Metadata ranges a cold gather asks for (table entries, checksum slots) at most this
/// far apart are asked for as one: reading the pages between costs less than a request.
const HINT_GAP: u64 = 64 << 10;

/// `len` bytes of `file` at `at`: from the host's map when it covers them, else read into
/// `buf` with one call.
fn bytes_at<'a, F: StorageFile>(file: &'a F, at: u64, len: usize, buf: &'a mut Vec<u8>) -> Result<&'a [u8]> {
    if let Some(v) = file.view().and_then(|v| v.get(at as usize..at as usize + len)) {
        return Ok(v);
    }
    buf.clear();
    buf.resize(len, 0);
    file.read_at(at, buf)?;
    Ok(buf)
}

impl<B: Backend> Store<B> {
    /// Table entries `first..first + n` (not checked against the length), into `out`, with
    /// one read per [`RUN_ENTRIES`] entries.
    pub fn entries_into(&self, first: u32, n: u32, out: &mut Vec<RecordLoc>) -> Result<()> {
        out.clear();
        out.reserve(n as usize);
        let mut buf = Vec::new();
        let mut at = first;
        let end = first.saturating_add(n);
        while at < end {
            let run = (end - at).min(RUN_ENTRIES);
            let bytes = bytes_at(&self.meta, entry_offset(at), run as usize * ENTRY_LEN, &mut buf)?;
            out.extend(bytes.chunks_exact(ENTRY_LEN).map(RecordLoc::decode));
            at += run;
        }
        Ok(())
    }

    /// What the slots of records `first..first + locs.len()` say about their entries
    /// `locs`, with one read for the run (a side file cut short is looked at slot by slot).
    pub(super) fn slots_into(&self, first: u32, locs: &[RecordLoc], out: &mut Vec<Slot>) -> Result<()> {
        out.clear();
        let Some(f) = self.sums.get() else {
            out.resize(locs.len(), Slot::Empty);
            return Ok(());
        };
        let mut buf = Vec::new();
        match bytes_at(f, slot_offset(first), locs.len() * SLOT_LEN, &mut buf) {
            Ok(bytes) => {
                for (k, (b, loc)) in bytes.chunks_exact(SLOT_LEN).zip(locs).enumerate() {
                    out.push(Slot::of(decode_slot(first + k as u32, b), loc));
                }
            }
            Err(Error::Io(e)) if e.kind == IoErrorKind::UnexpectedEof => {
                for (k, loc) in locs.iter().enumerate() {
                    out.push(self.slot(first + k as u32, loc)?);
                }
            }
            Err(e) => return Err(e),
        }
        Ok(())
    }

    /// Asks the CPU cache for the table entry of `idxs[k]`, if there is one, without
    /// waiting. Random indices miss the cache on every entry; a loop over them that asks
    /// [`ENTRIES_AHEAD`] entries ahead of the one it reads overlaps those misses.
    pub(super) fn prefetch_entry(&self, idxs: &[u64], k: usize) {
        if let Some(&index) = idxs.get(k) {
            // Past the table, the host finds nothing to prefetch.
            self.meta.prefetch(entry_offset(index.min(u64::from(u32::MAX)) as u32));
        }
    }

    /// Whether this store's table is [`cold`] at the entry of `index`.
    pub(super) fn entries_cold(&self, index: u64) -> bool {
        cold(&self.meta, entry_offset(index.min(u64::from(u32::MAX)) as u32))
    }

    /// Whether looking up record `index` would wait for its table entry (a local page not in
    /// memory, an object store's table block not fetched yet): [`Store::will_read`] then
    /// waits for it before it can announce the records. Unlike the hints' `cold` test, asked
    /// of a file that takes hints too (an object store's), as `slots_absent` is.
    pub fn table_cold(&self, index: u64) -> bool {
        !self.meta.resident(entry_offset(index.min(u64::from(u32::MAX)) as u32))
    }

    /// Starts reading the table entries of `idxs` (those below `length`) all at once when
    /// the first is [`cold`]: the lookups that follow then wait for reads in flight.
    pub(super) fn hint_entries(&self, idxs: &[u64], length: u32) {
        if idxs.len() > 1 && self.entries_cold(idxs[0]) {
            self.will_need_entries(idxs, length);
        }
    }

    /// Starts reading the table entries of `idxs` (those below `length`) all at once
    /// ([`will_need_all`]).
    pub(super) fn will_need_entries(&self, idxs: &[u64], length: u32) {
        let offsets = idxs.iter().filter(|&&i| i < u64::from(length)).map(|&i| entry_offset(i as u32));
        will_need_all(&self.meta, offsets, ENTRY_LEN as u64);
    }

    /// Whether reads check checksum slots and this store's are [`cold`] at the slot of
    /// record `index`.
    pub(super) fn slots_cold(&self, index: u32) -> bool {
        self.verify != Verify::Never && self.sums.get().is_some_and(|f| cold(f, slot_offset(index)))
    }

    /// Starts reading the checksum slots of records `idxs` all at once ([`will_need_all`]);
    /// an object store sends the requests now.
    pub(super) fn will_need_slots(&self, idxs: impl Iterator<Item = u32>) {
        if let Some(f) = self.sums.get() {
            will_need_all(f, idxs.map(slot_offset), SLOT_LEN as u64);
            f.start_reads();
        }
    }

    /// Whether reads check checksum slots and the slot of record `index` is not in memory
    /// (not [`cold`]'s test: asked of an object store's file too, for a read-ahead).
    pub(super) fn slots_absent(&self, index: u32) -> bool {
        self.verify != Verify::Never && self.sums.get().is_some_and(|f| !f.resident(slot_offset(index)))
    }

    /// The checked entry of every index of `idxs`, in order, as [`Store::locate`] finds each
    /// (the first failure in `idxs` order is the one returned); runs of consecutive indices
    /// read their entries together.
    pub(super) fn locate_all(&self, idxs: &[u64], length: u32, header: &Header) -> Result<Vec<(RecordLoc, Codec)>> {
        self.hint_entries(idxs, length);
        let mut out = Vec::with_capacity(idxs.len());
        let mut locs = Vec::new();
        let mut k = 0;
        while k < idxs.len() {
            self.prefetch_entry(idxs, k + ENTRIES_AHEAD);
            let first = idxs[k];
            let n = run_len(&idxs[k..], length);
            if n == 1 || first >= u64::from(length) {
                out.push(self.locate(first, length, header)?);
                k += 1;
                continue;
            }
            self.entries_into(first as u32, n as u32, &mut locs)?;
            for (j, loc) in locs.iter().enumerate() {
                let codec = loc.check(header).map_err(|source| Error::Decode { index: first + j as u64, source })?;
                out.push((*loc, codec));
            }
            k += n;
        }
        Ok(out)
    }
}

/// From a cold page cache, a gather's table entries and checksum slots would each be a
/// page fault of its own, one after another (a batch of 256 random records took about
/// 200). Whether `file` is such a case: a local file (a remote one fetches what it is
/// asked for in its own way) whose byte at `offset` is not in memory. One residency check.
pub(super) fn cold<F: StorageFile>(file: &F, offset: u64) -> bool {
    !file.wants_hints() && !file.resident(offset)
}

/// Asks `file` to start reading every `len`-byte range at `offsets` (any order) now, all
/// at once, nearby ranges as one request, so that the faults to come wait for reads
/// already in flight rather than each starting its own.
pub(super) fn will_need_all<F: StorageFile>(file: &F, offsets: impl Iterator<Item = u64>, len: u64) {
    let mut offsets: Vec<u64> = offsets.collect();
    offsets.sort_unstable();
    let Some(&first) = offsets.first() else { return };
    let (mut start, mut end) = (first, first + len);
    for &at in &offsets[1..] {
        if at > end + HINT_GAP {
            file.will_need(start, end - start);
            start = at;
        }
        end = end.max(at + len);
    }
    file.will_need(start, end - start);
}

/// How many indices at the start of `idxs` follow each other (`i, i + 1, ...`) below
/// `length`, at most [`RUN_ENTRIES`]; at least 1.
pub(super) fn run_len(idxs: &[u64], length: u32) -> usize {
    let first = idxs[0];
    let mut n = 1;
    while n < idxs.len() && n < RUN_ENTRIES as usize && idxs[n] == first + n as u64 && idxs[n] < u64::from(length) {
        n += 1;
    }
    n
}

/// Splits items `0..n`, whose stored bytes are `place(i) = (chunk, offset, length)`, into
/// runs of consecutive items that one span read can serve: the same chunk, each starting at
/// or after the previous one's end and at most `gap` bytes past it (at most [`SPAN_GAP`]),
/// at most [`SPAN_MAX`] bytes from the first byte to the last.
pub(super) fn spans(n: usize, gap: u64, place: impl Fn(usize) -> (u64, u64, u64)) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let mut k = 0;
    while k < n {
        let (chunk, start, len) = place(k);
        let mut end = start + len;
        let mut j = k + 1;
        while j < n {
            let (c, at, l) = place(j);
            if c != chunk || at < end || at - end > gap || at + l - start > SPAN_MAX {
                break;
            }
            end = at + l;
            j += 1;
        }
        out.push(k..j);
        k = j;
    }
    out
}

/// The stored bytes of a run of records (one of [`spans`]) from `first` to `last`, read
/// with one call, or `None` when the run is one record, the chunk is mapped (each record is
/// then read from the map) or the span cannot be read whole (each record is then read on
/// its own, to get its own error).
pub(super) fn read_span<F: StorageFile>(
    file: &F,
    first: &RecordLoc,
    last: &RecordLoc,
    buf: &mut Vec<u8>,
) -> Option<u64> {
    let start = u64::from(first.offset);
    let end = u64::from(last.offset) + u64::from(last.phys_length);
    if core::ptr::eq(first, last) || file.view().is_some_and(|v| v.len() as u64 >= end) {
        return None;
    }
    buf.clear();
    buf.resize((end - start) as usize, 0);
    file.read_at(start, buf).ok()?;
    Some(start)
}
