//! One pushed file read over the network ([`RemoteFile`]), and a pushed store directory as
//! the engine's [`Backend`] ([`RemoteDir`]).
//!
//! Metadata files (`meta.zr`, `checksums.zrc`) are read in aligned blocks of
//! [`META_BLOCK`] bytes and kept: a table lookup or a checksum slot is a few bytes, and one
//! request per record would be absurd. Chunk files are read by exact byte ranges: the
//! engine announces a batch's records ([`StorageFile::will_need`]) before it reads them,
//! and the first read sends them all at once, neighbours merged into one request when the
//! gap between them costs less than a round trip (measured: [`Remote::merge_gap`]) and each request capped
//! at [`MAX_SPAN`]. While a loader streams the dataset ([`Cache::streaming`]), a cache that
//! holds the whole dataset bridges any gap up to [`MAX_GAP`] instead: every byte brought
//! along is a byte it keeps and the stream's later reads would have fetched with requests
//! of their own. Direct reads (`ds[i]`, `ds[list]`, a torch `Dataset` in worker processes)
//! have no such future: they fetch what they ask for, so a random sample costs its own
//! bytes and not the megabytes around it. Fetched ranges are kept in the dataset's [`Cache`],
//! up to a byte budget, evicted by the plan of the loader reading them.

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};

use bytes::Bytes;
use object_store::{GetOptions, GetRange};
use smallvec::SmallVec;
use zrecord_core::error::{Error, IoError, IoErrorKind};
use zrecord_core::io::{Backend, LockMode, StorageFile};

use super::disk::DiskCache;
use super::objects::{Object, Objects};
use super::pending::{Answering, Pending};
use super::plan::{NextUse, ReadPlan};
use super::{lock, Remote, MAX_GAP};

/// Bytes per block of a metadata file.
pub const META_BLOCK: u64 = 1 << 20;
/// Largest single request.
pub const MAX_SPAN: u64 = 16 << 20;
/// A gap between two wanted ranges always bridged: fewer bytes than a request's own
/// headers and round trip cost, however small the records around it (a batch's labels,
/// 8 bytes each, come in one request per shard rather than one each).
pub const TINY_GAP: u64 = 4 << 10;
/// Bytes of record data a dataset keeps in memory by default ([`Cache`]).
pub const CACHE_BYTES: u64 = 1 << 30;
/// Bytes of record data a cache directory keeps by default ([`super::disk::DiskCache`]).
pub const DISK_CACHE_BYTES: u64 = 16 << 30;

/// A range's bytes, on their way or come.
type Fetch = Arc<Pending>;

/// Requests a reading thread sends and waits for itself, once it let go of the file's
/// ranges: those of a store asked inline ([`super::asked_inline`]).
type Sends = futures::future::BoxFuture<'static, ()>;

/// The store's record indices in a range, inline up to four (a small cache's range holds
/// one record, its labels' a few; an allocation per request showed in its profile).
type Indices = SmallVec<[u32; 4]>;

/// The record bytes a remote dataset keeps, up to a byte budget, shared by all its files.
///
/// Over budget, ranges are dropped by the plan a loader installs ([`Cache::set_plan`]):
/// the range whose records are needed furthest in the future goes first (Belady's policy,
/// optimal for a known future, which a stream that is a pure function of position is).
/// Without a plan, the oldest range goes first. Metadata blocks are kept apart, always.
pub struct Cache {
    limit: AtomicU64,
    /// Bytes of the dataset behind the cache (its listing's stored bytes), 0 if unknown.
    data: AtomicU64,
    held: AtomicU64,
    seq: AtomicU64,
    files: Mutex<Vec<Weak<FileSpans>>>,
    plan: RwLock<Option<ReadPlan>>,
    evicting: Mutex<()>,
    /// The cache directory below this cache, if the dataset was given one.
    disk: RwLock<Option<Arc<DiskCache>>>,
    /// Loaders streaming the dataset now ([`Cache::streaming`]).
    streams: AtomicU64,
    /// [`Cache::evict`] does not look at the ranges again until more than this is counted:
    /// set when a look could not drop enough (what is held is mostly on its way).
    look_above: AtomicU64,
    /// Bytes of kept ranges no read has taken yet (on their way, or come and not read).
    untaken: AtomicU64,
    /// Bytes of taken ranges the last look found the read-ahead about to read again.
    shielded: AtomicU64,
    /// Bytes the loader's read-ahead holds ahead of its reads ([`Cache::set_read_ahead`]).
    ahead: AtomicU64,
    /// Bytes of small files fetched whole so far ([`Cache::take_whole`]).
    whole_files: AtomicU64,
    /// The nearest next use among the ranges the last look dropped (`u64::MAX`: no look
    /// since the plan or the budget changed): a range needed no sooner goes as soon as a
    /// read took it ([`Cache::mark_fleeting`]).
    keep_before: AtomicU64,
}

/// A loader streaming a dataset through its [`Cache`], from [`Cache::streaming`] until
/// dropped.
pub struct Streaming(Arc<Cache>);

impl Drop for Streaming {
    fn drop(&mut self) {
        self.0.streams.fetch_sub(1, Ordering::Relaxed);
        // The read-ahead of a loader that stopped will not be read: back under budget.
        self.0.look_above.store(0, Ordering::Relaxed);
        self.0.ahead.store(0, Ordering::Relaxed);
        self.0.keep_any();
        self.0.evict();
    }
}

impl Cache {
    /// A cache of at most `limit` bytes of record data.
    pub fn new(limit: u64) -> Arc<Cache> {
        Arc::new(Cache {
            limit: AtomicU64::new(limit),
            data: AtomicU64::new(0),
            held: AtomicU64::new(0),
            seq: AtomicU64::new(0),
            files: Mutex::new(Vec::new()),
            plan: RwLock::new(None),
            evicting: Mutex::new(()),
            disk: RwLock::new(None),
            streams: AtomicU64::new(0),
            look_above: AtomicU64::new(0),
            untaken: AtomicU64::new(0),
            shielded: AtomicU64::new(0),
            ahead: AtomicU64::new(0),
            whole_files: AtomicU64::new(0),
            keep_before: AtomicU64::new(u64::MAX),
        })
    }

    /// Says that a loader streams the dataset until the guard is dropped: it will read
    /// every sample, so while the whole dataset fits, requests bring neighbouring records
    /// along (see the module docs). Without a loader, reads fetch what they ask for.
    pub fn streaming(self: &Arc<Self>) -> Streaming {
        self.streams.fetch_add(1, Ordering::Relaxed);
        Streaming(Arc::clone(self))
    }

    /// Whether requests may bring records along that were not asked for: a loader streams
    /// the dataset and the cache holds all of it.
    pub(crate) fn brings_along(&self) -> bool {
        self.streamed() && self.holds_everything()
    }

    /// Whether a loader streams the dataset now ([`Cache::streaming`]).
    fn streamed(&self) -> bool {
        self.streams.load(Ordering::Relaxed) > 0
    }

    /// Keeps fetched record ranges in `disk` too, and reads them from there before the
    /// network ([`DiskCache`]).
    pub fn set_disk(&self, disk: Arc<DiskCache>) {
        *self.disk.write().unwrap_or_else(|p| p.into_inner()) = Some(disk);
    }

    /// The cache directory below this cache, if any.
    pub fn disk(&self) -> Option<Arc<DiskCache>> {
        self.disk.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn plan(&self) -> Option<ReadPlan> {
        self.plan.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Sets the byte budget (dropping ranges now if it shrank).
    pub fn set_limit(&self, limit: u64) {
        self.limit.store(limit, Ordering::Relaxed);
        self.keep_any();
        self.evict();
    }

    /// The byte budget.
    pub fn limit(&self) -> u64 {
        self.limit.load(Ordering::Relaxed)
    }

    /// Tells the cache how many bytes the dataset behind it has: a cache that holds them
    /// all can take whole merged spans ([`RemoteFile`] merges more freely then).
    pub fn set_data(&self, bytes: u64) {
        self.data.store(bytes, Ordering::Relaxed);
    }

    /// Whether the whole dataset fits the budget (false while its size is unknown).
    pub(crate) fn holds_everything(&self) -> bool {
        let data = self.data.load(Ordering::Relaxed);
        data > 0 && data <= self.limit()
    }

    /// Record bytes held now (fetched or on their way).
    pub fn held(&self) -> u64 {
        self.held.load(Ordering::Relaxed)
    }

    /// Says how many bytes a loader's read-ahead keeps on their way or come and not yet
    /// read (its window: batches times their bytes). While it streams, the ranges kept
    /// after a read took them get what is left of the budget.
    pub fn set_read_ahead(&self, bytes: u64) {
        self.ahead.store(bytes, Ordering::Relaxed);
    }

    /// Whether a file of `bytes` may be fetched whole, the first time one of its records is
    /// wanted while a loader streams the dataset (it reads every record), in a cache that
    /// does not hold the dataset: what small files took so far, with this one, stays
    /// within a sixteenth of the budget. A shard's labels take a few kilobytes each; a
    /// dataset of many shards of a few megabytes each, read in a shuffled order, must not
    /// fetch a shard whole for each record it reads.
    fn take_whole(&self, bytes: u64) -> bool {
        let cap = self.limit() / 16;
        let grant = |taken: u64| (taken + bytes <= cap).then_some(taken + bytes);
        self.whole_files.fetch_update(Ordering::Relaxed, Ordering::Relaxed, grant).is_ok()
    }

    /// What part of the room a look drops (1/`n`): half while a loader streams through a
    /// cache smaller than an eighth of the dataset, a fifth through a larger one, a tenth
    /// for direct reads.
    ///
    /// A look visits every kept range, so the more it drops the rarer and cheaper looks
    /// are: a 10% cache at 0 ms spent a tenth of its CPU on looks dropping a fifth each.
    /// But what a look drops is what later epochs would have found: a cache of half the
    /// dataset dropping half its room per look kept about three quarters of it on average,
    /// and fetched 0.60-0.70x of the dataset per epoch after the first (0.50-0.52x dropping
    /// a fifth; the optimum is 0.5x). A small cache's epochs barely meet again (a 10%
    /// cache fetches about 0.9x in every epoch, whatever it keeps), so it drops half.
    fn dropped_per_look(&self, streaming: bool) -> u64 {
        match streaming {
            false => 10,
            true if self.far_smaller() => 2,
            true => 5,
        }
    }

    /// Whether the budget is under an eighth of the dataset's bytes: its epochs barely
    /// meet again, and what it keeps after a read is mostly read again only next epoch.
    fn far_smaller(&self) -> bool {
        let data = self.data.load(Ordering::Relaxed);
        data > 0 && self.limit() < data / 8
    }

    /// Installs (or, with `None`, removes) the plan eviction follows.
    pub fn set_plan(&self, plan: Option<ReadPlan>) {
        *self.plan.write().unwrap_or_else(|p| p.into_inner()) = plan;
        self.keep_any();
    }

    /// Forgets where the last look drew the line ([`Cache::keep_before`]), after any look
    /// in progress (which would draw it again from the plan it started with).
    fn keep_any(&self) {
        let _looks = lock(&self.evicting);
        self.keep_before.store(u64::MAX, Ordering::Relaxed);
    }

    /// Marks `fleeting` the ranges of one record (of a file whose record `i` is sample
    /// `base + i`) that are next needed, after the read they are fetched for, no sooner
    /// than the nearest range the last look dropped: the next look would drop them before
    /// anything it kept, so they go as soon as a read took them.
    ///
    /// A look drops the ranges needed furthest ahead and keeps those needed soonest; a
    /// range needed later than every range it kept stays the first to go until the stream
    /// reaches that line (then the ranges it kept have been read again, and every range
    /// is kept until the next look draws it anew). In a cache far smaller than the
    /// dataset most ranges lie beyond the line, and kept until a look, each was visited,
    /// ranked and removed with the rest: a 10% cache at 0 ms read 0.69-0.71x of a whole
    /// cache's samples/s, 0.72-0.74x marking them (the two builds in turn, one sitting).
    ///
    /// Their next use is asked from the horizon on: the use they are fetched for lies
    /// before it (a batch being gathered, or one being announced: the read-ahead moves the
    /// horizon past its window before it announces it). Marked when sent, a range is asked
    /// once, with the others of its request batch, under one lock of the plan. A record
    /// used again between its read and the horizon (at an epoch's turn, within the few
    /// batches the sampler runs ahead) is fetched again for that use.
    ///
    /// Only a cache far smaller than the dataset marks ([`Cache::far_smaller`]): with half
    /// the dataset cached behind a read-ahead, marked ranges made each later epoch fetch
    /// 0.60-0.61x of the dataset instead of 0.55-0.58x (a line drawn for a long stretch of
    /// the stream holds back ranges a later look would have kept).
    fn mark_fleeting(&self, ranges: &mut [Range], base: u64) {
        let before = self.keep_before.load(Ordering::Relaxed);
        if before == u64::MAX || !self.far_smaller() {
            return;
        }
        let plan = self.plan.read().unwrap_or_else(|p| p.into_inner());
        let Some(plan) = plan.as_ref() else { return };
        let from = plan.horizon();
        if from >= before {
            // The stream reached the line: what the look kept has been read again.
            let _ = self.keep_before.compare_exchange(before, u64::MAX, Ordering::Relaxed, Ordering::Relaxed);
            return;
        }
        // (position in `ranges`, sample) of the ranges of one record.
        let (at, samples): (SmallVec<[usize; 16]>, SmallVec<[u64; 16]>) = ranges
            .iter()
            .enumerate()
            .filter_map(|(k, r)| match r.2[..] {
                [index] => Some((k, base + u64::from(index))),
                _ => None,
            })
            .unzip();
        let mut uses: SmallVec<[Option<u64>; 16]> = SmallVec::from_elem(None, samples.len());
        plan.next_uses_from(from, &samples, &mut uses);
        for (k, used) in at.into_iter().zip(uses) {
            ranges[k].3 = used.is_some_and(|next| next >= before);
        }
    }

    fn register(&self, file: &Arc<FileSpans>) {
        let mut files = lock(&self.files);
        files.retain(|w| w.strong_count() > 0);
        files.push(Arc::downgrade(file));
    }

    /// Bytes held that eviction counts against the budget: while a loader streams, the
    /// ranges no read took yet and those the read-ahead reads again are the read-ahead's
    /// (see [`Cache::evict`]).
    fn counted(&self, streaming: bool) -> u64 {
        let held = self.held();
        match streaming {
            true => held
                .saturating_sub(self.untaken.load(Ordering::Relaxed))
                .saturating_sub(self.shielded.load(Ordering::Relaxed)),
            false => held,
        }
    }

    /// Settles the count of untaken bytes for a range leaving the cache (or taken by a
    /// read): only the first of the two counts, which is told so.
    fn release(&self, fetch: &Pending, len: u64) -> bool {
        let first = fetch.claim();
        if first {
            self.untaken.fetch_sub(len, Ordering::Relaxed);
        }
        first
    }

    /// Drops ranges until the counted bytes are a part of the room below it (a half, a
    /// fifth or a tenth: [`Cache::dropped_per_look`]):
    /// furthest next use first (ranges no plan knows, and every range without a plan,
    /// oldest first). Ranges still
    /// on their way stay. While a loader streams the dataset, ranges no read has taken yet
    /// (on their way, or come and not yet read: the read-ahead's and the batches being
    /// gathered) stay too, and are not counted: the read-ahead's window has its own share
    /// of the budget ([`Cache::set_read_ahead`]), and the ranges a read took are held to
    /// the rest. Counting the untaken ones as they come (the batches being gathered and
    /// requests that overlap vary) dropped the ranges a read was about to take, and a 10%
    /// cache at 20 ms fetched a tenth of each batch again, one record at a time, at 0.03x
    /// of its bound. When the loader stops, they are dropped like the others.
    ///
    /// A look visits every kept range (some 2,000 in a 10% cache of 12 KiB records), so
    /// looks are rare: the untaken bytes are counted as ranges come and go, a look starts
    /// only when the counted bytes pass the budget, and a small cache's drops half of it.
    /// (A fifth made a look every fifth of the budget: each kept range was visited about
    /// five times before it went, and the looks were a tenth of a small cache's CPU at
    /// 0 ms; what a small cache keeps after a read is mostly what it reads again only next
    /// epoch. A large one's kept ranges are its later epochs' hits: it drops a fifth.)
    fn evict(&self) {
        let limit = self.limit();
        let streaming = self.streamed();
        // Streaming, the read-ahead's window has its share of the budget; the ranges kept
        // after a read get the rest.
        let room = if streaming { limit.saturating_sub(self.ahead.load(Ordering::Relaxed)) } else { limit };
        if self.counted(streaming) <= room.max(self.look_above.load(Ordering::Relaxed)) {
            return;
        }
        let Ok(_one) = self.evicting.try_lock() else { return };
        let plan = self.plan();
        let files: Vec<Arc<FileSpans>> = lock(&self.files).iter().filter_map(Weak::upgrade).collect();
        let now = plan.as_ref().map(ReadPlan::now);
        // Without a plan nothing is announced ahead: 0 protects nothing.
        let horizon = plan.as_ref().map_or(0, ReadPlan::horizon);
        // (next use, file, start, seq, bytes) of the ranges that may go.
        let mut candidates: Vec<(u64, usize, u64, u64, u64)> = Vec::new();
        let mut shielded = 0u64;
        for (k, f) in files.iter().enumerate() {
            let mut spans = lock(&f.spans);
            for (&start, span) in &mut spans.map {
                // Not taken by a read: on its way (a read waits for it), or, without a
                // loader, come and free to go.
                if !span.taken {
                    if span.fetch.taken() {
                        span.taken = true;
                    } else if streaming || span.fetch.peek().is_none() {
                        continue;
                    }
                }
                let key = match (&plan, now) {
                    (Some(p), Some(now)) => {
                        let base = f.base;
                        span.next.get(p, now, span.records.learnt(), |i| base + u64::from(i))
                    }
                    _ => u64::MAX - span.seq,
                };
                if streaming && key < horizon {
                    // Taken, but a batch announced ahead reads it again: the read-ahead's.
                    shielded += span.end - start;
                    continue;
                }
                candidates.push((key, k, start, span.seq, span.end - start));
            }
        }
        self.shielded.store(if streaming { shielded } else { 0 }, Ordering::Relaxed);
        let target = room - room / self.dropped_per_look(streaming);
        // The furthest first, until what goes brings the count to the target; then file by
        // file, each file's ranges taken under one lock and freed after it (a lock per
        // range, with the range freed under it, kept the readers of the file waiting).
        let need = self.counted(streaming).saturating_sub(target);
        let going = furthest_until(&mut candidates, need, |c| (c.0, c.4));
        if let (true, Some(nearest)) = (streaming && plan.is_some(), going.checked_sub(1)) {
            self.keep_before.store(candidates[nearest].0, Ordering::Relaxed);
        }
        // Grouped by file in one pass (sorting them by file showed beside the selection in
        // a small cache's profile).
        let mut by_file: Vec<Vec<(u64, u64)>> = vec![Vec::new(); files.len()];
        for &(_, k, start, seq, _) in &candidates[..going] {
            by_file[k].push((start, seq));
        }
        let mut gone = Vec::new();
        for (k, going) in by_file.iter().enumerate().filter(|(_, g)| !g.is_empty()) {
            let mut spans = lock(&files[k].spans);
            for &(start, seq) in going {
                // Found and removed with one search of the file's ranges.
                if let Entry::Occupied(kept) = spans.map.entry(start) {
                    if kept.get().seq != seq {
                        continue; // replaced since the look
                    }
                    let span = kept.remove();
                    self.release(&span.fetch, span.end - start);
                    self.held.fetch_sub(span.end - start, Ordering::Relaxed);
                    gone.push(span);
                }
            }
            drop(spans);
            gone.clear();
        }
        // What could not be dropped (on its way, about to be read) is not looked at again
        // on every read: the next look waits for a tenth of the budget more.
        let left = self.counted(streaming);
        self.look_above.store(if left > room { left + limit / 10 } else { 0 }, Ordering::Relaxed);
    }
}

/// Puts the items of `items` with the largest keys first, in descending order of key, as
/// many as it takes for their sizes to reach `need` (or all of them), and says how many.
/// `of` gives an item's key and size.
///
/// A look drops about half of what the cache holds, and sorting every kept range for it
/// showed in a small cache's profile: the furthest are selected first (linear) and only
/// they are sorted, a selection of twice as many taken when the first falls short.
fn furthest_until<T>(items: &mut [T], need: u64, of: impl Fn(&T) -> (u64, u64)) -> usize {
    if need == 0 || items.is_empty() {
        return 0;
    }
    let furthest_first = |a: &T, b: &T| of(b).0.cmp(&of(a).0);
    let total: u64 = items.iter().map(|c| of(c).1).sum();
    let mean = (total / items.len() as u64).max(1);
    // A quarter more than the mean size says, so one selection usually does.
    let mut k = (need.div_ceil(mean) + need.div_ceil(mean) / 4 + 8) as usize;
    let len = items.len();
    loop {
        if k < len {
            items.select_nth_unstable_by(k, furthest_first);
        }
        let chosen = &mut items[..k.min(len)];
        if k >= len || chosen.iter().map(|c| of(c).1).sum::<u64>() >= need {
            chosen.sort_unstable_by(furthest_first);
            let (mut going, mut bytes) = (0, 0);
            while going < chosen.len() && bytes < need {
                bytes += of(&chosen[going]).1;
                going += 1;
            }
            return going;
        }
        k *= 2;
    }
}

/// One fetched (or pending) range and the records it holds.
struct Span {
    end: u64,
    fetch: Fetch,
    /// The store's record indices inside, when the reads announced them.
    records: Records,
    /// The soonest next use of those records, as the plan last said.
    next: NextUse,
    seq: u64,
    /// A look saw a read take the range (which it never untakes): later looks do not
    /// reach into its slot again, a cache miss per kept range per look.
    taken: bool,
    /// Dropped once a read took it ([`Cache::mark_fleeting`]).
    fleeting: bool,
}

/// A range to request: `start..end`, the store's record indices inside, and whether it
/// goes once a read took it ([`Cache::mark_fleeting`]).
type Range = (u64, u64, Indices, bool);

/// The store's record indices a range holds, as reads announced them: in the order learnt
/// (a [`NextUse`] counts them in that order), and, past a few, sorted beside it. Every
/// announcement of a held record asks whether its range knows it: a range of labels holds
/// thousands, and a search through them all for each announced label cost more than the
/// rest of the announcement.
struct Records {
    learnt: Indices,
    /// `learnt` sorted, once it is longer than [`Records::FEW`] (empty until then).
    sorted: Vec<u32>,
}

impl Records {
    /// Up to this many, a search through `learnt` is quicker than keeping `sorted`.
    const FEW: usize = 16;

    /// The records of a request, in the order of their offsets.
    fn new(indices: Indices) -> Records {
        let mut records = Records { learnt: Indices::new(), sorted: Vec::new() };
        for i in indices {
            records.learn(i);
        }
        records
    }

    /// The indices, in the order learnt.
    fn learnt(&self) -> &[u32] {
        &self.learnt
    }

    /// Adds `index` if it is not known yet, and says whether it was not.
    fn learn(&mut self, index: u32) -> bool {
        if self.learnt.len() <= Self::FEW {
            if self.learnt.contains(&index) {
                return false;
            }
            self.learnt.push(index);
            if self.learnt.len() > Self::FEW {
                self.sorted = self.learnt.to_vec();
                self.sorted.sort_unstable();
            }
            return true;
        }
        match self.sorted.binary_search(&index) {
            Ok(_) => false,
            Err(at) => {
                self.sorted.insert(at, index);
                self.learnt.push(index);
                true
            }
        }
    }
}

/// Ranges of a file fetched or on their way, by start offset.
#[derive(Default)]
struct Spans {
    map: BTreeMap<u64, Span>,
    /// Ranges announced by `will_need_record` and not yet requested, with their record.
    wanted: Vec<(u64, u64, Option<u32>)>,
    /// The longest range ever kept: how far before an offset a range holding it can start.
    longest: u64,
    /// Whether the file was considered for a whole fetch ([`Cache::take_whole`]) already:
    /// once, whatever the answer (a file dropped later comes back record by record).
    whole_asked: bool,
}

/// A file's ranges, registered with its dataset's [`Cache`].
#[derive(Default)]
pub struct FileSpans {
    spans: Mutex<Spans>,
    /// The dataset index of the store's record 0 (its shard's first sample).
    base: u64,
}

/// A pushed file: ranged GETs with `If-Match`, zeros past the stored bytes.
pub struct RemoteFile {
    object: Object,
    metadata: bool,
    spans: Arc<FileSpans>,
    cache: Arc<Cache>,
    /// Where its requests go, made once: a small cache sends a batch's requests file by
    /// file, and building these for each (a path joined, a URL formatted, strings
    /// cloned) was done holding the file's ranges, which the readers wait on.
    to: Arc<Target>,
}

/// Where a file's requests go ([`RemoteFile::to`]).
struct Target {
    remote: Remote,
    path: object_store::path::Path,
    /// The version listed, sent as `If-Match`.
    etag: Option<String>,
    /// The file's URL, for errors.
    shown: String,
}

impl RemoteFile {
    /// The file `name` of `remote` as `object` lists it; `metadata` files are read in
    /// whole blocks and kept apart, the others share `cache`, in which the file's record
    /// `i` is dataset sample `base + i`.
    pub fn new(remote: Remote, name: &str, object: Object, metadata: bool, cache: Arc<Cache>, base: u64) -> RemoteFile {
        let spans = Arc::new(FileSpans { spans: Mutex::new(Spans::default()), base });
        if !metadata {
            cache.register(&spans);
        }
        let (path, shown) = (remote.path(name), remote.shown(name));
        let to = Arc::new(Target { remote, path, etag: object.etag.clone(), shown });
        RemoteFile { object, metadata, spans, cache, to }
    }

    fn shown(&self) -> &str {
        &self.to.shown
    }

    /// Starts fetching `start..end` (within the stored bytes) and records it, with the
    /// records it holds. The request comes back beside the slot if the reading thread is
    /// to send it itself ([`Sending::ByReader`]).
    fn spawn(
        &self,
        spans: &mut Spans,
        start: u64,
        end: u64,
        indices: Indices,
        when: Sending,
    ) -> (Fetch, Option<Sends>) {
        let (mut sent, here) = self.send(spans, vec![(start, end, indices, false)], when);
        (sent.pop().expect("one range sent"), here)
    }

    /// Starts fetching each of `ranges` (`start..end` within the stored bytes, and the
    /// records inside) and records them. One task sends them all (see [`super::pending`]);
    /// the slots come back in the order of `ranges`. For a reader waiting on them from a
    /// store asked inline ([`Sending::ByReader`]), the requests come back instead, for the
    /// reading thread to send once it let go of `spans` ([`send_here`]).
    fn send(&self, spans: &mut Spans, ranges: Vec<Range>, when: Sending) -> (Vec<Fetch>, Option<Sends>) {
        // Bytes on disk from an earlier fetch (this run's or another's) are read there.
        let disk = self.cache.disk().map(|d| (d.clone(), DiskCache::key(&self.object)));
        let plan = disk.as_ref().and_then(|_| self.cache.plan());
        let mut slots = Vec::with_capacity(ranges.len());
        let mut jobs = Vec::with_capacity(ranges.len());
        for (start, end, indices, fleeting) in ranges {
            if let Some((d, bytes)) = disk.as_ref().and_then(|(d, key)| Some((d, d.get(key, start, end)?))) {
                d.publish(self.to.remote.stats());
                slots.push(self.keep(spans, (start, end, indices, fleeting), Pending::ready(Ok(bytes))));
                continue;
            }
            let samples = disk.as_ref().map(|_| indices.iter().map(|&i| self.spans.base + u64::from(i)).collect());
            let slot = self.keep(spans, (start, end, indices, fleeting), Pending::new());
            jobs.push((start, end, samples, Answering(Arc::clone(&slot))));
            slots.push(slot);
        }
        if jobs.is_empty() {
            return (slots, None);
        }
        let metadata = self.metadata;
        let to = Arc::clone(&self.to);
        let inline = matches!(when, Sending::ByReader) && self.to.remote.answers_inline();
        let sends = async move {
            let Target { remote, path, etag, shown } = &*to;
            let fetches = jobs.into_iter().map(|(start, end, samples, answering): (u64, u64, Option<Vec<u64>>, _)| {
                let (disk, plan) = (&disk, &plan);
                async move {
                    let answer = fetch_range(remote, path, etag, shown, start, end, inline).await;
                    if let (Ok(bytes), Some((disk, key)), Some(samples)) = (&answer, disk, samples) {
                        disk.publish(remote.stats());
                        disk.put(key, start, bytes, samples, metadata, plan.as_ref());
                    }
                    answering.0.set(answer.map_err(Arc::new));
                }
            });
            // All at once: each waits for its turn at the store's gate and a read permit
            // (asked inline, none waits).
            futures::future::join_all(fetches).await;
        };
        let here = match when {
            Sending::ByReader if inline => Some(futures::FutureExt::boxed(sends)),
            Sending::Now | Sending::ByReader => {
                drop(super::runtime().spawn(sends));
                None
            }
            Sending::Together => {
                spawn_sends(sends);
                None
            }
        };
        (slots, here)
    }

    /// Records `fetch` as the span `start..end` holding records `indices`.
    fn keep(&self, spans: &mut Spans, (start, end, indices, fleeting): Range, fetch: Fetch) -> Fetch {
        let seq = self.cache.seq.fetch_add(1, Ordering::Relaxed);
        spans.longest = spans.longest.max(end - start);
        if !self.metadata {
            self.cache.held.fetch_add(end - start, Ordering::Relaxed);
            self.cache.untaken.fetch_add(end - start, Ordering::Relaxed);
        }
        if let Some(old) = spans.map.insert(
            start,
            Span {
                end,
                fetch: fetch.clone(),
                records: Records::new(indices),
                next: NextUse::default(),
                seq,
                taken: false,
                fleeting,
            },
        ) {
            if !self.metadata {
                self.cache.release(&old.fetch, old.end - start);
                self.cache.held.fetch_sub(old.end - start, Ordering::Relaxed);
            }
        }
        fetch
    }

    /// Sends the announced ranges, merged (or gives the requests back, as
    /// [`RemoteFile::send`] does).
    fn flush_wanted(&self, spans: &mut Spans, when: Sending) -> Option<Sends> {
        let mut wanted = std::mem::take(&mut spans.wanted);
        wanted.sort_unstable();
        let gap = self.to.remote.merge_gap();
        // Bytes brought along are bytes the cache must hold. Unless the whole dataset fits,
        // a request spans at most 1/32 of the cache, and a gap is bridged only if no longer
        // than the range after it, so at least half of what comes back was asked for.
        // (Against a store that answers at memory speed the measured gap is the 4 MiB cap:
        // without these bounds a batch of 256 random 12 KiB records fetched whole 16 MiB
        // spans and a cache of half the dataset took in 4x the dataset per epoch.) A cache
        // that holds everything, under a loader that will read everything, keeps every byte
        // it brings along and uses it, so it bridges the largest
        // gap whatever was measured: measured from the small requests of records read one
        // by one, the gap stayed small, and a first epoch at 20 ms a request made one
        // request per record (4,917 for 8,000 records of 4 KiB; 10 now).
        let whole = self.cache.brings_along();
        let span_cap = if whole { MAX_SPAN } else { MAX_SPAN.min(self.cache.limit() / 32) };
        // A run of neighbours every byte of which was asked for brings nothing along: it
        // may span an eighth of the cache (a block shuffle's block, announced whole, went
        // out in twelve-sample requests under a 2% cache's 32nd).
        let run_cap = if whole { MAX_SPAN } else { MAX_SPAN.min(self.cache.limit() / 8) };
        // A file no larger than one request may be (a shard's labels: 8 bytes a sample)
        // is read whole too, once, while a loader streams and small files take little of
        // the budget ([`Cache::take_whole`]): the loader will read every record of it.
        // Asked for record by record, the labels of a batch came in holes the earlier
        // requests left, a request each: 8% of a 10% cache's requests.
        let small = !whole && self.cache.streamed() && !spans.whole_asked && self.object.stored <= span_cap;
        let roomy = whole || (small && self.cache.take_whole(self.object.stored));
        spans.whole_asked |= small;
        // A run: its start, its end, its records, and whether it bridged a gap.
        let mut run: Option<(u64, u64, Indices, bool)> = None;
        let mut ranges = Vec::new();
        for (s, e, index) in wanted {
            if let Some((held, ..)) = covering(spans, s, e) {
                // Held already, perhaps brought along by a neighbour's request: the range
                // counts this record's next use from now on, or eviction would not see it
                // and would drop what a batch just ahead needs.
                if let (Some(i), Some(span)) = (index, spans.map.get_mut(&held)) {
                    // Another record of it wanted: the mark judged one record's use, so the
                    // looks judge the range now. (The same record announced again, as a
                    // gather does for the batch the read-ahead announced, is the same use.)
                    if span.records.learn(i) {
                        span.fleeting = false;
                    }
                }
                continue;
            }
            run = match run {
                // A gap is bridged only where no kept range lies: bytes held already are
                // not fetched again.
                Some((rs, re, mut ix, bridged))
                    if s <= re + if roomy { MAX_GAP } else { gap.min(e - s).max(TINY_GAP) }
                        && e.max(re) - rs <= if bridged || s > re { span_cap } else { run_cap }
                        && (s <= re || spans.map.range(re..s).next().is_none()) =>
                {
                    ix.extend(index);
                    Some((rs, e.max(re), ix, bridged || s > re))
                }
                Some((rs, re, ix, _)) => {
                    ranges.push((rs, re, ix, false));
                    // A roomy cache tiles: the next request starts where the capped one
                    // ended, so no record between them is left to a request of its own.
                    let from = if roomy && re < s && bridgeable(spans, re, s) { re } else { s };
                    Some((from, e, index.into_iter().collect(), from < s))
                }
                // ... and reaches back to the start of the file,
                None => {
                    let from = if roomy && bridgeable(spans, 0, s) { 0 } else { s };
                    Some((from, e, index.into_iter().collect(), from < s))
                }
            };
        }
        if let Some((rs, mut re, ix, _)) = run {
            // ... and on to its end.
            let stored = self.object.stored;
            if roomy && re < stored && stored - rs <= span_cap && bridgeable(spans, re, stored) {
                re = stored;
            }
            ranges.push((rs, re, ix, false));
        }
        if !roomy {
            // (A roomy request reaches out to the file's ends: more than its records.)
            self.cache.mark_fleeting(&mut ranges, self.spans.base);
        }
        // One task sends them all; a read waits for its own.
        self.send(spans, ranges, when).1
    }

    /// Drops the range at `start`, if it is still `fetch`'s: a read took it, and the cache
    /// would not keep it ([`Cache::mark_fleeting`]).
    fn drop_taken(&self, start: u64, fetch: &Fetch) {
        let mut spans = lock(&self.spans.spans);
        let Entry::Occupied(kept) = spans.map.entry(start) else { return };
        // Still marked: another record of it may have been wanted since the read looked.
        if Arc::ptr_eq(&kept.get().fetch, fetch) && kept.get().fleeting {
            let span = kept.remove();
            drop(spans);
            self.cache.held.fetch_sub(span.end - start, Ordering::Relaxed);
        }
    }

    /// Copies `start..start + buf.len()` (within the stored bytes) into `buf`.
    fn read_stored(&self, start: u64, buf: &mut [u8]) -> Result<(), IoError> {
        let end = start + buf.len() as u64;
        let mut at = start;
        while at < end {
            // Requests this thread sends itself (a store asked inline), after the lock.
            let mut here: SmallVec<[Sends; 2]> = SmallVec::new();
            let (span_start, span_end, fetch, fleeting) = {
                let mut spans = lock(&self.spans.spans);
                if !spans.wanted.is_empty() {
                    // This read waits for one of them: sent now.
                    here.extend(self.flush_wanted(&mut spans, Sending::ByReader));
                }
                match covering(&spans, at, at + 1) {
                    Some(held) => {
                        self.to.remote.stats().hits.fetch_add(1, Ordering::Relaxed);
                        held
                    }
                    None => {
                        let (s, e) = if self.metadata {
                            let s = at / META_BLOCK * META_BLOCK;
                            (s, (s + META_BLOCK).min(self.object.stored))
                        } else {
                            (at, end)
                        };
                        let (fetch, sends) = self.spawn(&mut spans, s, e, Indices::new(), Sending::ByReader);
                        here.extend(sends);
                        (s, e, fetch, false)
                    }
                }
            };
            here.into_iter().for_each(send_here);
            if !self.metadata {
                if self.cache.release(&fetch, span_end - span_start) && fleeting {
                    self.drop_taken(span_start, &fetch);
                }
                self.cache.evict();
            }
            // Only a read whose bytes are still on their way is timed (a hit is not).
            let waited = fetch.peek().is_none().then(std::time::Instant::now);
            let bytes = fetch.wait().map_err(|e| (*e).clone())?;
            if waited.is_some_and(|w| w.elapsed() > super::STALL) {
                self.to.remote.stats().stalls.fetch_add(1, Ordering::Relaxed);
            }
            let from = (at - span_start) as usize;
            let n = (bytes.len() - from).min((end - at) as usize);
            let out = (at - start) as usize;
            buf[out..out + n].copy_from_slice(&bytes[from..from + n]);
            at += n as u64;
        }
        Ok(())
    }
}

/// When a file's requests go to the runtime.
#[derive(Clone, Copy)]
enum Sending {
    /// At once.
    Now,
    /// At once, for a reader that waits for them: a store asked inline
    /// ([`super::asked_inline`]) gets them from the reading thread itself.
    ByReader,
    /// With the rest of the batch being announced ([`sending_together`]): nobody waits
    /// for them before the announcement ends.
    Together,
}

/// Sends `sends` and waits for their answers on this thread (a store asked inline:
/// [`super::asked_inline`]). A thread that drives an async runtime must not block on one:
/// there they go to the remote runtime as any other requests, and the read waits on its
/// slot.
fn send_here(sends: Sends) {
    match tokio::runtime::Handle::try_current() {
        Ok(_) => drop(super::runtime().spawn(sends)),
        Err(_) => super::runtime().block_on(sends),
    }
}

std::thread_local! {
    /// The sends of a [`sending_together`] call in progress on this thread.
    static TOGETHER: std::cell::RefCell<Option<Vec<futures::future::BoxFuture<'static, ()>>>> =
        const { std::cell::RefCell::new(None) };
}

/// Runs `sends` on the remote runtime: in the task of the [`sending_together`] call in
/// progress on this thread, if there is one, or in a task of its own.
fn spawn_sends(sends: impl std::future::Future<Output = ()> + Send + 'static) {
    use futures::FutureExt;
    let sends = TOGETHER.with(|t| match t.borrow_mut().as_mut() {
        Some(together) => {
            together.push(sends.boxed());
            None
        }
        None => Some(sends),
    });
    if let Some(sends) = sends {
        super::runtime().spawn(sends);
    }
}

/// Runs `announce` (a batch's announcements over many files) and sends the requests it
/// makes from one task: one wake of the runtime per batch rather than one per file (a
/// small cache's batch of 64 touched 16 files; the wakes were a tenth of its CPU).
pub fn sending_together<R>(announce: impl FnOnce() -> R) -> R {
    /// Spawns what was gathered, also when `announce` unwinds.
    struct Flush;
    impl Drop for Flush {
        fn drop(&mut self) {
            let Some(gathered) = TOGETHER.with(|t| t.borrow_mut().take()) else { return };
            if !gathered.is_empty() {
                super::runtime().spawn(futures::future::join_all(gathered));
            }
        }
    }
    // Only the outermost call sends; a nested one adds to it.
    let outer = TOGETHER.with(|t| {
        let mut t = t.borrow_mut();
        t.is_none().then(|| *t = Some(Vec::new())).is_some()
    });
    let _flush = outer.then_some(Flush);
    announce()
}

/// GETs `start..end` of the object at `path` (the version `etag`, when known), retried as
/// `remote` says, timed from the read permit on (waiting for one is not the store's
/// latency) and counted.
///
/// Asked `inline` (by a reading thread that waits for it: [`super::asked_inline`]), a
/// request passes neither the store's gate nor a read permit: the readers ask the store
/// themselves, a batch's records each, and the store answers before requests could queue
/// in it (if it slows down, its round trip grows and its requests go back through the
/// runtime, gate and permits). The gate's two locks a request, taken by every reading
/// thread at once, were a cost of their own.
async fn fetch_range(
    remote: &Remote,
    path: &object_store::path::Path,
    etag: &Option<String>,
    shown: &str,
    start: u64,
    end: u64,
    inline: bool,
) -> Result<Bytes, IoError> {
    let (pass, _permit) = match inline {
        true => (None, None),
        false => (Some(remote.gate().enter().await), Some(super::read_permit().await)),
    };
    let began = std::time::Instant::now();
    // Spelled out only for an error: formatting it for every request of a small cache cost
    // as much as the in-memory store's answer.
    let what = ReadOf { shown, start, end };
    let (bytes, tag) = remote
        .retrying_from(began, &what, || {
            let options = GetOptions {
                range: Some(GetRange::Bounded(start..end)),
                if_match: etag.clone(),
                ..GetOptions::default()
            };
            let client = remote.client().clone();
            async move {
                let mut got = client.get_opts(path, options).await?;
                let tag = got.meta.e_tag.take();
                Ok((got.bytes().await?, tag))
            }
        })
        .await?;
    // A store that ignores If-Match still says which version it sent.
    if let (Some(want), Some(got)) = (etag, &tag) {
        if want != got {
            return Err(IoError::new(IoErrorKind::Other, what.to_string(), super::CHANGED));
        }
    }
    if bytes.len() as u64 != end - start {
        return Err(IoError::new(
            IoErrorKind::UnexpectedEof,
            what.to_string(),
            format!("{} bytes came back: the object is shorter than its listing says", bytes.len()),
        ));
    }
    let took = began.elapsed();
    if let Some(pass) = pass {
        pass.answered(bytes.len() as u64, took);
    }
    remote.stats().bytes.fetch_add(bytes.len() as u64, Ordering::Relaxed);
    remote.observe(bytes.len() as u64, took);
    Ok(bytes)
}

/// What a ranged read is, for its errors: "read FILE bytes START..END".
struct ReadOf<'a> {
    shown: &'a str,
    start: u64,
    end: u64,
}

impl std::fmt::Display for ReadOf<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "read {} bytes {}..{}", self.shown, self.start, self.end)
    }
}

/// Whether a roomy cache's request may take in `from..to` besides what was asked: no more
/// than [`MAX_GAP`], and no kept range starts inside it (held bytes are not fetched again).
fn bridgeable(spans: &Spans, from: u64, to: u64) -> bool {
    to.saturating_sub(from) <= MAX_GAP && spans.map.range(from..to).next().is_none()
}

/// The fetched or pending range holding `start..end`, if one does. Ranges may overlap (a
/// read asks for all it misses, whatever lies inside), so a range that starts earlier may
/// hold what the nearest one does not: every range that could reach `start` is looked at.
fn covering(spans: &Spans, start: u64, end: u64) -> Option<(u64, u64, Fetch, bool)> {
    let reach = start.saturating_sub(spans.longest);
    spans
        .map
        .range(reach..=start)
        .rev()
        // A forked child does not wait for its parent's requests: it sends its own.
        .find(|(_, span)| span.end >= end && !span.fetch.orphaned())
        .map(|(&s, span)| (s, span.end, span.fetch.clone(), span.fleeting))
}

impl StorageFile for RemoteFile {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), IoError> {
        let end = offset.checked_add(buf.len() as u64).filter(|&e| e <= self.object.size).ok_or_else(|| {
            IoError::new(
                IoErrorKind::UnexpectedEof,
                format!("read {} at {offset}", self.shown()),
                format!("past the end of the file ({} bytes)", self.object.size),
            )
        })?;
        let stored = self.object.stored;
        let split = (stored.clamp(offset, end) - offset) as usize;
        buf[split..].fill(0); // past the stored bytes: the file's hole
        if split > 0 {
            self.read_stored(offset, &mut buf[..split])?;
        }
        Ok(())
    }

    fn write_at(&self, offset: u64, _buf: &[u8]) -> Result<(), IoError> {
        Err(read_only(&format!("write {} at {offset}", self.shown())))
    }

    fn len(&self) -> Result<u64, IoError> {
        Ok(self.object.size)
    }

    fn set_len(&self, _len: u64) -> Result<(), IoError> {
        Err(read_only(&format!("resize {}", self.shown())))
    }

    fn sync(&self) -> Result<(), IoError> {
        Ok(())
    }

    fn resident(&self, offset: u64) -> bool {
        offset >= self.object.stored || covering(&lock(&self.spans.spans), offset, offset + 1).is_some()
    }

    fn will_need(&self, offset: u64, len: u64) {
        let end = offset.saturating_add(len).min(self.object.stored);
        if offset < end {
            lock(&self.spans.spans).wanted.push((offset, end, None));
        }
    }

    fn will_need_record(&self, offset: u64, len: u64, index: u32) {
        self.will_need_records(&[(offset, len, index)]);
    }

    fn will_need_records(&self, records: &[(u64, u64, u32)]) {
        let stored = self.object.stored;
        let mut spans = lock(&self.spans.spans);
        for &(offset, len, index) in records {
            let end = offset.saturating_add(len).min(stored);
            if offset < end {
                spans.wanted.push((offset, end, Some(index)));
            }
        }
    }

    fn wants_hints(&self) -> bool {
        true
    }

    fn start_reads(&self) {
        let mut spans = lock(&self.spans.spans);
        if !spans.wanted.is_empty() {
            // Announced, not waited for: only a reader's requests come back to send.
            let here = self.flush_wanted(&mut spans, Sending::Together);
            debug_assert!(here.is_none());
        }
    }
}

fn read_only(what: &str) -> IoError {
    IoError::new(IoErrorKind::PermissionDenied, what, "a remote dataset is read-only (push a new one to change it)")
}

/// A pushed store directory: its files as the listing names them.
pub struct RemoteDir {
    remote: Remote,
    /// The dataset's root, where an object's [`Object::key`] is.
    root: Remote,
    /// The directory's files, by name.
    files: HashMap<String, Object>,
    cache: Arc<Cache>,
    base: u64,
    /// Metadata files whose first block is on its way ([`RemoteDir::start_metadata`]),
    /// handed to the first open of each.
    early: Mutex<HashMap<String, RemoteFile>>,
}

impl RemoteDir {
    /// The store directory `dir` (`""` for the root) of the pushed `listing` at `remote`,
    /// with a cache of its own.
    pub fn new(remote: &Remote, listing: &Objects, dir: &str) -> RemoteDir {
        let cache = Cache::new(CACHE_BYTES);
        cache.set_data(listing.stored_bytes());
        Self::cached(remote, listing, dir, cache, 0)
    }

    /// [`RemoteDir::new`], keeping record data in `cache`, where the store's record `i` is
    /// the dataset's sample `base + i`.
    pub fn cached(remote: &Remote, listing: &Objects, dir: &str, cache: Arc<Cache>, base: u64) -> RemoteDir {
        let files = listing.under(dir).into_iter().collect();
        let root = remote.clone();
        let remote = if dir.is_empty() { remote.clone() } else { remote.child(dir) };
        RemoteDir { remote, root, files, cache, base, early: Mutex::new(HashMap::new()) }
    }

    /// The directory's location.
    pub fn remote(&self) -> &Remote {
        &self.remote
    }

    /// Whether the directory holds file `name`.
    pub fn has(&self, name: &str) -> bool {
        self.files.contains_key(name)
    }

    /// File `name` of the directory, read in whole blocks (a side file, a manifest).
    pub fn file(&self, name: &str) -> Option<RemoteFile> {
        self.open(name, true)
    }

    /// Starts fetching the first block of the store's table (`meta.zr`) and of its
    /// checksums (`checksums.zrc`) at once. Opening a store reads the one, then the other:
    /// started together, the two arrive in one round trip instead of two.
    pub fn start_metadata(&self) {
        let mut early = lock(&self.early);
        for name in [zrecord_core::format::META_FILE, zrecord_core::format::sums::SUMS_FILE] {
            let Some(file) = self.new_file(name, true) else { continue };
            let end = META_BLOCK.min(file.object.stored);
            if end > 0 {
                drop(file.spawn(&mut lock(&file.spans.spans), 0, end, Indices::new(), Sending::Now));
                early.insert(name.to_owned(), file);
            }
        }
    }

    fn open(&self, name: &str, metadata: bool) -> Option<RemoteFile> {
        let started = if metadata { lock(&self.early).remove(name) } else { None };
        started.or_else(|| self.new_file(name, metadata))
    }

    fn new_file(&self, name: &str, metadata: bool) -> Option<RemoteFile> {
        self.files.get(name).map(|o| match &o.key {
            Some(key) => RemoteFile::new(self.root.clone(), key, o.clone(), metadata, self.cache.clone(), self.base),
            None => RemoteFile::new(self.remote.clone(), name, o.clone(), metadata, self.cache.clone(), self.base),
        })
    }

    /// Reads file `name` whole, if the directory holds it.
    pub fn read_whole(&self, name: &str) -> Result<Option<Vec<u8>>, IoError> {
        let Some(file) = self.open(name, true) else { return Ok(None) };
        let mut bytes = vec![0u8; file.object.size as usize];
        file.read_at(0, &mut bytes)?;
        Ok(Some(bytes))
    }
}

impl Backend for RemoteDir {
    type File = RemoteFile;

    fn open_meta(&self, create: bool) -> Result<Option<RemoteFile>, IoError> {
        if create && !self.has(zrecord_core::format::META_FILE) {
            return Err(read_only(&format!("create {}", self.remote.shown(zrecord_core::format::META_FILE))));
        }
        Ok(self.open(zrecord_core::format::META_FILE, true))
    }

    fn open_chunk(&self, id: u16, create: bool) -> Result<Option<RemoteFile>, IoError> {
        let name = format!("{id}.zr");
        if create && !self.has(&name) {
            return Err(read_only(&format!("create {}", self.remote.shown(&name))));
        }
        Ok(self.open(&name, false))
    }

    fn open_aux(&self, name: &str, create: bool) -> Result<Option<RemoteFile>, IoError> {
        if create && !self.has(name) {
            return Err(read_only(&format!("create {}", self.remote.shown(name))));
        }
        Ok(self.open(name, true))
    }

    fn remove_chunk(&self, id: u16) -> Result<(), IoError> {
        Err(read_only(&format!("remove {}", self.remote.shown(&format!("{id}.zr")))))
    }

    fn fresh_nonce(&self) -> u64 {
        zrecord_core::io::os_nonce()
    }

    fn sync_dir(&self) -> Result<(), IoError> {
        Ok(())
    }

    fn read_side_file(&self, name: &str) -> Result<Option<Vec<u8>>, IoError> {
        self.read_whole(name)
    }

    fn write_side_file(&self, name: &str, _bytes: &[u8]) -> Result<(), IoError> {
        Err(read_only(&format!("write {}", self.remote.shown(name))))
    }

    fn remove_side_file(&self, name: &str) -> Result<(), IoError> {
        Err(read_only(&format!("remove {}", self.remote.shown(name))))
    }

    fn lock(&self, mode: LockMode) -> Result<(), Error> {
        match mode {
            LockMode::Shared => Ok(()),
            _ => Err(Error::Io(read_only(&format!("change {}", self.remote.url())))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Selecting the furthest ranges takes what sorting them all would: the furthest
    /// first, just enough of them to reach the need (or all), over sizes that vary and keys
    /// that repeat, with needs from nothing to more than everything.
    #[test]
    fn the_furthest_are_chosen_as_a_full_sort_would() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move |below: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % below
        };
        for round in 0..400 {
            let n = next(300) as usize;
            let sizes = if round % 2 == 0 { 4 } else { 5000 };
            let mut items: Vec<(u64, u64)> = (0..n).map(|_| (next(50), 1 + next(sizes))).collect();
            let total: u64 = items.iter().map(|i| i.1).sum();
            let need = next(total + total / 4 + 2);
            let got = furthest_until(&mut items, need, |&(key, size)| (key, size));
            let (chosen, rest) = items.split_at(got);
            let what = format!("round {round}: {n} items, {got} chosen for {need} of {total}");
            assert!(chosen.windows(2).all(|w| w[0].0 >= w[1].0), "{what}: not furthest first");
            let least = chosen.last().map_or(u64::MAX, |c| c.0);
            assert!(rest.iter().all(|r| r.0 <= least), "{what}: a further range was left");
            let bytes: u64 = chosen.iter().map(|c| c.1).sum();
            assert!(bytes >= need.min(total), "{what}: {bytes} bytes fall short");
            let before_last = bytes - chosen.last().map_or(0, |c| c.1);
            assert!(got == 0 || before_last < need, "{what}: one more than needed");
        }
    }

    /// While a loader streams, a look drops half the room of a cache smaller than an
    /// eighth of the dataset and a fifth of a larger one: a cache of half the dataset that
    /// dropped half per look fetched 0.60-0.70x of the dataset per later epoch, not 0.5x.
    #[test]
    fn a_large_cache_drops_a_fifth_per_look_and_a_small_one_half() {
        for (data, left) in [(1_000, 400), (10_000, 250)] {
            let (f, cache) = file(&format!("looks-{data}"), 500);
            cache.set_data(data);
            let _streaming = cache.streaming();
            let mut held = Vec::new();
            for record in 0..100 {
                assert_eq!(read(&f, record), vec![record as u8; 10]);
                held.push(cache.held());
            }
            // Records of 10 bytes, each a request: the first look comes at 510 bytes.
            let first_drop = held.windows(2).find(|w| w[1] < w[0]).map(|w| w[1]);
            assert_eq!(first_drop, Some(left), "data {data}: held after each read {held:?}");
        }
    }

    /// A 100-record file of 10-byte records in a fresh in-memory store, read through a
    /// cache of `limit` bytes.
    fn file(name: &str, limit: u64) -> (RemoteFile, Arc<Cache>) {
        let cache = Cache::new(limit);
        (file_in(name, cache.clone()), cache)
    }

    /// [`file`], read through `cache`.
    fn file_in(name: &str, cache: Arc<Cache>) -> RemoteFile {
        let remote = Remote::open(&format!("memory://{name}/ds"), &[]).unwrap();
        let bytes: Vec<u8> = (0..1000u32).map(|i| (i / 10) as u8).collect();
        let etag = remote.put("0.zr", bytes).unwrap();
        let object = Object { size: 1000, stored: 1000, xxh3: String::new(), etag, key: None };
        RemoteFile::new(remote, "0.zr", object, false, cache, 0)
    }

    /// While a loader streams, a file within one request's cap is fetched whole, once, and
    /// only while the small files fetched whole stay within a sixteenth of the budget.
    #[test]
    fn small_files_come_whole_only_within_their_share_of_the_budget() {
        // Four 1,000-byte files sharing a cache of 32,000 bytes: each is within one
        // request's cap (a 32nd of the budget); small files may take a 16th (2,000 bytes).
        let cache = Cache::new(32_000);
        let files: Vec<RemoteFile> = (0..4).map(|k| file_in(&format!("whole-share-{k}"), cache.clone())).collect();
        let fetched = |f: &RemoteFile| f.to.remote.stats().counts().bytes;
        // Without a loader streaming, a record is fetched alone.
        files[3].will_need_record(500, 10, 50);
        files[3].start_reads();
        assert_eq!((read(&files[3], 50), fetched(&files[3])), (vec![50; 10], 10));
        let streaming = cache.streaming();
        for f in &files {
            f.will_need_record(0, 10, 0);
            f.start_reads();
            assert_eq!(read(f, 0), vec![0; 10]);
        }
        let bytes: Vec<u64> = files.iter().map(fetched).collect();
        assert_eq!(bytes, [1000, 1000, 10, 20], "two files whole, then record by record");
        // A file fetched whole holds its other records; the others fetch theirs.
        for f in &files {
            assert_eq!(read(f, 70), vec![70; 10]);
        }
        let bytes: Vec<u64> = files.iter().map(fetched).collect();
        assert_eq!(bytes, [1000, 1000, 20, 30]);
        drop(streaming);
    }

    fn read(f: &RemoteFile, record: u64) -> Vec<u8> {
        let mut buf = vec![0u8; 10];
        f.read_at(record * 10, &mut buf).unwrap();
        buf
    }

    #[test]
    fn a_range_that_starts_earlier_still_covers() {
        let (f, _) = file("covers-earlier", 1 << 20);
        // Requests so far: the upload's.
        let sent = f.to.remote.stats().counts().requests;
        // A long range, then a short one inside it (a read that missed spans it asked for).
        f.will_need(0, 1000);
        f.start_reads();
        {
            let mut spans = lock(&f.spans.spans);
            drop(f.spawn(&mut spans, 500, 510, Indices::new(), Sending::Now));
            assert!(covering(&spans, 700, 710).is_some(), "the long range holds byte 700");
        }
        // Both answered (counts are taken when a request is sent).
        assert_eq!((read(&f, 0), read(&f, 50)), (vec![0; 10], vec![50; 10]));
        let requests = f.to.remote.stats().counts().requests;
        assert_eq!(requests - sent, 2);
        assert_eq!(read(&f, 70), vec![70; 10]);
        assert_eq!(f.to.remote.stats().counts().requests, requests, "a held record is not fetched again");
    }

    #[test]
    fn a_record_brought_along_by_a_neighbour_keeps_its_next_use() {
        // Room for three records' ranges, not four.
        let (f, cache) = file("passenger", 35);
        // Requests so far: the upload's.
        let sent = f.to.remote.stats().counts().requests;
        // Records 5, 6 and 9 are needed soon, in that order; the others never.
        struct Soon;
        impl super::super::plan::Plan for Soon {
            fn now(&self) -> u64 {
                0
            }
            fn next_use(&self, sample: u64) -> Option<u64> {
                match sample {
                    5 => Some(1),
                    6 => Some(2),
                    9 => Some(3),
                    _ => None,
                }
            }
        }
        cache.set_plan(Some(ReadPlan::new(Soon)));
        // Records 6 and 7 come in one request announced for record 7 only; record 6 rides
        // along, its index unknown to the range.
        f.will_need_record(60, 20, 7);
        f.start_reads();
        assert_eq!(read(&f, 7), vec![7; 10]);
        // Record 6 is announced now: it is held, and the range learns its next use.
        f.will_need_record(60, 10, 6);
        f.start_reads();
        f.will_need_record(90, 10, 9);
        f.start_reads();
        assert_eq!(read(&f, 9), vec![9; 10]);
        // Fetching record 5 overflows the cache: what goes is the range needed last
        // (record 9's), never the one holding record 6.
        f.will_need_record(50, 10, 5);
        f.start_reads();
        assert_eq!(read(&f, 5), vec![5; 10]);
        let requests = f.to.remote.stats().counts().requests;
        assert_eq!(requests - sent, 3);
        assert_eq!(read(&f, 6), vec![6; 10]);
        assert_eq!(f.to.remote.stats().counts().requests, requests, "record 6 was kept, not fetched again");
    }

    #[test]
    fn a_range_needed_after_the_line_a_look_drew_goes_once_read() {
        // Room for three records' ranges in a file of a hundred (a cache far smaller than
        // the data); each record is needed again at 100 + its index.
        let (f, cache) = file("fleeting", 35);
        cache.set_data(1000);
        struct Later;
        impl super::super::plan::Plan for Later {
            fn now(&self) -> u64 {
                0
            }
            fn next_use(&self, sample: u64) -> Option<u64> {
                Some(100 + sample)
            }
            fn next_uses_from(&self, from: u64, samples: &[u64], uses: &mut [Option<u64>]) {
                for (used, &sample) in uses.iter_mut().zip(samples) {
                    *used = Some(100 + sample).filter(|&at| at >= from);
                }
            }
        }
        cache.set_plan(Some(ReadPlan::new(Later)));
        let _stream = cache.streaming();
        let announced = |record: u64| {
            f.will_need_record(record * 10, 10, record as u32);
            f.start_reads();
            read(&f, record)
        };
        for record in 1..=3 {
            assert_eq!(announced(record), vec![record as u8; 10]);
        }
        assert_eq!(cache.held(), 30);
        // Record 4 overflows the cache: a look drops the ranges needed last (half the room
        // and more: records 4, 3 and 2), and draws its line at 102.
        assert_eq!(announced(4), vec![4; 10]);
        assert_eq!(cache.held(), 10);
        // Record 5 is needed after the line: it goes once read, without a look, also when
        // the batch reading it announces it again first (as a gather does after the
        // read-ahead).
        f.will_need_record(50, 10, 5);
        f.start_reads();
        assert_eq!(announced(5), vec![5; 10]);
        assert_eq!(cache.held(), 10, "record 5's range went once read");
        // Record 0 is needed before it: kept.
        assert_eq!(announced(0), vec![0; 10]);
        assert_eq!(cache.held(), 20);
        let requests = f.to.remote.stats().counts().requests;
        assert_eq!(read(&f, 0), vec![0; 10]);
        assert_eq!(read(&f, 1), vec![1; 10]);
        assert_eq!(f.to.remote.stats().counts().requests, requests, "records 0 and 1 were kept");
        assert_eq!(read(&f, 5), vec![5; 10]);
        assert_eq!(f.to.remote.stats().counts().requests, requests + 1, "record 5 was fetched again");
    }
}
