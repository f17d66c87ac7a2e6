//! Read-ahead: the sampler thread announces the samples of batches still to come
//! ([`Dataset::will_read`]), so that their reads are in flight before a worker reads them.
//! A stream is a pure function of position: the batches ahead are known exactly, not
//! guessed.
//!
//! For a dataset in an object store the depth adapts: twice the measured round trip
//! ([`Dataset::round_trip`]) over the measured time between batches (the sampler is paced
//! by the consumer), plus two (so a depth that holds the pace back grows until it does
//! not), and at most what three quarters of the dataset's cache hold ([`MAX_DEPTH`]
//! batches at most). The window's bytes are the read-ahead's share of the cache
//! ([`Cache::set_read_ahead`](crate::remote::file::Cache::set_read_ahead)); ranges a read
//! took are kept in the rest, so what is fetched ahead is never evicted before it is read
//! and the two together stay near `cache_bytes` (besides them: the batches the workers are
//! gathering, and the eviction's slack). (With half the cache, a 10% cache at
//! 20 ms a request read 0.45-0.48x of what the cache can carry per round trip; with three
//! quarters 0.56-0.60x.) A cache that holds the
//! whole dataset evicts nothing: its depth is that most from the first batch. (Paced by
//! the batches' time, a first epoch bound by its fetches measured slow batches, kept a
//! shallow window, and so fetched each record alone, as slowly as before: a feedback loop
//! that held a first epoch from a local S3 server to 123 samples/s.)
//!
//! A stream in blocks (a block shuffle, `zrecord_core::stream::Blocks`) is announced a
//! window at a time ([`ReadAhead::whole_windows`]): its batches each hold a few samples of
//! every block of their window, so announced a batch at a time a block went out in many
//! short requests; announced whole, in a few long ones (an epoch of 3,968 samples in
//! blocks of 25, 4 a window, through a 10% cache: 1,396 requests before, 226-238 now).
//!
//! A store that answers quicker than handing a request to another thread (the in-memory
//! store: [`asked_inline`](crate::remote::asked_inline)) is not announced ahead at all: the
//! workers send their batches' requests themselves as they read.
//!
//! A local dataset is announced [`LOCAL_DEPTH`] batches ahead, and only what is not in
//! memory is asked of the kernel: from a cold page cache (a dataset larger than memory, or
//! not warmed) the disk then reads the next batches while the workers decode this one,
//! instead of each worker waiting for its own batch's reads.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use zrecord_core::stream::Shard;

use crate::Dataset;

/// The most batches announced ahead of the sampler.
pub const MAX_DEPTH: u64 = 64;
/// Batches a local dataset is announced ahead of the sampler: the sampler already runs
/// about a batch per worker ahead of the consumer, and the disk needs a batch's reads
/// queued, not more (a deeper window only takes page cache from batches sooner).
pub const LOCAL_DEPTH: u64 = 2;

/// A cursor running ahead of the sampler's (see the module docs).
pub(super) struct ReadAhead {
    cursor: Shard,
    dataset: Arc<Dataset>,
    indices: Vec<u64>,
    /// The samples of the batches one [`ReadAhead::planned`] announces.
    announced: Vec<u64>,
    /// Samples of a step already filled that lie in a block-shuffle window not announced
    /// yet: announced with it.
    held_back: Vec<u64>,
    /// Estimated bytes a batch fetches.
    batch_bytes: u64,
    /// Bytes of fetched data the read-ahead may hold: three quarters of the cache of a
    /// dataset in an object store; `None` for a local one.
    budget: Option<u64>,
    /// Whether the dataset's cache holds all of it.
    roomy: bool,
    last: Option<Instant>,
    /// Seconds between batches, smoothed.
    interval: f64,
    /// Where the global step announced up to is published (the cache's plan keeps the
    /// ranges those batches need).
    announced_to: Arc<AtomicU64>,
}

impl ReadAhead {
    /// A read-ahead for the sampler standing at `shard` over `dataset`.
    pub(super) fn new(shard: &Shard, dataset: &Arc<Dataset>, announced_to: Arc<AtomicU64>) -> ReadAhead {
        let per_sample = dataset.footprint() / dataset.len().max(1);
        ReadAhead {
            cursor: shard.clone(),
            dataset: Arc::clone(dataset),
            indices: vec![0; shard.batch_size()],
            announced: Vec::new(),
            held_back: Vec::new(),
            batch_bytes: (per_sample * shard.batch_size() as u64).max(1),
            budget: dataset.cache().map(|cache| cache.limit() / 4 * 3),
            roomy: dataset.cache().is_some_and(|cache| cache.holds_everything()),
            last: None,
            interval: 0.0,
            announced_to,
        }
    }

    /// How many batches ahead to announce now.
    fn depth(&self) -> u64 {
        let Some(budget) = self.budget else { return LOCAL_DEPTH };
        let wanted = match self.dataset.round_trip() {
            _ if self.roomy => MAX_DEPTH,
            Some(rtt) if self.interval > 0.0 => (2.0 * rtt / self.interval).ceil() as u64 + 2,
            _ => 2,
        };
        wanted.min(MAX_DEPTH).min(budget / self.batch_bytes).max(1)
    }

    /// What to announce, from the sampler at `step` with the depth reaching `until`: the
    /// last step, and for a block shuffle the stream position the announcement stops at.
    /// A block shuffle's window is announced whole, so that one announcement holds each
    /// block's neighbours together and they go out as a few long requests (a batch of 64
    /// samples from 8 blocks alone went out as some 40 requests): up to the end of
    /// `until`'s window when the read-ahead's share of the cache holds that, else up to the
    /// end of the window before it when that lies ahead of `step` and the window is at most
    /// half that share (the rest waits until its window can be announced whole), else
    /// `until` as it is (a longer window goes out a batch at a time). A step that straddles two
    /// windows is announced up to the position; its samples past it wait for their window
    /// ([`ReadAhead::held_back`]).
    fn whole_windows(&self, step: u64, until: u64) -> (u64, Option<u64>) {
        // A local dataset reads no ranges: announced as they come.
        let Some(budget) = self.budget else { return (until, None) };
        let Some((start, end)) = self.window_of(until) else { return (until, None) };
        let g = self.cursor.stream().global_batch();
        // The bytes of steps `from..=last`.
        let bytes_of = |from: u64, last: u64| (last + 1).saturating_sub(from).saturating_mul(self.batch_bytes);
        let last = end.div_ceil(g) - 1;
        // This rank's bytes of the window: its share of the window's positions.
        let window = (end - start).saturating_mul(self.batch_bytes) / g;
        if bytes_of(step + 1, last) <= budget {
            (last, Some(end))
        } else if start.div_ceil(g) > step + 1 && 2 * window <= budget {
            // Up to the window before; nothing new while that is announced already. Only
            // for a window of at most half the budget, which is then announced while at
            // least half the budget's batches lie before it: a longer one would leave the
            // read-ahead dry at its start (a window as long as the budget was announced
            // only when the sampler reached it).
            (start.div_ceil(g) - 1, Some(start))
        } else {
            (until, None)
        }
    }

    /// For a stream in blocks, the stream positions where the window holding global step
    /// `step`'s last position starts and ends (the end exclusive, at most the epoch's
    /// end). `None` for a stream without blocks.
    fn window_of(&self, step: u64) -> Option<(u64, u64)> {
        let stream = self.cursor.stream();
        let blocks = stream.blocks()?;
        let (_, within) = stream.epoch_of(step)?;
        let steps = stream.steps_in_epoch_of(step)?;
        let g = stream.global_batch();
        let base = (step - within) * g;
        let span = blocks.span();
        // Positions within the epoch: `step` reads up to `(within + 1) g - 1`.
        let start = ((within + 1) * g - 1) / span * span;
        Some((base + start, base + start.saturating_add(span).min(steps * g)))
    }

    /// Called once the sampler planned the batch of global step `step`: announces the
    /// batches after it, up to the depth.
    pub(super) fn planned(&mut self, step: u64) {
        let now = Instant::now();
        if let Some(last) = self.last {
            let dt = now.duration_since(last).as_secs_f64();
            self.interval = if self.interval == 0.0 { dt } else { 0.8 * self.interval + 0.2 * dt };
        }
        self.last = Some(now);
        if crate::remote::asked_inline(self.dataset.round_trip()) {
            // A store that answers quicker than a hand-off between threads is asked by the
            // workers as they read: announced ahead, each record would cost the sampler's
            // announcement and two wakes for nothing. The batch planned is being read.
            if let Some(cache) = self.dataset.cache() {
                cache.set_read_ahead(0);
            }
            self.announced_to.fetch_max(step + 1, Ordering::Release);
            return;
        }
        if self.cursor.step() <= step {
            // Behind the sampler (at the start, or after a seek): what was held back is past.
            self.held_back.clear();
            if self.cursor.seek(step + 1).is_err() {
                return;
            }
        }
        // The batches newly in the window are announced together: the more records one
        // announcement holds, the closer they lie and the more of them one request brings.
        let depth = self.depth();
        let (until, stop) = self.whole_windows(step, step + depth);
        if let Some(cache) = self.dataset.cache() {
            // What is announced and not read yet: a whole window may reach past the depth.
            let ahead = until.max(self.cursor.step().saturating_sub(1)).saturating_sub(step);
            cache.set_read_ahead(ahead.max(1) * self.batch_bytes);
        }
        self.announced.clear();
        if self.cursor.step() <= until {
            self.announced.append(&mut self.held_back);
        }
        let (g, b) = (self.cursor.stream().global_batch(), self.cursor.batch_size() as u64);
        while self.cursor.step() <= until {
            let first = self.cursor.step() * g + self.cursor.rank() * b;
            self.cursor.fill(&mut self.indices);
            match stop {
                Some(stop) if first + b > stop => {
                    let keep = stop.saturating_sub(first).min(b) as usize;
                    self.announced.extend_from_slice(&self.indices[..keep]);
                    self.held_back.extend_from_slice(&self.indices[keep..]);
                }
                _ => self.announced.extend_from_slice(&self.indices),
            }
        }
        // Published before the announcement: the cache then knows these batches are the
        // read-ahead's while it sends them (and asks their records' next use past them).
        self.announced_to.fetch_max(self.cursor.step(), Ordering::Release);
        if !self.announced.is_empty() {
            self.dataset.will_read(&self.announced);
        }
    }
}
