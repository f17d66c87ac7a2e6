//! Gathers: many records decoded into one destination in one parallel pass
//! (`docs/format.md`, "meta.zr" (entries `0..length` are live) and "Record payloads").
//!
//! Every read takes `&self`, no lock, and sees the header as last published (length loaded
//! with `Acquire`, after the frontier), so beside a running append it reads a prefix of the
//! store whose bytes and entries were written before that length was published. Each entry
//! is checked against the format's limits and that frontier ([`RecordLoc::check`]) before
//! any byte of its record is read, and every destination is checked before anything is
//! written to it. A record's stored bytes are checked against its checksum (`checksums.zrc`,
//! as the store's [`Verify`] mode asks) before they are decoded.
//!
//! The rest of reading sits beside this file, and this file uses it, never the reverse:
//! `lookup.rs` finds and checks each record's entry, `record.rs` decodes and checks one
//! record (the step every job of a gather ends in), and `read_ahead.rs` tells the host what
//! a gather or a loader will read. What is left here is what only a batch has: carving one
//! destination into disjoint regions, sharing the jobs among workers, and reporting the
//! first failure in job order with the store it belongs to.

use alloc::format;
use alloc::vec::Vec;

use super::read_ahead::{announce, by_store};
use super::record::Known;
use super::sums::Slot;
use super::{shard_count, table, Store, Verify};
use crate::codec::Codec;
use crate::error::{Error, Result};
use crate::format::RecordLoc;
use crate::io::{Backend, Parallel, StorageFile};

/// One record to decode during a gather: record `index` of `store`, which is store
/// `source` of a [`gather_stores`] (0 in a one-store gather).
struct ReadJob<'s, 'd, B: Backend> {
    store: &'s Store<B>,
    source: usize,
    index: u32,
    loc: RecordLoc,
    codec: Codec,
    dst: &'d mut [u8],
}

/// A worker's share of a gather, and the first read of it that failed.
struct ReadShard<'j, 's, 'd, B: Backend> {
    jobs: &'j mut [ReadJob<'s, 'd, B>],
    scratch: Vec<u8>,
    /// Stored bytes of a run of neighbouring records, read with one call.
    span: Vec<u8>,
    /// Their checksum slots.
    slots: Vec<Slot>,
    failed: Option<(usize, Error)>,
}

/// A record of a gather over several stores ([`gather_stores`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pick {
    /// Which of the gather's stores holds it.
    pub store: usize,
    /// The record, in that store.
    pub index: u64,
    /// Where its bytes go: the byte of the destination at which they start.
    pub offset: u64,
}

/// Fixed-size destination slots for [`gather_stores`]: each record must fit `size` bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FixedSlots {
    /// Bytes of a slot.
    pub size: usize,
    /// Zero the bytes of a slot past a shorter record (when the destination may hold old
    /// bytes).
    pub clear: bool,
}

/// Decodes each pick's record into `dst[offset..]`, the records of every store in one
/// parallel pass: a dataset's batch across its shards costs one fan-out, not one per shard.
///
/// Every pick is checked before anything is written: its index against its store's length
/// ([`Error::IndexOutOfRange`]), its entry against the store's limits, its region against
/// `dst` ([`Error::BufferTooSmall`]; with `fixed`, the record against the slot size too) and
/// against the other regions ([`Error::InvalidArgument`] when two overlap). A failure
/// comes with the number of the store it belongs to (`picks` order decides which failure,
/// when several reads fail), so that the caller can name the store.
///
/// # Panics
/// If a pick names a store past the end of `stores`.
pub fn gather_stores<B: Backend, P: Parallel>(
    stores: &[&Store<B>],
    picks: &[Pick],
    dst: &mut [u8],
    fixed: Option<FixedSlots>,
    par: &P,
) -> core::result::Result<(), (usize, Error)> {
    let mut views = Vec::with_capacity(stores.len());
    for store in stores {
        views.push((store.len(), store.header()));
    }
    if let Some(first) = picks.first().filter(|_| picks.len() > 1) {
        if stores.get(first.store).is_some_and(|s| s.entries_cold(first.index)) {
            let records = picks.iter().filter_map(|p| Some((p.store, *stores.get(p.store)?, p.index)));
            by_store(records, |store, idxs| store.will_need_entries(idxs, store.len()));
        }
    }
    let mut regions = Vec::with_capacity(picks.len());
    for (i, pick) in picks.iter().enumerate() {
        if let Some((ahead, store)) = picks.get(i + table::ENTRIES_AHEAD).and_then(|p| Some((p, stores.get(p.store)?)))
        {
            store.prefetch_entry(&[ahead.index], 0);
        }
        let fail = |e: Error| (pick.store, e);
        let store = stores[pick.store];
        let (length, header) = &views[pick.store];
        let (loc, codec) = store.locate(pick.index, *length, header).map_err(fail)?;
        let len = u64::from(loc.logic_length);
        let room = match fixed {
            Some(slots) if len > slots.size as u64 => {
                return Err(fail(Error::BufferTooSmall(format!(
                    "record {} ({len} bytes) does not fit a sample of {} bytes",
                    pick.index, slots.size
                ))));
            }
            Some(slots) => slots.size as u64,
            None => len,
        };
        if u128::from(pick.offset) + u128::from(room) > dst.len() as u128 {
            return Err(fail(Error::BufferTooSmall(format!(
                "record {} ({room} bytes) at offset {} is past the {}-byte destination",
                pick.index,
                pick.offset,
                dst.len()
            ))));
        }
        regions.push((pick.offset as usize, i, loc, codec));
    }
    // Carve the destination in address order so every job owns a disjoint slice.
    regions.sort_unstable_by_key(|r| (r.0, r.1));
    let mut jobs = Vec::with_capacity(regions.len());
    let mut slack: Vec<&mut [u8]> = Vec::new();
    let mut rest: &mut [u8] = dst;
    let mut base = 0usize;
    for (off, i, loc, codec) in regions {
        let pick = &picks[i];
        if off < base {
            return Err((
                pick.store,
                Error::InvalidArgument(format!(
                    "destination region of record {} at offset {off} overlaps the previous one",
                    pick.index
                )),
            ));
        }
        let len = loc.logic_length as usize;
        let (_, tail) = core::mem::take(&mut rest).split_at_mut(off - base);
        let (slot, tail) = tail.split_at_mut(len);
        rest = tail;
        base = off + len;
        if let Some(slots) = fixed {
            let (past, tail) = core::mem::take(&mut rest).split_at_mut(slots.size - len);
            if slots.clear && !past.is_empty() {
                slack.push(past);
            }
            rest = tail;
            base += slots.size - len;
        }
        let store = stores[pick.store];
        jobs.push(ReadJob { store, source: pick.store, index: pick.index as u32, loc, codec, dst: slot });
    }
    // Every check passed: now the destination may change.
    for past in slack {
        past.fill(0);
    }
    run_reads(&mut jobs, par)
}

/// Runs the reads on `par`, in contiguous shards of jobs; the first failure (in job order)
/// with its job's `source`.
fn run_reads<B: Backend, P: Parallel>(
    jobs: &mut [ReadJob<'_, '_, B>],
    par: &P,
) -> core::result::Result<(), (usize, Error)> {
    if jobs.is_empty() {
        return Ok(());
    }
    hint_cold(jobs);
    let bytes: usize = jobs.iter().map(|j| j.dst.len()).sum();
    let shards = shard_count(par.workers(), jobs.len(), bytes);
    let per = jobs.len().div_ceil(shards);
    let mut work: Vec<ReadShard<'_, '_, '_, B>> = jobs
        .chunks_mut(per)
        .map(|jobs| ReadShard { jobs, scratch: Vec::new(), span: Vec::new(), slots: Vec::new(), failed: None })
        .collect();
    if work.len() == 1 {
        read_shard(&mut work[0]);
    } else {
        // A shard keeps its failure and reports success, so that every failure stays
        // paired with its store; the first in job order is returned below.
        par.for_each(&mut work, |shard| {
            read_shard(shard);
            Ok(())
        })
        .map_err(|e| (0, e))?;
    }
    match work.into_iter().find_map(|w| w.failed) {
        Some(failed) => Err(failed),
        None => Ok(()),
    }
}

/// From a cold page cache, each worker would fault one record's pages, and then its
/// checksum slot's, in at a time: a disk that could serve the whole batch at once sees a
/// queue of one or two. When the first record's bytes (or its slot) are not in memory,
/// ask for every record's bytes (or every slot) up front, so the reads are in flight
/// together while the workers decode. A warm gather pays two residency checks. (The
/// table entries were asked for the same way before the records were located:
/// [`Store::entries_cold`].)
fn hint_cold<'s, B: Backend>(jobs: &[ReadJob<'s, '_, B>]) {
    // A chunk that fails to open is reported by the read itself.
    let file = |job: &ReadJob<'s, '_, B>| job.store.chunk(job.loc.chunk_id).ok();
    let first = &jobs[0];
    let Some(first_file) = file(first) else { return };
    let many = jobs.len() > 1;
    // Both asked before any hint: a page being read in counts as resident.
    let (cold, slots_cold) =
        (many && table::cold(first_file, u64::from(first.loc.offset)), many && first.store.slots_cold(first.index));
    if slots_cold {
        // The checksum slots, which a cold local read would otherwise fault in one by one
        // (a remote store reads its metadata in large blocks of its own).
        let records = jobs.iter().map(|j| (j.source, j.store, u64::from(j.index)));
        by_store(records, |store, idxs| store.will_need_slots(idxs.iter().map(|&i| i as u32)));
    }
    if !cold && !first_file.wants_hints() {
        return;
    }
    let records = jobs.iter().filter_map(|job| {
        let f = file(job)?;
        Some((f, (u64::from(job.loc.offset), u64::from(job.loc.phys_length), job.index)))
    });
    announce(records.collect());
}

/// Reads a shard's jobs in order, stopping at the first failure, which it keeps. Jobs
/// whose stored bytes lie close together in one chunk are read with one call (and their
/// checksum slots with another) when the host does not map the chunk.
fn read_shard<B: Backend>(shard: &mut ReadShard<'_, '_, '_, B>) {
    // In a large store every record is a cache and TLB miss; asking for the next few
    // records' bytes ahead overlaps those misses with the decoding of this one.
    const AHEAD: usize = 4;
    let ReadShard { jobs, scratch, span, slots, failed } = shard;
    for job in jobs.iter().take(AHEAD) {
        job.store.prefetch(job.index, &job.loc);
    }
    // A file that fetches only announced ranges (an object store's) holds nothing between
    // two records: only records back to back are read together there.
    let gap = match jobs.first().and_then(|j| j.store.chunk(j.loc.chunk_id).ok()) {
        Some(f) if f.wants_hints() => 0,
        _ => table::SPAN_GAP,
    };
    let groups = table::spans(jobs.len(), gap, |k| {
        let j = &jobs[k];
        ((j.source as u64) << 16 | u64::from(j.loc.chunk_id), u64::from(j.loc.offset), u64::from(j.loc.phys_length))
    });
    for group in groups {
        let (store, first) = (jobs[group.start].store, jobs[group.start].index);
        let (head, last) = (&jobs[group.start].loc, &jobs[group.end - 1].loc);
        let base = store.chunk(head.chunk_id).ok().and_then(|f| table::read_span(f, head, last, span));
        slots.clear();
        if base.is_some() && store.verify != Verify::Never {
            let run = &jobs[group.clone()];
            if run.iter().enumerate().all(|(k, j)| j.index == first.wrapping_add(k as u32)) {
                let locs: Vec<RecordLoc> = run.iter().map(|j| j.loc).collect();
                if let Err(e) = store.slots_into(first, &locs, slots) {
                    *failed = Some((jobs[group.start].source, e));
                    return;
                }
            }
        }
        for k in group.clone() {
            if let Some(next) = jobs.get(k + AHEAD) {
                next.store.prefetch(next.index, &next.loc);
            }
            let job = &mut jobs[k];
            let stored = base.map(|b| {
                let at = (u64::from(job.loc.offset) - b) as usize;
                &span[at..at + job.loc.phys_length as usize]
            });
            let known = Known { slot: slots.get(k - group.start).copied(), stored };
            let store = job.store;
            if let Err(e) = store.read_record(job.index, &job.loc, job.codec, job.dst, scratch, store.verify, known) {
                *failed = Some((job.source, e));
                return;
            }
        }
    }
}

/// How much of a record [`Store::prefetch`] asks for, line by line. The hardware streams
/// the rest of a large record once the first lines arrive; a small one (a token document
/// of 1 KiB) is over before it would, so every line of it would be a miss of its own:
/// 256 such documents gathered in 0.72x the time asking for 1 KiB instead of one line;
/// images of 12 KiB were unchanged (2 KiB gained nothing more).
const PREFETCH_BYTES: u64 = 1024;
const CACHE_LINE: usize = 64;
impl<B: Backend> Store<B> {
    /// Decodes record `idxs[i]` into `dst[i * stride..]`, for every `i`, in parallel. A
    /// record longer than `stride`, or past the end of `dst`, is
    /// [`Error::BufferTooSmall`], raised before anything is written.
    pub fn gather<P: Parallel>(&self, idxs: &[u64], dst: &mut [u8], stride: usize, par: &P) -> Result<()> {
        let length = self.len();
        let header = self.header();
        let mut jobs = Vec::with_capacity(idxs.len());
        let mut rest: &mut [u8] = dst;
        let mut at = 0usize;
        let located = self.locate_all(idxs, length, &header)?;
        for (i, (&index, &(loc, codec))) in idxs.iter().zip(&located).enumerate() {
            let need = loc.logic_length as usize;
            if need > stride || need > rest.len() {
                return Err(Error::BufferTooSmall(format!(
                    "record {index} ({need} bytes) does not fit slot {i} at byte {at} with stride {stride}"
                )));
            }
            let take = stride.min(rest.len());
            let (slot, tail) = core::mem::take(&mut rest).split_at_mut(take);
            rest = tail;
            at += take;
            jobs.push(ReadJob { store: self, source: 0, index: index as u32, loc, codec, dst: &mut slot[..need] });
        }
        run_reads(&mut jobs, par).map_err(|(_, e)| e)
    }

    /// Decodes record `idxs[i]` into `dst[offsets[i]..]`, for every `i`, in parallel. The
    /// regions must lie inside `dst` ([`Error::BufferTooSmall`]) and must not overlap
    /// ([`Error::InvalidArgument`]); both are checked before anything is written.
    pub fn gather_var<P: Parallel>(&self, idxs: &[u64], dst: &mut [u8], offsets: &[u64], par: &P) -> Result<()> {
        if offsets.len() != idxs.len() {
            return Err(Error::InvalidArgument(format!("{} offsets for {} indices", offsets.len(), idxs.len())));
        }
        let length = self.len();
        let header = self.header();
        let mut regions = Vec::with_capacity(idxs.len());
        let located = self.locate_all(idxs, length, &header)?;
        for (i, ((&index, &off), &(loc, codec))) in idxs.iter().zip(offsets).zip(&located).enumerate() {
            let end = u128::from(off) + u128::from(loc.logic_length);
            if end > dst.len() as u128 {
                return Err(Error::BufferTooSmall(format!(
                    "record {index} ({} bytes) at offset {off} is past the {}-byte destination",
                    loc.logic_length,
                    dst.len()
                )));
            }
            regions.push((off as usize, i, loc, codec));
        }
        // Carve the destination in address order so every job owns a disjoint slice.
        regions.sort_unstable_by_key(|r| (r.0, r.1));
        let mut jobs = Vec::with_capacity(regions.len());
        let mut rest: &mut [u8] = dst;
        let mut base = 0usize;
        for (off, i, loc, codec) in regions {
            if off < base {
                return Err(Error::InvalidArgument(format!(
                    "destination region of record {} at offset {off} overlaps the previous one",
                    idxs[i]
                )));
            }
            let (_, tail) = core::mem::take(&mut rest).split_at_mut(off - base);
            let (slot, tail) = tail.split_at_mut(loc.logic_length as usize);
            rest = tail;
            base = off + loc.logic_length as usize;
            jobs.push(ReadJob { store: self, source: 0, index: idxs[i] as u32, loc, codec, dst: slot });
        }
        run_reads(&mut jobs, par).map_err(|(_, e)| e)
    }

    /// Asks the CPU cache for a record's first [`PREFETCH_BYTES`] and its checksum slot.
    fn prefetch(&self, index: u32, loc: &RecordLoc) {
        if let Some(file) = self.chunks.get(usize::from(loc.chunk_id)).and_then(|slot| slot.get()) {
            let start = u64::from(loc.offset);
            let end = start + u64::from(loc.phys_length).min(PREFETCH_BYTES);
            for line in (start..end).step_by(CACHE_LINE) {
                file.prefetch(line);
            }
        }
        // Its checksum slot too: with random indices, each is a miss of its own.
        if self.verify != Verify::Never {
            if let Some(sums) = self.sums.get() {
                sums.prefetch(crate::format::sums::slot_offset(index));
            }
        }
    }
}
