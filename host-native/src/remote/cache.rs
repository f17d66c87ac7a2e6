//! The record cache of a remote dataset ([`Cache`]): the ranges its files fetched, kept up
//! to a byte budget and evicted by the plan of the loader reading them, and the policy
//! that decides what requests may bring along (`Cache::brings_along`,
//! `Cache::take_whole`).
//!
//! A [`super::file::RemoteFile`] keeps each range it requests in its own
//! [`FileSpans`], registered here, and tells the cache what it keeps and what its reads
//! take (`Cache::hold`, `Cache::release`, `Cache::let_go`); the cache looks through
//! every registered file's ranges to drop the ones needed furthest ahead (`Cache::evict`).
//! Below it, if the dataset was given one, a cache directory ([`DiskCache`]) keeps what it
//! fetched across runs. Metadata blocks are a file's own and never counted here.

use std::collections::btree_map::Entry;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};

use smallvec::SmallVec;

use super::disk::DiskCache;
use super::lock;
use super::pending::Pending;
use super::plan::ReadPlan;
use super::spans::{FileSpans, Range};

/// Bytes of record data a dataset keeps in memory by default ([`Cache`]).
pub const CACHE_BYTES: u64 = 1 << 30;
/// Bytes of record data a cache directory keeps by default ([`super::disk::DiskCache`]).
pub const DISK_CACHE_BYTES: u64 = 16 << 30;

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
    /// along (see [`super::file`]). Without a loader, reads fetch what they ask for.
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
    pub(super) fn streamed(&self) -> bool {
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

    pub(super) fn plan(&self) -> Option<ReadPlan> {
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
    /// all can take whole merged spans ([`super::file::RemoteFile`] merges more freely then).
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
    pub(super) fn take_whole(&self, bytes: u64) -> bool {
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
    pub(super) fn mark_fleeting(&self, ranges: &mut [Range], base: u64) {
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

    /// Looks through `file`'s ranges when it evicts, while the file lives.
    pub(super) fn register(&self, file: &Arc<FileSpans>) {
        let mut files = lock(&self.files);
        files.retain(|w| w.strong_count() > 0);
        files.push(Arc::downgrade(file));
    }

    /// The place of a range kept now in the order ranges came (without a plan, the oldest
    /// goes first).
    pub(super) fn next_seq(&self) -> u64 {
        self.seq.fetch_add(1, Ordering::Relaxed)
    }

    /// Counts a range of `len` bytes kept for a file's records: held, and not taken by a
    /// read yet.
    pub(super) fn hold(&self, len: u64) {
        self.held.fetch_add(len, Ordering::Relaxed);
        self.untaken.fetch_add(len, Ordering::Relaxed);
    }

    /// Counts a range of `len` bytes leaving the cache, taken by a read or not.
    pub(super) fn let_go(&self, fetch: &Pending, len: u64) {
        self.release(fetch, len);
        self.held.fetch_sub(len, Ordering::Relaxed);
    }

    /// Counts a range of `len` bytes leaving the cache that a read took (and released)
    /// already.
    pub(super) fn let_go_taken(&self, len: u64) {
        self.held.fetch_sub(len, Ordering::Relaxed);
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
    pub(super) fn release(&self, fetch: &Pending, len: u64) -> bool {
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
    pub(super) fn evict(&self) {
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
                    self.let_go(&span.fetch, span.end - start);
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

#[cfg(test)]
mod tests {
    use zrecord_core::io::StorageFile;

    use super::super::file::testing::{file, read, requests_sent};
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

    #[test]
    fn a_record_brought_along_by_a_neighbour_keeps_its_next_use() {
        // Room for three records' ranges, not four.
        let (f, cache) = file("passenger", 35);
        // Requests so far: the upload's.
        let sent = requests_sent(&f);
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
        let requests = requests_sent(&f);
        assert_eq!(requests - sent, 3);
        assert_eq!(read(&f, 6), vec![6; 10]);
        assert_eq!(requests_sent(&f), requests, "record 6 was kept, not fetched again");
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
        let requests = requests_sent(&f);
        assert_eq!(read(&f, 0), vec![0; 10]);
        assert_eq!(read(&f, 1), vec![1; 10]);
        assert_eq!(requests_sent(&f), requests, "records 0 and 1 were kept");
        assert_eq!(read(&f, 5), vec![5; 10]);
        assert_eq!(requests_sent(&f), requests + 1, "record 5 was fetched again");
    }
}
