//! The store engine: every rule of how records are placed, found, removed and repacked.
//!
//! Hosts give it a [`Backend`] (files) and a [`Parallel`] (threads); it gives them a
//! [`Store`]. Invariants it keeps:
//! - Entries `0..length` of the table are live and every one of them points inside the
//!   written part of its chunk. There is no liveness flag; delete swaps the tail entry into
//!   the hole.
//! - Append writes record bytes, then table entries, then the header, and only then
//!   publishes the new length to readers, so a crash at any point leaves a prefix of the
//!   appends visible and never an entry pointing at unwritten bytes.
//! - Reads ([`Store::gather`], [`Store::lengths`]) take `&self`, need no lock, and run
//!   beside one appender ([`Store::append`] with the store's single [`Writer`]). Delete and
//!   compact take `&mut self`, and the host's inter-process lock on top.

use alloc::boxed::Box;
use alloc::format;
use alloc::vec::Vec;
use core::ops::Range;
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use once_cell::race::OnceBox;

use crate::codec::{decode_into, Codec, Deflater};
use crate::error::{DecodeError, Error, FormatError, IoError, IoErrorKind, Result};
use crate::format::{
    entry_offset, Header, RecordLoc, CHUNK_FILE_LEN, DEFAULT_CHUNK_CAPACITY, ENTRY_LEN, HEADER_LEN, MAX_CHUNKS,
    MAX_RECORDS, MAX_RECORD_LEN, META_LEN,
};
use crate::io::{Backend, LockMode, Parallel, StorageFile};

/// Below this many bytes of records per worker, splitting a batch costs more in thread
/// hand-off than it saves.
const MIN_SHARD_BYTES: usize = 256 * 1024;

/// How to open a store.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// Create the store if the directory holds none.
    pub create: bool,
    /// Refuse every mutation; take only a shared lock.
    pub read_only: bool,
    /// Bytes a chunk may hold before appends roll over to the next one. The format fixes
    /// this at [`DEFAULT_CHUNK_CAPACITY`]; tests lower it to exercise rollover without
    /// writing gigabytes. Only placement depends on it, so any value reads any store.
    pub chunk_capacity: u64,
}

impl Default for Options {
    fn default() -> Self {
        Options { create: true, read_only: false, chunk_capacity: DEFAULT_CHUNK_CAPACITY }
    }
}

impl Options {
    /// Options for reading an existing store without changing it.
    pub fn read_only() -> Self {
        Options { create: false, read_only: true, ..Options::default() }
    }
}

/// Storage usage, as loaderx's `stats()` reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stats {
    /// Live records.
    pub records: u32,
    /// Sum of the live records' stored sizes.
    pub live_bytes: u64,
    /// How far the chunk files have grown (earlier chunks counted as 4 GiB each).
    pub chunk_bytes: u64,
    /// `chunk_bytes - live_bytes`: an upper bound on what [`Store::compact`] frees, since up
    /// to a record's worth of slack at the end of each full chunk cannot be reclaimed.
    pub reclaimable: u64,
}

/// A batch of records to append.
#[derive(Clone, Copy, Debug)]
pub enum Batch<'a> {
    /// `count` records of `item_len` bytes each, back to back at the start of `src`.
    Fixed {
        /// Source bytes.
        src: &'a [u8],
        /// Number of records.
        count: usize,
        /// Bytes per record.
        item_len: usize,
    },
    /// Record `i` is `src[offsets[i]..][..lens[i]]`.
    Ragged {
        /// Source bytes.
        src: &'a [u8],
        /// Start of each record in `src`.
        offsets: &'a [u64],
        /// Length of each record.
        lens: &'a [u32],
    },
}

impl<'a> Batch<'a> {
    /// Number of records in the batch.
    pub fn len(&self) -> usize {
        match *self {
            Batch::Fixed { count, .. } => count,
            Batch::Ragged { lens, .. } => lens.len(),
        }
    }

    /// True if the batch holds no record.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Where record `i` lies in the source. Only valid after [`Batch::validate`].
    fn range(&self, i: usize) -> Range<usize> {
        match *self {
            Batch::Fixed { item_len, .. } => i * item_len..(i + 1) * item_len,
            Batch::Ragged { offsets, lens, .. } => {
                let start = offsets[i] as usize;
                start..start + lens[i] as usize
            }
        }
    }

    fn src(&self) -> &'a [u8] {
        match *self {
            Batch::Fixed { src, .. } | Batch::Ragged { src, .. } => src,
        }
    }

    /// Checks every record against the record limit and the source's bounds.
    fn validate(&self) -> Result<()> {
        let check_len = |len: u64| {
            if len == 0 || len > u64::from(MAX_RECORD_LEN) {
                Err(Error::RecordTooLarge { length: len })
            } else {
                Ok(())
            }
        };
        match *self {
            Batch::Fixed { src, count, item_len } => {
                if count == 0 {
                    return Ok(());
                }
                check_len(item_len as u64)?;
                let need = (count as u128) * (item_len as u128);
                if need > src.len() as u128 {
                    return Err(Error::BufferTooSmall(format!(
                        "{count} records of {item_len} bytes need {need} source bytes, got {}",
                        src.len()
                    )));
                }
            }
            Batch::Ragged { src, offsets, lens } => {
                if offsets.len() != lens.len() {
                    return Err(Error::InvalidArgument(format!(
                        "{} offsets for {} lengths",
                        offsets.len(),
                        lens.len()
                    )));
                }
                for (&off, &len) in offsets.iter().zip(lens) {
                    check_len(u64::from(len))?;
                    if u128::from(off) + u128::from(len) > src.len() as u128 {
                        return Err(Error::BufferTooSmall(format!(
                            "record at {off}+{len} is past the {}-byte source",
                            src.len()
                        )));
                    }
                }
            }
        }
        Ok(())
    }
}

/// The right to append, delete and compact: exactly one per open [`Store`], returned by
/// [`Store::open`]. Hosts keep it behind a mutex so appends serialise while reads do not.
pub struct Writer {
    header: Header,
    read_only: bool,
    poisoned: bool,
    deflaters: Vec<Deflater>,
}

impl Writer {
    fn check_writable(&self) -> Result<()> {
        if self.read_only {
            return Err(Error::InvalidArgument("store was opened read-only".into()));
        }
        if self.poisoned {
            return Err(Error::Io(IoError::new(
                IoErrorKind::Poisoned,
                "write refused",
                "an earlier write or sync failed; reopen the store",
            )));
        }
        Ok(())
    }
}

/// An open zrecord store over a host's [`Backend`].
pub struct Store<B: Backend> {
    backend: B,
    meta: B::File,
    chunks: Vec<OnceBox<B::File>>,
    /// Published record count; readers load it with `Acquire`.
    length: AtomicU32,
    /// Published frontier as `tail_chunk << 32 | tail_offset`; stored before `length`.
    tail: AtomicU64,
    capacity: u64,
}

/// One record to decode during a gather.
struct ReadJob<'d> {
    index: u32,
    loc: RecordLoc,
    codec: Codec,
    dst: &'d mut [u8],
}

/// A worker's share of a gather.
struct ReadShard<'j, 'd> {
    jobs: &'j mut [ReadJob<'d>],
    scratch: Vec<u8>,
}

/// A worker's share of an append: its records, their stored bytes and where they go.
struct WriteShard {
    records: Range<usize>,
    deflater: Option<Deflater>,
    /// Compressed bytes of this shard's flate records, back to back.
    packed: Vec<u8>,
    /// Per record: stored length, codec, and where its stored bytes start in `packed`
    /// (`None`: stored raw, straight from the batch source).
    stored: Vec<(u32, Codec, Option<usize>)>,
    /// Per record: where it lands.
    placed: Vec<(u16, u32)>,
}

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

fn pack_tail(h: &Header) -> u64 {
    (u64::from(h.tail_chunk) << 32) | u64::from(h.tail_offset)
}

fn shard_count(workers: usize, items: usize, bytes: usize) -> usize {
    let by_bytes = bytes / MIN_SHARD_BYTES;
    workers.min(by_bytes).min(items).max(1)
}

impl<B: Backend> Store<B> {
    /// Opens the store in `backend`'s directory, creating it if `opts.create` and it holds
    /// none. Takes the host's shared lock for the life of the store.
    pub fn open(backend: B, opts: Options) -> Result<(Self, Writer)> {
        if opts.chunk_capacity == 0 {
            return Err(Error::InvalidArgument("chunk capacity must be positive".into()));
        }
        let create = opts.create && !opts.read_only;
        let meta = backend.open_meta(create)?.ok_or(FormatError::MissingMeta)?;
        let meta_len = meta.len()?;
        if create && never_used(&meta, meta_len)? {
            // A new store, or one whose creation was cut short before its header was
            // durable (no record was ever appended to it, so starting over loses nothing).
            // The header is synced and the directory entries made durable before the store
            // is handed out: a power cut can no longer leave a meta.zr without its magic.
            let chunk0 = backend.open_chunk(0, true)?.ok_or(FormatError::MissingChunk { chunk: 0 })?;
            if chunk0.len()? < CHUNK_FILE_LEN {
                chunk0.set_len(CHUNK_FILE_LEN)?;
            }
            meta.set_len(META_LEN)?;
            meta.write_at(0, &Header::default().encode())?;
            meta.sync()?;
            backend.sync_dir()?;
        } else if meta_len != META_LEN {
            return Err(FormatError::MetaSize { found: meta_len, expected: META_LEN }.into());
        }
        let mut raw = [0u8; HEADER_LEN];
        meta.read_at(0, &mut raw)?;
        let mut header = Header::decode(&raw)?;
        backend.lock(LockMode::Shared)?;
        // An interrupted delete is finished before anything reads the table (see
        // `DeleteJournal`): its journal is its commit point.
        if let Some(journal) = DeleteJournal::load(&backend, &header, !opts.read_only)? {
            if opts.read_only {
                backend.unlock(LockMode::Shared);
                return Err(FormatError::InterruptedDelete.into());
            }
            if let Err(e) = backend.lock(LockMode::Exclusive) {
                backend.unlock(LockMode::Shared);
                return Err(e);
            }
            let replayed = journal.replay(&backend, &meta);
            backend.unlock(LockMode::Exclusive);
            match replayed {
                Ok(h) => header = h,
                Err(e) => {
                    backend.unlock(LockMode::Shared);
                    return Err(e);
                }
            }
        }

        let chunks = (0..MAX_CHUNKS).map(|_| OnceBox::new()).collect();
        let store = Store {
            backend,
            meta,
            chunks,
            length: AtomicU32::new(header.length),
            tail: AtomicU64::new(pack_tail(&header)),
            capacity: opts.chunk_capacity,
        };
        // A directory without its tail chunk is damaged; say so now rather than on a read.
        let tail = store.chunk(header.tail_chunk)?;
        if !opts.read_only && tail.len()? < CHUNK_FILE_LEN {
            tail.set_len(CHUNK_FILE_LEN)?;
        }
        let writer = Writer { header, read_only: opts.read_only, poisoned: false, deflaters: Vec::new() };
        Ok((store, writer))
    }

    /// The host backend.
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// Number of live records, as last published.
    pub fn len(&self) -> u32 {
        self.length.load(Ordering::Acquire)
    }

    /// True if the store holds no record.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The published header.
    pub fn header(&self) -> Header {
        let length = self.length.load(Ordering::Acquire);
        let tail = self.tail.load(Ordering::Acquire);
        Header { tail_chunk: (tail >> 32) as u16, tail_offset: tail as u32, length }
    }

    fn chunk(&self, id: u16) -> Result<&B::File> {
        let slot = self.chunks.get(usize::from(id)).ok_or(FormatError::MissingChunk { chunk: id })?;
        slot.get_or_try_init(|| match self.backend.open_chunk(id, false) {
            Ok(Some(f)) => Ok(Box::new(f)),
            Ok(None) => Err(Error::Format(FormatError::MissingChunk { chunk: id })),
            Err(e) => Err(Error::Io(e)),
        })
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

    fn write_entries(&self, first: u32, entries: &[RecordLoc]) -> Result<()> {
        let mut bytes = Vec::with_capacity(entries.len() * ENTRY_LEN);
        for e in entries {
            bytes.extend_from_slice(&e.encode());
        }
        self.meta.write_at(entry_offset(first), &bytes)?;
        Ok(())
    }

    fn write_header(&self, w: &mut Writer, header: Header) -> Result<()> {
        if let Err(e) = self.meta.write_at(0, &header.encode()) {
            // The header may now be half-written; no further write may build on it.
            w.poisoned = true;
            return Err(e.into());
        }
        w.header = header;
        Ok(())
    }

    /// Makes the new header visible to readers: frontier first, then length.
    fn publish(&self, header: &Header) {
        self.tail.store(pack_tail(header), Ordering::Release);
        self.length.store(header.length, Ordering::Release);
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
            jobs.push(ReadJob { index: index as u32, loc, codec, dst: &mut slot[..need] });
        }
        self.run_reads(&mut jobs, par)
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
            jobs.push(ReadJob { index: idxs[i] as u32, loc, codec, dst: slot });
        }
        self.run_reads(&mut jobs, par)
    }

    fn run_reads<P: Parallel>(&self, jobs: &mut [ReadJob<'_>], par: &P) -> Result<()> {
        if jobs.is_empty() {
            return Ok(());
        }
        let bytes: usize = jobs.iter().map(|j| j.dst.len()).sum();
        let shards = shard_count(par.workers(), jobs.len(), bytes);
        let per = jobs.len().div_ceil(shards);
        let mut work: Vec<ReadShard<'_, '_>> =
            jobs.chunks_mut(per).map(|jobs| ReadShard { jobs, scratch: Vec::new() }).collect();
        if work.len() == 1 {
            return self.read_shard(&mut work[0]);
        }
        par.for_each(&mut work, |shard| self.read_shard(shard))
    }

    fn read_shard(&self, shard: &mut ReadShard<'_, '_>) -> Result<()> {
        // In a large store every record is a cache and TLB miss; asking for the next few
        // records' bytes ahead overlaps those misses with the decoding of this one.
        const AHEAD: usize = 4;
        for k in 0..shard.jobs.len().min(AHEAD) {
            self.prefetch(&shard.jobs[k].loc);
        }
        for k in 0..shard.jobs.len() {
            if let Some(next) = shard.jobs.get(k + AHEAD) {
                self.prefetch(&next.loc);
            }
            let job = &mut shard.jobs[k];
            self.read_record(job.index, &job.loc, job.codec, job.dst, &mut shard.scratch)?;
        }
        Ok(())
    }

    fn prefetch(&self, loc: &RecordLoc) {
        if let Some(file) = self.chunks.get(usize::from(loc.chunk_id)).and_then(|slot| slot.get()) {
            file.prefetch(u64::from(loc.offset));
        }
    }

    /// Decodes one checked record into `dst` (exactly its logical length).
    fn read_record(
        &self,
        index: u32,
        loc: &RecordLoc,
        codec: Codec,
        dst: &mut [u8],
        scratch: &mut Vec<u8>,
    ) -> Result<()> {
        let file = self.chunk(loc.chunk_id)?;
        let start = loc.offset as usize;
        let phys = loc.phys_length as usize;
        let decode_err = |source| Error::Decode { index: u64::from(index), source };
        if let Some(bytes) = file.view().and_then(|v| v.get(start..start + phys)) {
            return decode_into(codec, bytes, dst).map_err(decode_err);
        }
        let at = u64::from(loc.offset);
        match codec {
            Codec::Raw => file.read_at(at, dst).map_err(|e| self.read_err(e, loc, index)),
            Codec::Flate => {
                scratch.resize(phys, 0);
                file.read_at(at, scratch).map_err(|e| self.read_err(e, loc, index))?;
                decode_into(codec, scratch, dst).map_err(decode_err)
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
        self.read_record(index as u32, &loc, codec, out, scratch)
    }

    /// Appends `batch`, compressing with `codec` (records that do not shrink are stored
    /// raw), and returns the index of its first record. The batch becomes visible to readers
    /// all at once, after its bytes and entries are written.
    pub fn append<P: Parallel>(&self, w: &mut Writer, batch: &Batch<'_>, codec: Codec, par: &P) -> Result<u32> {
        w.check_writable()?;
        batch.validate()?;
        let count = batch.len();
        if count == 0 {
            return Ok(w.header.length);
        }
        // Taken on every call (a no-op while held): a handle inherited through fork() must
        // win the lock in its own process before it writes. Under it, the header on disk is
        // the truth: another handle may have appended since this one last looked.
        self.backend.lock(LockMode::Appender)?;
        self.reload(w)?;
        let first = w.header.length;
        if u64::from(first) + count as u64 > u64::from(MAX_RECORDS) {
            return Err(Error::StoreFull("the 2^24 record limit would be exceeded"));
        }

        // 1. Compress, each worker a contiguous run of records with its own compressor.
        let src = batch.src();
        let total: usize = (0..count).map(|i| batch.range(i).len()).sum();
        let shards = if codec == Codec::Raw { 1 } else { shard_count(par.workers(), count, total) };
        let per = count.div_ceil(shards);
        let mut work: Vec<WriteShard> = (0..count)
            .step_by(per)
            .map(|s| WriteShard {
                records: s..(s + per).min(count),
                deflater: (codec == Codec::Flate).then(|| w.deflaters.pop().unwrap_or_default()),
                packed: Vec::new(),
                stored: Vec::new(),
                placed: Vec::new(),
            })
            .collect();
        let compress = |shard: &mut WriteShard| -> Result<()> {
            let bytes: usize = shard.records.clone().map(|i| batch.range(i).len()).sum();
            shard.stored.reserve(shard.records.len());
            match shard.deflater.as_mut() {
                None => {
                    for i in shard.records.clone() {
                        shard.stored.push((batch.range(i).len() as u32, Codec::Raw, None));
                    }
                }
                Some(deflater) => {
                    shard.packed.resize(bytes, 0);
                    let mut used = 0;
                    for i in shard.records.clone() {
                        let rec = &src[batch.range(i)];
                        match deflater.compress(rec, &mut shard.packed[used..]) {
                            Some(n) => {
                                shard.stored.push((n as u32, Codec::Flate, Some(used)));
                                used += n;
                            }
                            None => shard.stored.push((rec.len() as u32, Codec::Raw, None)),
                        }
                    }
                    shard.packed.truncate(used);
                }
            }
            Ok(())
        };
        if work.len() == 1 {
            compress(&mut work[0])?;
        } else {
            par.for_each(&mut work, compress)?;
        }

        // 2. Place serially: dense from the frontier, rolling over to a fresh chunk when a
        //    record would cross the capacity. Nothing is changed yet.
        let mut h = w.header;
        for shard in &mut work {
            shard.placed.reserve(shard.stored.len());
            for &(phys, _, _) in &shard.stored {
                if u64::from(phys) > self.capacity {
                    return Err(Error::RecordTooLarge { length: u64::from(phys) });
                }
                if u64::from(h.tail_offset) + u64::from(phys) > self.capacity {
                    if u32::from(h.tail_chunk) + 1 >= MAX_CHUNKS {
                        return Err(Error::StoreFull("all 4096 chunk files are full"));
                    }
                    h.tail_chunk += 1;
                    h.tail_offset = 0;
                }
                shard.placed.push((h.tail_chunk, h.tail_offset));
                h.tail_offset += phys;
            }
        }
        h.length = first + count as u32;
        for id in w.header.tail_chunk + 1..=h.tail_chunk {
            self.create_chunk(w, id)?;
        }

        // 3. Write the bytes, each worker its own records, coalescing adjacent ones.
        let write = |shard: &mut WriteShard| -> Result<()> { self.write_shard(shard, batch) };
        if work.len() == 1 {
            write(&mut work[0])?;
        } else {
            par.for_each(&mut work, write)?;
        }

        // 4. Entries, then the header, then publish.
        let mut entries = Vec::with_capacity(count);
        for shard in &work {
            for (k, (&(phys, codec, _), &(chunk_id, offset))) in shard.stored.iter().zip(&shard.placed).enumerate() {
                let logic = batch.range(shard.records.start + k).len() as u32;
                entries.push(RecordLoc {
                    offset,
                    phys_length: phys,
                    logic_length: logic,
                    chunk_id,
                    codec: codec.tag(),
                });
            }
        }
        self.write_entries(first, &entries)?;
        // Barrier: the payloads and entries must be durable before the header that makes
        // them visible, or a power cut could keep the header and lose what it points at.
        self.sync_files(w, w.header.tail_chunk..=h.tail_chunk)?;
        self.write_header(w, h)?;
        self.publish(&h);
        w.deflaters.extend(work.into_iter().filter_map(|s| s.deflater));
        Ok(first)
    }

    /// Syncs the chunks in `chunks` that are open, then meta.zr. A failure poisons the
    /// writer: after a failed fsync the kernel may have dropped the dirty pages, so nothing
    /// may be built on the assumption that they landed.
    fn sync_files(&self, w: &mut Writer, chunks: core::ops::RangeInclusive<u16>) -> Result<()> {
        let result = (|| {
            for id in chunks {
                if let Some(f) = self.chunks[usize::from(id)].get() {
                    f.sync()?;
                }
            }
            self.meta.sync()
        })();
        if let Err(e) = result {
            w.poisoned = true;
            return Err(e.into());
        }
        Ok(())
    }

    /// Fails like `r`, poisoning the writer if it is an error: used for every sync.
    fn poison_on_err(w: &mut Writer, r: Result<(), IoError>) -> Result<()> {
        r.map_err(|e| {
            w.poisoned = true;
            Error::Io(e)
        })
    }

    fn create_chunk(&self, w: &mut Writer, id: u16) -> Result<()> {
        let file = self.backend.open_chunk(id, true)?.ok_or(FormatError::MissingChunk { chunk: id })?;
        if file.len()? < CHUNK_FILE_LEN {
            file.set_len(CHUNK_FILE_LEN)?;
        }
        // The new file's directory entry must be durable before anything points into it.
        Self::poison_on_err(w, self.backend.sync_dir())?;
        let slot = &self.chunks[usize::from(id)];
        // A slot already filled by an earlier, failed append holds the same file.
        let _ = slot.set(Box::new(file));
        Ok(())
    }

    fn write_shard(&self, shard: &WriteShard, batch: &Batch<'_>) -> Result<()> {
        // A pending run: destination chunk and offset, whether its bytes come from `packed`
        // (else from the batch source), and their range there.
        let mut run: Option<(u16, u32, bool, Range<usize>)> = None;
        let flush = |run: Option<(u16, u32, bool, Range<usize>)>| -> Result<()> {
            if let Some((chunk, offset, packed, range)) = run {
                let mem = if packed { &shard.packed[..] } else { batch.src() };
                self.chunk(chunk)?.write_at(u64::from(offset), &mem[range])?;
            }
            Ok(())
        };
        for (k, (&(phys, _, packed_at), &(chunk, offset))) in shard.stored.iter().zip(&shard.placed).enumerate() {
            let (packed, start) = match packed_at {
                Some(at) => (true, at),
                None => (false, batch.range(shard.records.start + k).start),
            };
            let bytes = start..start + phys as usize;
            run = match run {
                Some((c, o, p, r))
                    if c == chunk && p == packed && r.end == bytes.start && o as usize + r.len() == offset as usize =>
                {
                    Some((c, o, p, r.start..bytes.end))
                }
                other => {
                    flush(other)?;
                    Some((chunk, offset, packed, bytes))
                }
            };
        }
        flush(run)
    }

    /// Removes the records at `idxs` (any order, duplicates allowed) by swapping the last
    /// live entry into each hole, in descending index order. An index at or past the length
    /// fails the whole call before anything changes. Record bytes stay until compact.
    pub fn delete(&mut self, w: &mut Writer, idxs: &[u64]) -> Result<()> {
        w.check_writable()?;
        let length = w.header.length;
        let mut sorted: Vec<u64> = idxs.to_vec();
        sorted.sort_unstable_by(|a, b| b.cmp(a));
        sorted.dedup();
        if let Some(&max) = sorted.first() {
            if max >= u64::from(length) {
                return Err(Error::IndexOutOfRange { index: max, length });
            }
        } else {
            return Ok(());
        }
        self.backend.lock(LockMode::Exclusive)?;
        let result = self.reload(w).and_then(|()| self.delete_locked(w, &sorted));
        self.backend.unlock(LockMode::Exclusive);
        result
    }

    fn delete_locked(&mut self, w: &mut Writer, sorted: &[u64]) -> Result<()> {
        let old = w.header;
        // Plan the swaps first: a slot filled by an earlier swap can be the source of a
        // later one, so the plan reads through its own overlay.
        let mut overlay: alloc::collections::BTreeMap<u32, RecordLoc> = alloc::collections::BTreeMap::new();
        let mut len = old.length;
        for &i in sorted {
            let (i, last) = (i as u32, len - 1);
            if i != last {
                let moved = match overlay.get(&last) {
                    Some(&e) => e,
                    None => self.entry(last)?,
                };
                overlay.insert(i, moved);
            }
            len = last;
        }
        overlay.retain(|&slot, _| slot < len);
        if overlay.is_empty() {
            // Only tail records go: the 16-byte header write is the whole change. It is
            // synced before returning: the next append writes entries into the slots it
            // freed, which a header still durable on disk would count as live.
            let h = Header { length: len, ..old };
            self.write_header(w, h)?;
            self.publish(&h);
            return Self::poison_on_err(w, self.meta.sync());
        }
        let journal = DeleteJournal { header: old, new_length: len, moves: overlay.into_iter().collect() };
        // The journal is the commit point: once it is durable the delete will complete,
        // here or on the next writable open; before it, nothing was touched. It names the
        // current header, which must itself be durable first (an append's header is not
        // synced), or a power cut could keep the journal and lose the header it matches.
        Self::poison_on_err(w, self.meta.sync())?;
        self.backend.write_side_file(DELETE_JOURNAL, &journal.encode())?;
        match journal.apply(&self.meta) {
            Ok(h) => {
                w.header = h;
                self.publish(&h);
            }
            Err(e) => {
                // The table is half rewritten under this handle; only a reopen (which
                // replays the journal) may touch it again.
                w.poisoned = true;
                return Err(e);
            }
        }
        if let Err(e) = self.backend.remove_side_file(DELETE_JOURNAL) {
            // Harmless to leave (a later open replays it idempotently or finds it stale),
            // but a store that cannot remove files should not be written to.
            w.poisoned = true;
            return Err(e.into());
        }
        Ok(())
    }

    /// Storage usage; reads every live entry.
    pub fn stats(&self) -> Result<Stats> {
        let h = self.header();
        let mut live_bytes = 0u64;
        for i in 0..h.length {
            live_bytes += u64::from(self.entry(i)?.phys_length);
        }
        let chunk_bytes = h.chunk_bytes();
        Ok(Stats { records: h.length, live_bytes, chunk_bytes, reclaimable: chunk_bytes.saturating_sub(live_bytes) })
    }

    /// Repacks the live records densely, in place, and deletes chunk files past the new
    /// frontier. Records are visited in physical order and packed in that order, so none
    /// moves to a higher address and no write lands on a record not yet moved; each entry
    /// is updated as soon as its record lands. A record whose new place overlaps its old one
    /// is first copied past the frontier, so its entry never points at half-moved bytes.
    /// Interrupted at any point, the store is consistent, and running compact again
    /// finishes the job. `progress(done, total)` is called as records are visited.
    pub fn compact(&mut self, w: &mut Writer, progress: &mut dyn FnMut(u64, u64)) -> Result<()> {
        w.check_writable()?;
        self.backend.lock(LockMode::Exclusive)?;
        let result = self.reload(w).and_then(|()| self.compact_locked(w, progress));
        self.backend.unlock(LockMode::Exclusive);
        result
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
                Self::poison_on_err(w, self.meta.sync())?;
            }
            for (mv, &off) in batch.iter().zip(&at) {
                let len = mv.from.phys_length as usize;
                self.chunk(mv.to.0)?.write_at(u64::from(mv.to.1), &buf[off..off + len])?;
            }
            self.sync_files(w, batch[0].to.0..=batch[batch.len() - 1].to.0)?;
            for mv in batch {
                self.move_entries(&live[mv.group.clone()], mv.to, &mv.from)?;
            }
            Self::poison_on_err(w, self.meta.sync())?;
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
        // frontier and extend it again, sparse.
        let tail = self.chunk(new.tail_chunk)?;
        tail.set_len(u64::from(new.tail_offset))?;
        tail.set_len(CHUNK_FILE_LEN)?;
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

    fn move_entries(&self, group: &[(RecordLoc, u32)], to: (u16, u32), loc: &RecordLoc) -> Result<()> {
        let moved = RecordLoc { chunk_id: to.0, offset: to.1, ..*loc };
        for &(_, index) in group {
            self.write_entries(index, &[moved])?;
        }
        Ok(())
    }

    /// Makes everything written so far durable: chunk data first, then the table and header.
    /// A failed sync poisons the writer; later writes are refused.
    pub fn sync(&self, w: &mut Writer) -> Result<()> {
        if w.poisoned {
            w.check_writable()?;
        }
        self.sync_files(w, 0..=w.header.tail_chunk)
    }

    /// Releases the host locks this store holds. Hosts call it when the handle closes.
    pub fn release_locks(&self, w: &mut Writer) {
        let _ = w;
        self.backend.unlock(LockMode::Appender);
        self.backend.unlock(LockMode::Shared);
    }

    /// Re-reads the header and adopts it if it only extends what this handle knows (other
    /// handles appended). Called under the appender or exclusive lock, and by hosts when a
    /// handle inherited through `fork()` takes its locks again in the child. A header that
    /// does not extend ours means records were deleted or moved while this handle held no
    /// lock (a handle used across fork while another process deleted or compacted, or a
    /// writer that takes no locks, such as loaderx): the handle's view is stale, and using
    /// it could write over live records, so it is refused.
    pub fn reload(&self, w: &mut Writer) -> Result<()> {
        let mut raw = [0u8; HEADER_LEN];
        self.meta.read_at(0, &mut raw)?;
        let disk = Header::decode(&raw)?;
        if disk == w.header {
            return Ok(());
        }
        let ours = &w.header;
        let extends =
            disk.length >= ours.length && (disk.tail_chunk, disk.tail_offset) >= (ours.tail_chunk, ours.tail_offset);
        if !extends {
            return Err(Error::Locked(
                "the store was changed by another process while this handle held no lock on it \
                 (used across fork(), or changed by a writer that takes no locks); reopen it"
                    .into(),
            ));
        }
        w.header = disk;
        self.publish(&disk);
        Ok(())
    }
}

/// True if meta.zr holds no store yet, or one whose creation was interrupted before a
/// record was ever appended: empty, or nothing but zeros and at most the initial header in
/// the header and first entry.
fn never_used<F: StorageFile>(meta: &F, len: u64) -> Result<bool> {
    if len == 0 {
        return Ok(true);
    }
    if len > META_LEN {
        return Ok(false);
    }
    let mut head = [0u8; HEADER_LEN + ENTRY_LEN];
    let n = head.len().min(len as usize);
    meta.read_at(0, &mut head[..n])?;
    let (h, e) = head.split_at(HEADER_LEN);
    let header_fresh = h.iter().all(|&b| b == 0) || *h == Header::default().encode();
    Ok(header_fresh && e.iter().all(|&b| b == 0))
}

/// Name of the side file holding a delete's redo journal while the delete runs.
pub const DELETE_JOURNAL: &str = "delete.zrj";
const JOURNAL_MAGIC: [u8; 4] = *b"ZRDJ";
const JOURNAL_HEAD: usize = 24;
const JOURNAL_MOVE: usize = 4 + ENTRY_LEN;

/// The redo journal of one delete: the header before it, the new length, and the final
/// contents of every slot below the new length that the delete rewrites.
///
/// Delete overwrites live table slots, which no ordering of 16-byte writes can make atomic;
/// the journal does. Layout (little-endian): `"ZRDJ"`, version u16 = 1, the old header's
/// tail_chunk u16, tail_offset u32 and length u32, the new length u32, the move count u32,
/// then per move the slot u32 and the 16-byte entry, then an FNV-1a 64 checksum of all of
/// it. A journal that fails its checksum was never complete, so nothing was touched; one
/// whose header matches neither the old nor the new state of the store is stale.
struct DeleteJournal {
    header: Header,
    new_length: u32,
    moves: Vec<(u32, RecordLoc)>,
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

impl DeleteJournal {
    fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(JOURNAL_HEAD + self.moves.len() * JOURNAL_MOVE + 8);
        b.extend_from_slice(&JOURNAL_MAGIC);
        b.extend_from_slice(&1u16.to_le_bytes());
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

    fn decode(b: &[u8]) -> Option<Self> {
        let u32_at = |at: usize| u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        if b.len() < JOURNAL_HEAD + 8 || b[..4] != JOURNAL_MAGIC || b[4..6] != 1u16.to_le_bytes() {
            return None;
        }
        let (body, sum) = b.split_at(b.len() - 8);
        if fnv1a(body).to_le_bytes() != sum {
            return None;
        }
        let header =
            Header { tail_chunk: u16::from_le_bytes([b[6], b[7]]), tail_offset: u32_at(8), length: u32_at(12) };
        let (new_length, count) = (u32_at(16), u32_at(20) as usize);
        if body.len() != JOURNAL_HEAD + count.checked_mul(JOURNAL_MOVE)? || new_length > header.length {
            return None;
        }
        let moves: Vec<(u32, RecordLoc)> = body[JOURNAL_HEAD..]
            .chunks_exact(JOURNAL_MOVE)
            .map(|m| (u32::from_le_bytes([m[0], m[1], m[2], m[3]]), RecordLoc::decode(&m[4..])))
            .collect();
        if moves.iter().any(|&(slot, _)| slot >= new_length) {
            return None;
        }
        Some(DeleteJournal { header, new_length, moves })
    }

    /// The journal left in `backend` by an interrupted delete, if one applies to a store
    /// whose header is `current`. Torn or stale journals are removed when `writable`.
    fn load<B: Backend>(backend: &B, current: &Header, writable: bool) -> Result<Option<Self>> {
        let Some(bytes) = backend.read_side_file(DELETE_JOURNAL)? else { return Ok(None) };
        if bytes.is_empty() {
            return Ok(None);
        }
        let journal = DeleteJournal::decode(&bytes).filter(|j| {
            let same_tail = (current.tail_chunk, current.tail_offset) == (j.header.tail_chunk, j.header.tail_offset);
            same_tail && (current.length == j.header.length || current.length == j.new_length)
        });
        if journal.is_none() && writable {
            backend.remove_side_file(DELETE_JOURNAL)?;
        }
        Ok(journal)
    }

    /// Writes the moves and the new header, and makes them durable. Idempotent.
    fn apply<F: StorageFile>(&self, meta: &F) -> Result<Header> {
        for (slot, e) in &self.moves {
            meta.write_at(entry_offset(*slot), &e.encode())?;
        }
        let h = Header { length: self.new_length, ..self.header };
        meta.write_at(0, &h.encode())?;
        meta.sync()?;
        Ok(h)
    }

    /// Finishes an interrupted delete found at open, then drops the journal.
    fn replay<B: Backend>(&self, backend: &B, meta: &B::File) -> Result<Header> {
        let h = self.apply(meta)?;
        backend.remove_side_file(DELETE_JOURNAL)?;
        Ok(h)
    }
}
