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

use super::{shard_count, Stats, Store, Verify};
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
    let mut regions = Vec::with_capacity(picks.len());
    for (i, pick) in picks.iter().enumerate() {
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
    let mut work: Vec<ReadShard<'_, '_, '_, B>> =
        jobs.chunks_mut(per).map(|jobs| ReadShard { jobs, scratch: Vec::new(), failed: None }).collect();
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

/// From a cold page cache, each worker would fault one record's pages in at a time: a
/// disk that could serve the whole batch at once sees a queue of one or two. When the
/// first record's bytes are not in memory, ask for every record's bytes up front, so
/// the reads are in flight together while the workers decode. A warm gather pays one
/// residency check.
fn hint_cold<'s, B: Backend>(jobs: &[ReadJob<'s, '_, B>]) {
    // A chunk that fails to open is reported by the read itself.
    let file = |job: &ReadJob<'s, '_, B>| job.store.chunk(job.loc.chunk_id).ok();
    let first = &jobs[0];
    let skip = |f: &B::File| !f.wants_hints() && (jobs.len() < 2 || f.resident(u64::from(first.loc.offset)));
    if file(first).is_none_or(skip) {
        return;
    }
    for job in jobs {
        if let Some(f) = file(job) {
            f.will_need_record(u64::from(job.loc.offset), u64::from(job.loc.phys_length), job.index);
        }
    }
}

/// Reads a shard's jobs in order, stopping at the first failure, which it keeps.
fn read_shard<B: Backend>(shard: &mut ReadShard<'_, '_, '_, B>) {
    // In a large store every record is a cache and TLB miss; asking for the next few
    // records' bytes ahead overlaps those misses with the decoding of this one.
    const AHEAD: usize = 4;
    for job in shard.jobs.iter().take(AHEAD) {
        job.store.prefetch(job.index, &job.loc);
    }
    for k in 0..shard.jobs.len() {
        if let Some(next) = shard.jobs.get(k + AHEAD) {
            next.store.prefetch(next.index, &next.loc);
        }
        let job = &mut shard.jobs[k];
        let store = job.store;
        if let Err(e) = store.read_record(job.index, &job.loc, job.codec, job.dst, &mut shard.scratch, store.verify) {
            shard.failed = Some((job.source, e));
            return;
        }
    }
}

impl<B: Backend> Store<B> {
    /// A read-ahead: announces records `idxs` to their chunk files and lets the host start
    /// fetching them ([`crate::io::StorageFile::start_reads`]: an object store sends the
    /// requests now), reading and decoding nothing. An index out of range or a bad entry is
    /// left for the read itself to report.
    pub fn will_read(&self, idxs: &[u64]) -> Result<()> {
        let (length, header) = (self.len(), self.header());
        let mut touched: Vec<u16> = Vec::new();
        for &index in idxs {
            let Ok((loc, _)) = self.locate(index, length, &header) else { continue };
            if loc.phys_length == 0 {
                continue;
            }
            let file = self.chunk(loc.chunk_id)?;
            file.will_need_record(u64::from(loc.offset), u64::from(loc.phys_length), index as u32);
            if !touched.contains(&loc.chunk_id) {
                touched.push(loc.chunk_id);
            }
        }
        for id in touched {
            self.chunk(id)?.start_reads();
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
    fn locate(&self, index: u64, length: u32, header: &Header) -> Result<(RecordLoc, Codec)> {
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
        for (&i, slot) in idxs.iter().zip(out.iter_mut()) {
            if i >= u64::from(length) {
                return Err(Error::IndexOutOfRange { index: i, length });
            }
            *slot = self.entry(i as u32)?.logic_length;
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
        for (i, &index) in idxs.iter().enumerate() {
            let (loc, codec) = self.locate(index, length, &header)?;
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
        for (i, (&index, &off)) in idxs.iter().zip(offsets).enumerate() {
            let (loc, codec) = self.locate(index, length, &header)?;
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

    fn prefetch(&self, index: u32, loc: &RecordLoc) {
        if let Some(file) = self.chunks.get(usize::from(loc.chunk_id)).and_then(|slot| slot.get()) {
            file.prefetch(u64::from(loc.offset));
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
    fn read_record(
        &self,
        index: u32,
        loc: &RecordLoc,
        codec: Codec,
        dst: &mut [u8],
        scratch: &mut Vec<u8>,
        verify: Verify,
    ) -> Result<bool> {
        let file = self.chunk(loc.chunk_id)?;
        let start = loc.offset as usize;
        let phys = loc.phys_length as usize;
        let decode_err = |source| Error::Decode { index: u64::from(index), source };
        if let Some(bytes) = file.view().and_then(|v| v.get(start..start + phys)) {
            // Decode first, then hash: decoding brings the stored bytes into this core's
            // cache, so the hash reads them from there instead of waiting on memory a second
            // time (a raw copy or an inflate of a cold record). The check comes before the
            // decode's own result, so damage that also breaks the compressed stream is reported
            // as the checksum error it is. Every decoder (libdeflate, miniz_oxide, libzstd,
            // ruzstd) bounds its writes to `dst` whatever the input, and on an error `dst` holds no promised bytes.
            let decoded = decode_into(codec, bytes, dst);
            let checked = self.check_stored(verify, index, loc, bytes)?;
            decoded.map_err(decode_err)?;
            return Ok(checked);
        }
        let at = u64::from(loc.offset);
        match codec {
            Codec::Raw => {
                // Raw stored bytes are the record: read them in place, then check them.
                file.read_at(at, dst).map_err(|e| self.read_err(e, loc, index))?;
                self.check_stored(verify, index, loc, dst)
            }
            Codec::Flate | Codec::Zstd => {
                scratch.resize(phys, 0);
                file.read_at(at, scratch).map_err(|e| self.read_err(e, loc, index))?;
                let checked = self.check_stored(verify, index, loc, scratch)?;
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

    /// Decodes record `index` into `out`, resized to its logical length; `scratch` is reused
    /// between calls for compressed bytes.
    pub fn read_into(&self, index: u64, out: &mut Vec<u8>, scratch: &mut Vec<u8>) -> Result<()> {
        let (loc, codec) = self.locate(index, self.len(), &self.header())?;
        out.clear();
        out.resize(loc.logic_length as usize, 0);
        self.read_record(index as u32, &loc, codec, out, scratch, self.verify).map(|_| ())
    }

    /// [`Store::read_into`] for verification tools: checks the record's checksum whenever it
    /// has one, whatever the store's [`Verify`] mode, and never fails for want of one.
    /// Returns whether a checksum was checked (`false`: the record is unchecked).
    pub fn read_verified(&self, index: u64, out: &mut Vec<u8>, scratch: &mut Vec<u8>) -> Result<bool> {
        let (loc, codec) = self.locate(index, self.len(), &self.header())?;
        out.clear();
        out.resize(loc.logic_length as usize, 0);
        self.read_record(index as u32, &loc, codec, out, scratch, Verify::Auto)
    }

    /// Storage usage, and how many records are unchecked; reads every live entry (and its
    /// checksum slot).
    pub fn stats(&self) -> Result<Stats> {
        let h = self.header();
        let (mut live_bytes, mut unchecked) = (0u64, 0u32);
        let sums = self.has_checksums();
        for i in 0..h.length {
            let e = self.entry(i)?;
            live_bytes += u64::from(e.phys_length);
            unchecked += u32::from(!sums || self.expected_sum(i, &e)?.is_none());
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
