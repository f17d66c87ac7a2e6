//! Reads: `docs/format.md`, "meta.zr" (entries `0..length` are live), "Record payloads", and
//! the **Stats** rule of "Ordering rules".
//!
//! Every read takes `&self`, no lock, and sees the header as last published (length loaded
//! with `Acquire`, after the frontier), so beside a running append it reads a prefix of the
//! store whose bytes and entries were written before that length was published. Each entry
//! is checked against the format's limits and that frontier ([`RecordLoc::check`]) before
//! any byte of its record is read, and every destination is checked before anything is
//! written to it. A record's stored bytes are checked against its checksum (`checksums.zrc`,
//! as the store's [`Verify`] mode asks) before they are decoded.

use alloc::format;
use alloc::vec::Vec;

use super::sums::Slot;
use super::{shard_count, table, Stats, Store, Verify};
use crate::codec::{decode_into, Codec};
use crate::error::{DecodeError, Error, IoError, IoErrorKind, Result};
use crate::format::{entry_offset, Header, RecordLoc, ENTRY_LEN};
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

/// Announces each `(file, (offset, length, index))` of `records` to its file, each file's
/// records at once ([`StorageFile::will_need_records`]: the remote cache takes a file's
/// announcements under one lock, which the readers of that file wait on, instead of one
/// lock per record); returns the files, each once.
fn announce<F: StorageFile>(mut records: Vec<(&F, (u64, u64, u32))>) -> Vec<&F> {
    records.sort_unstable_by_key(|&(f, _)| core::ptr::from_ref(f) as usize);
    let (mut files, mut batch) = (Vec::new(), Vec::new());
    for group in records.chunk_by(|a, b| core::ptr::eq(a.0, b.0)) {
        batch.clear();
        batch.extend(group.iter().map(|&(_, record)| record));
        group[0].0.will_need_records(&batch);
        files.push(group[0].0);
    }
    files
}

/// Calls `each` once per store of `records` (`(source, store, index)`, any order), with
/// that store's indices in ascending order.
fn by_store<'s, B: Backend + 's>(
    records: impl Iterator<Item = (usize, &'s Store<B>, u64)>,
    mut each: impl FnMut(&'s Store<B>, &[u64]),
) {
    let mut records: Vec<(usize, u64, &'s Store<B>)> = records.map(|(s, store, i)| (s, i, store)).collect();
    records.sort_unstable_by_key(|&(s, i, _)| (s, i));
    let mut idxs = Vec::with_capacity(records.len());
    for group in records.chunk_by(|a, b| a.0 == b.0) {
        idxs.clear();
        idxs.extend(group.iter().map(|r| r.1));
        each(group[0].2, &idxs);
    }
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

/// What a read already holds for a record because it read it with its neighbours: its
/// checksum slot, its stored bytes.
#[derive(Clone, Copy, Default)]
pub(super) struct Known<'a> {
    slot: Option<Slot>,
    stored: Option<&'a [u8]>,
}

impl<B: Backend> Store<B> {
    /// Whether reading record `index` would wait for a local disk: its table entry, its
    /// checksum slot (when reads check it) or its first byte is not in memory. False for a
    /// store in an object store (it plans its own reads) and on hosts that cannot tell.
    pub fn is_cold(&self, index: u64) -> bool {
        let (length, header) = (self.len(), self.header());
        if self.entries_cold(index) || (index < u64::from(length) && self.slots_cold(index as u32)) {
            return true;
        }
        self.locate(index, length, &header)
            .is_ok_and(|(loc, _)| self.chunk(loc.chunk_id).is_ok_and(|f| table::cold(f, u64::from(loc.offset))))
    }

    /// A read-ahead: announces records `idxs` to their chunk files and lets the host start
    /// fetching them ([`crate::io::StorageFile::start_reads`]: an object store sends the
    /// requests now), reading and decoding nothing. An index out of range or a bad entry is
    /// left for the read itself to report.
    ///
    /// A local store is announced only what is not in memory, as a cold gather asks for
    /// its own ([`hint_cold`]): the table entries first (the lookups below then wait for
    /// reads already in flight), the checksum slots, and the records when the first is
    /// not resident. A warm batch costs a few residency checks.
    pub fn will_read(&self, idxs: &[u64]) -> Result<()> {
        let (length, header) = (self.len(), self.header());
        let Some(&first) = idxs.first() else { return Ok(()) };
        self.hint_entries(idxs, length);
        if first < u64::from(length) && self.slots_absent(first as u32) {
            self.will_need_slots(idxs.iter().filter(|&&i| i < u64::from(length)).map(|&i| i as u32));
        }
        if let Ok((loc, _)) = self.locate(first, length, &header) {
            let file = self.chunk(loc.chunk_id)?;
            if !file.wants_hints() && file.resident(u64::from(loc.offset)) {
                return Ok(());
            }
        }
        let mut records = Vec::with_capacity(idxs.len());
        for &index in idxs {
            let Ok((loc, _)) = self.locate(index, length, &header) else { continue };
            if loc.phys_length == 0 {
                continue;
            }
            let record = (u64::from(loc.offset), u64::from(loc.phys_length), index as u32);
            records.push((self.chunk(loc.chunk_id)?, record));
        }
        for file in announce(records) {
            file.start_reads();
        }
        Ok(())
    }

    /// Table entry `index`, read without checking it against the length.
    pub fn entry(&self, index: u32) -> Result<RecordLoc> {
        let at = entry_offset(index);
        if let Some(view) = self.meta.view() {
            if let Some(bytes) = view.get(at as usize..at as usize + ENTRY_LEN) {
                return Ok(RecordLoc::decode(bytes));
            }
        }
        let mut b = [0u8; ENTRY_LEN];
        self.meta.read_at(at, &mut b)?;
        Ok(RecordLoc::decode(&b))
    }

    /// Looks up and checks the entry of each index, for a read.
    pub(super) fn locate(&self, index: u64, length: u32, header: &Header) -> Result<(RecordLoc, Codec)> {
        if index >= u64::from(length) {
            return Err(Error::IndexOutOfRange { index, length });
        }
        let loc = self.entry(index as u32)?;
        let codec = loc.check(header).map_err(|source| Error::Decode { index, source })?;
        Ok((loc, codec))
    }

    /// Logical length of each record in `idxs`, into `out`.
    pub fn lengths(&self, idxs: &[u64], out: &mut [u32]) -> Result<()> {
        if out.len() < idxs.len() {
            return Err(Error::BufferTooSmall(format!("{} lengths into {} slots", idxs.len(), out.len())));
        }
        let length = self.len();
        self.hint_entries(idxs, length);
        let mut locs = Vec::new();
        let mut k = 0;
        while k < idxs.len() {
            let first = idxs[k];
            if first >= u64::from(length) {
                return Err(Error::IndexOutOfRange { index: first, length });
            }
            self.prefetch_entry(idxs, k + table::ENTRIES_AHEAD);
            // A run of consecutive indices reads its entries with one call.
            let n = table::run_len(&idxs[k..], length);
            self.entries_into(first as u32, n as u32, &mut locs)?;
            for (slot, loc) in out[k..k + n].iter_mut().zip(&locs) {
                *slot = loc.logic_length;
            }
            k += n;
        }
        Ok(())
    }

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

    /// Decodes one checked entry's record into `dst` (exactly its logical length) and
    /// checks its stored bytes against its checksum as `verify` asks. Returns whether a
    /// checksum was checked. On an error `dst` holds no promised bytes.
    // The record, where its bytes go, the caller's scratch and mode, and what it read ahead:
    // one read, whose inputs do not belong together anywhere else.
    #[allow(clippy::too_many_arguments)]
    fn read_record(
        &self,
        index: u32,
        loc: &RecordLoc,
        codec: Codec,
        dst: &mut [u8],
        scratch: &mut Vec<u8>,
        verify: Verify,
        known: Known<'_>,
    ) -> Result<bool> {
        let file = self.chunk(loc.chunk_id)?;
        let start = loc.offset as usize;
        let phys = loc.phys_length as usize;
        let decode_err = |source| Error::Decode { index: u64::from(index), source };
        if let Some(bytes) = known.stored.or_else(|| file.view().and_then(|v| v.get(start..start + phys))) {
            // Decode first, then hash: decoding brings the stored bytes into this core's
            // cache, so the hash reads them from there instead of waiting on memory a second
            // time (a raw copy or an inflate of a cold record). The check comes before the
            // decode's own result, so damage that also breaks the compressed stream is reported
            // as the checksum error it is. Every decoder (libdeflate, miniz_oxide, libzstd,
            // ruzstd) bounds its writes to `dst` whatever the input, and on an error `dst` holds no promised bytes.
            let decoded = decode_into(codec, bytes, dst);
            let checked = self.check_stored(verify, index, loc, bytes, known.slot)?;
            decoded.map_err(decode_err)?;
            return Ok(checked);
        }
        let at = u64::from(loc.offset);
        match codec {
            Codec::Raw => {
                // Raw stored bytes are the record: read them in place, then check them.
                file.read_at(at, dst).map_err(|e| self.read_err(e, loc, index))?;
                self.check_stored(verify, index, loc, dst, known.slot)
            }
            Codec::Flate | Codec::Zstd => {
                scratch.resize(phys, 0);
                file.read_at(at, scratch).map_err(|e| self.read_err(e, loc, index))?;
                let checked = self.check_stored(verify, index, loc, scratch, known.slot)?;
                decode_into(codec, scratch, dst).map_err(decode_err)?;
                Ok(checked)
            }
        }
    }

    /// A short read inside a chunk means the entry points past the file: a damaged store.
    fn read_err(&self, e: IoError, loc: &RecordLoc, index: u32) -> Error {
        if e.kind == IoErrorKind::UnexpectedEof {
            let source = DecodeError::OutOfBounds { chunk: loc.chunk_id, offset: loc.offset, phys: loc.phys_length };
            Error::Decode { index: u64::from(index), source }
        } else {
            Error::Io(e)
        }
    }

    /// Decodes record `index` into a new vector (for tools; loaders use [`Store::gather`]).
    pub fn read(&self, index: u64) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        self.read_into(index, &mut out, &mut Vec::new())?;
        Ok(out)
    }

    /// Logical bytes `from .. from + out.len()` of record `index` into `out`, its checksum
    /// checked over the whole record as every read does. A raw record in a mapped file is
    /// hashed in place and only the piece copied (a packed row's share of a long document);
    /// otherwise the record is decoded whole into `scratch` and the piece copied from it.
    pub fn read_piece(&self, index: u64, from: u64, out: &mut [u8], scratch: &mut Vec<u8>) -> Result<()> {
        let (loc, codec) = self.locate(index, self.len(), &self.header())?;
        let end = from.checked_add(out.len() as u64).filter(|&e| e <= u64::from(loc.logic_length));
        let Some(end) = end else {
            return Err(Error::InvalidArgument(format!(
                "bytes {from}..+{} of record {index}, which holds {}",
                out.len(),
                loc.logic_length
            )));
        };
        if codec == Codec::Raw {
            let file = self.chunk(loc.chunk_id)?;
            let (start, phys) = (loc.offset as usize, loc.phys_length as usize);
            if let Some(bytes) = file.view().and_then(|v| v.get(start..start + phys)) {
                self.check_stored(self.verify, index as u32, &loc, bytes, None)?;
                out.copy_from_slice(&bytes[from as usize..end as usize]);
                return Ok(());
            }
        }
        let mut whole = core::mem::take(scratch);
        whole.clear();
        whole.resize(loc.logic_length as usize, 0);
        let mut inner = Vec::new();
        let read = self.read_record(index as u32, &loc, codec, &mut whole, &mut inner, self.verify, Known::default());
        if read.is_ok() {
            out.copy_from_slice(&whole[from as usize..end as usize]);
        }
        *scratch = whole;
        read.map(|_| ())
    }

    /// Decodes record `index` into `out`, resized to its logical length; `scratch` is reused
    /// between calls for compressed bytes.
    pub fn read_into(&self, index: u64, out: &mut Vec<u8>, scratch: &mut Vec<u8>) -> Result<()> {
        let (loc, codec) = self.locate(index, self.len(), &self.header())?;
        out.clear();
        out.resize(loc.logic_length as usize, 0);
        self.read_record(index as u32, &loc, codec, out, scratch, self.verify, Known::default()).map(|_| ())
    }

    /// [`Store::read_into`] for verification tools: checks the record's checksum whenever it
    /// has one, whatever the store's [`Verify`] mode, and never fails for want of one.
    /// Returns whether a checksum was checked (`false`: the record is unchecked).
    pub fn read_verified(&self, index: u64, out: &mut Vec<u8>, scratch: &mut Vec<u8>) -> Result<bool> {
        let (loc, codec) = self.locate(index, self.len(), &self.header())?;
        out.clear();
        out.resize(loc.logic_length as usize, 0);
        self.read_record(index as u32, &loc, codec, out, scratch, Verify::Auto, Known::default())
    }

    /// [`Store::read_verified`] of every record in `range` (which must lie below the
    /// length), in order, calling `visit(index, entry, result)` for each; a record for which
    /// `skip(entry)` holds is not read (`result` is `None`). The entries, checksum slots and
    /// stored bytes of neighbouring records are read together (see the `table` module), so a
    /// host without a map pays a few calls per range, not per record. `visit` returning an
    /// error stops the scan with it.
    pub fn read_verified_range(
        &self,
        range: core::ops::Range<u32>,
        skip: impl Fn(&RecordLoc) -> bool,
        mut visit: impl FnMut(u32, &RecordLoc, Option<Result<bool>>) -> Result<()>,
    ) -> Result<()> {
        let header = self.header();
        let n = range.end.saturating_sub(range.start);
        let (mut locs, mut slots, mut span, mut out, mut scratch) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
        self.entries_into(range.start, n, &mut locs)?;
        self.slots_into(range.start, &locs, &mut slots)?;
        let groups = table::spans(locs.len(), table::SPAN_GAP, |k| {
            let e = &locs[k];
            // Entries that fail their check, or are skipped, are spans of their own.
            let key = if e.check(&header).is_err() || skip(e) { u64::MAX - k as u64 } else { u64::from(e.chunk_id) };
            (key, u64::from(e.offset), u64::from(e.phys_length))
        });
        for group in groups {
            let (head, last) = (&locs[group.start], &locs[group.end - 1]);
            let base = self.chunk(head.chunk_id).ok().and_then(|f| table::read_span(f, head, last, &mut span));
            for k in group {
                let (index, loc) = (range.start + k as u32, &locs[k]);
                if skip(loc) {
                    visit(index, loc, None)?;
                    continue;
                }
                let result = loc.check(&header).map_err(|source| Error::Decode { index: u64::from(index), source });
                let result = result.and_then(|codec| {
                    let stored = base.map(|b| {
                        let at = (u64::from(loc.offset) - b) as usize;
                        &span[at..at + loc.phys_length as usize]
                    });
                    out.clear();
                    out.resize(loc.logic_length as usize, 0);
                    let known = Known { slot: Some(slots[k]), stored };
                    self.read_record(index, loc, codec, &mut out, &mut scratch, Verify::Auto, known)
                });
                visit(index, loc, Some(result))?;
            }
        }
        Ok(())
    }

    /// Storage usage, and how many records are unchecked; reads every live entry (and its
    /// checksum slot).
    pub fn stats(&self) -> Result<Stats> {
        let h = self.header();
        let (mut live_bytes, mut unchecked) = (0u64, 0u32);
        let (mut locs, mut slots) = (Vec::new(), Vec::new());
        let mut first = 0;
        while first < h.length {
            let run = (h.length - first).min(table::RUN_ENTRIES);
            self.entries_into(first, run, &mut locs)?;
            self.slots_into(first, &locs, &mut slots)?;
            live_bytes += locs.iter().map(|e| u64::from(e.phys_length)).sum::<u64>();
            unchecked += slots.iter().filter(|s| !matches!(s, Slot::Same(_))).count() as u32;
            first += run;
        }
        let chunk_bytes = h.chunk_bytes();
        Ok(Stats {
            records: h.length,
            live_bytes,
            chunk_bytes,
            reclaimable: chunk_bytes.saturating_sub(live_bytes),
            unchecked,
        })
    }
}

#[cfg(all(test, feature = "std"))]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// A file that keeps what it was told ahead of reads.
    #[derive(Default)]
    struct Told(Mutex<Vec<Vec<(u64, u64, u32)>>>);

    impl StorageFile for Told {
        fn read_at(&self, _: u64, _: &mut [u8]) -> core::result::Result<(), IoError> {
            unreachable!("nothing is read")
        }
        fn write_at(&self, _: u64, _: &[u8]) -> core::result::Result<(), IoError> {
            unreachable!("nothing is written")
        }
        fn len(&self) -> core::result::Result<u64, IoError> {
            Ok(0)
        }
        fn set_len(&self, _: u64) -> core::result::Result<(), IoError> {
            Ok(())
        }
        fn sync(&self) -> core::result::Result<(), IoError> {
            Ok(())
        }
        fn will_need_records(&self, records: &[(u64, u64, u32)]) {
            self.0.lock().unwrap().push(records.to_vec());
        }
    }

    #[test]
    fn each_file_hears_its_records_in_one_announcement() {
        let (a, b) = (Told::default(), Told::default());
        let records = vec![(&a, (0, 8, 0)), (&b, (16, 8, 7)), (&a, (64, 8, 5)), (&b, (0, 8, 6)), (&a, (8, 8, 1))];
        let files = announce(records);
        assert_eq!(files.len(), 2);
        assert!(files.iter().any(|f| core::ptr::eq(*f, &a)) && files.iter().any(|f| core::ptr::eq(*f, &b)));
        let mut told_a = a.0.into_inner().unwrap();
        assert_eq!(told_a.len(), 1, "one announcement per file");
        told_a[0].sort_unstable();
        assert_eq!(told_a[0], [(0, 8, 0), (8, 8, 1), (64, 8, 5)]);
        let mut told_b = b.0.into_inner().unwrap();
        told_b[0].sort_unstable();
        assert_eq!(told_b, [[(0, 8, 6), (16, 8, 7)]]);
    }
}
