//! One pushed file read over the network ([`RemoteFile`]): which ranges a read or an
//! announcement requests, and the wait for them.
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
//!
//! Its neighbours: a file's ranges are kept in `spans.rs`, counted and evicted by
//! [`super::cache`], sent by [`super::sending`]; a store directory of such files is a
//! [`RemoteDir`] ([`super::dir`]). This file uses the first three; the items re-exported
//! below keep the paths they had when this file held them all.

use std::collections::btree_map::Entry;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use smallvec::SmallVec;
use zrecord_core::error::{IoError, IoErrorKind};
use zrecord_core::io::StorageFile;

use super::disk::DiskCache;
use super::objects::Object;
use super::pending::{Answering, Pending};
use super::plan::NextUse;
use super::sending::{dispatch, fetch_range, send_here, Sending, Sends, Target};
use super::spans::{bridgeable, covering, Fetch, Indices, Range, Records, Span, Spans};
use super::{lock, Remote, MAX_GAP};

pub use super::cache::{Cache, Streaming, CACHE_BYTES, DISK_CACHE_BYTES};
pub use super::dir::RemoteDir;
pub use super::sending::sending_together;
pub use super::spans::FileSpans;

/// Bytes per block of a metadata file.
pub const META_BLOCK: u64 = 1 << 20;
/// Largest single request.
pub const MAX_SPAN: u64 = 16 << 20;
/// A gap between two wanted ranges always bridged: fewer bytes than a request's own
/// headers and round trip cost, however small the records around it (a batch's labels,
/// 8 bytes each, come in one request per shard rather than one each).
pub const TINY_GAP: u64 = 4 << 10;

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
        (slots, dispatch(sends, when, inline))
    }

    /// Records `fetch` as the span `start..end` holding records `indices`.
    fn keep(&self, spans: &mut Spans, (start, end, indices, fleeting): Range, fetch: Fetch) -> Fetch {
        let seq = self.cache.next_seq();
        spans.longest = spans.longest.max(end - start);
        if !self.metadata {
            self.cache.hold(end - start);
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
                self.cache.let_go(&old.fetch, old.end - start);
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
            self.cache.let_go_taken(span.end - start);
        }
    }

    /// Starts fetching the file's first block, and says whether it has one (a directory
    /// opening a store asks for its metadata files' at once: [`RemoteDir::start_metadata`]).
    pub(super) fn start_first_block(&self) -> bool {
        let end = META_BLOCK.min(self.object.stored);
        if end > 0 {
            drop(self.spawn(&mut lock(&self.spans.spans), 0, end, Indices::new(), Sending::Now));
        }
        end > 0
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

pub(super) fn read_only(what: &str) -> IoError {
    IoError::new(IoErrorKind::PermissionDenied, what, "a remote dataset is read-only (push a new one to change it)")
}

/// Remote files of a fresh in-memory store, for the tests here and in [`super::cache`]
/// (a cache fills only through the files that share it).
#[cfg(test)]
pub(super) mod testing {
    use super::*;

    /// A 100-record file of 10-byte records in a fresh in-memory store, read through a
    /// cache of `limit` bytes.
    pub(in crate::remote) fn file(name: &str, limit: u64) -> (RemoteFile, Arc<Cache>) {
        let cache = Cache::new(limit);
        (file_in(name, cache.clone()), cache)
    }

    /// [`file`], read through `cache`.
    pub(in crate::remote) fn file_in(name: &str, cache: Arc<Cache>) -> RemoteFile {
        let remote = Remote::open(&format!("memory://{name}/ds"), &[]).unwrap();
        let bytes: Vec<u8> = (0..1000u32).map(|i| (i / 10) as u8).collect();
        let etag = remote.put("0.zr", bytes).unwrap();
        let object = Object { size: 1000, stored: 1000, xxh3: String::new(), etag, key: None };
        RemoteFile::new(remote, "0.zr", object, false, cache, 0)
    }

    pub(in crate::remote) fn read(f: &RemoteFile, record: u64) -> Vec<u8> {
        let mut buf = vec![0u8; 10];
        f.read_at(record * 10, &mut buf).unwrap();
        buf
    }

    /// Requests `f`'s store has been sent so far (an upload's too).
    pub(in crate::remote) fn requests_sent(f: &RemoteFile) -> u64 {
        f.to.remote.stats().counts().requests
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{file, file_in, read};
    use super::*;

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
}
