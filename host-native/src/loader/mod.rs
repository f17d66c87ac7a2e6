//! The training loader: batches of a [`Stream`] read from stores by worker threads, with a
//! bounded prefetch, a prompt close, and an exact resume state.
//!
//! Which samples a batch holds is the core's business ([`zrecord_core::stream`]): a
//! [`Shard`](zrecord_core::stream::Shard) of the stream names rank `r`'s slice of every
//! global batch. This module only moves bytes. From the first [`Loader::next`] on (so a
//! loader that is resumed or dropped before it is read never gathers for nothing), one
//! sampler thread fills each batch's indices from the shard and deals the batches
//! round-robin to `num_workers` worker threads; each worker gathers every field of its
//! batch (images, labels, ...) into buffers (fresh, or given back by the consumer:
//! [`BufferPool`]) and queues them. [`Loader::next`] takes batches from the workers in the
//! same round-robin order, so batch `k` is always the shard's `k`-th, however many workers
//! there are. The queues are bounded: at most about `prefetch` batches wait ahead of the
//! consumer.
//!
//! The loader counts what [`Loader::next`] *returned*, never what the workers produced
//! ahead: [`Loader::state`] after `next` returned the batch of global step `s` is
//! `stream.state(s + 1)`, so a job that saves it and restarts reads on from exactly the
//! batch after the last one it trained on, with any number of workers or prefetch depth,
//! and with another world size when the global batch stays the same.
//!
//! ```
//! use std::sync::Arc;
//! use zrecord::{Loader, LoaderOptions, Mode, Source, Stream, StreamState, Zrecord};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let dir = tempfile::tempdir()?;
//! # let (images_path, labels_path) = (dir.path().join("images.zr"), dir.path().join("labels.zr"));
//! # {
//! #     let images = Zrecord::open(&images_path)?;
//! #     images.append(&vec![7u8; 1000 * 3072], 1000, 3072, None)?;
//! #     let labels = Zrecord::open(&labels_path)?;
//! #     let bytes: Vec<u8> = (0..1000i64).flat_map(i64::to_le_bytes).collect();
//! #     labels.append(&bytes, 1000, 8, None)?;
//! # }
//! // 1000 images of 3x32x32 bytes and their i64 labels; this is rank 1 of 4, 64 per rank.
//! let images = Arc::new(Zrecord::open_read_only(&images_path)?);
//! let labels = Arc::new(Zrecord::open_read_only(&labels_path)?);
//! let source = Source::new(vec![(images, 3 * 32 * 32), (labels, 8)])?;
//! let stream = Stream::new(source.id(), Mode::Shuffle, 42, 64 * 4)?;
//! let options = LoaderOptions { rank: 1, world_size: 4, ..LoaderOptions::default() };
//! let loader = Loader::new(stream.clone(), vec![source.clone()], options)?;
//! assert_eq!(loader.steps_per_epoch(), Some(3)); // 1000 / 256: 232 samples dropped
//! for _ in 0..5 {
//!     let batch = loader.next()?.expect("an open loader never runs dry");
//!     let (pixels, targets) = (&batch.fields[0], &batch.fields[1]);
//!     assert_eq!((pixels.len(), targets.len()), (64 * 3072, 64 * 8));
//! }
//! // Checkpoint: one line of JSON, the same on every rank.
//! let saved = loader.state().encode();
//! loader.close();
//!
//! // Later, in another process, on 2 ranks of 128: the batch after the last one returned.
//! let options = LoaderOptions { rank: 0, world_size: 2, num_workers: 1, ..LoaderOptions::default() };
//! let loader = Loader::resume(stream, vec![source], options, &StreamState::decode(&saved)?)?;
//! assert_eq!(loader.step(), 5);
//! assert_eq!(loader.next()?.unwrap().step, 5);
//! # Ok(()) }
//! ```
//!
//! Warming: when the threads start, a loader whose stores fit in a quarter of the memory
//! available ([`Warm`]) also reads them once, front to back, on a thread of its own
//! ([`Zrecord::warm`](crate::Zrecord::warm)), so that a first epoch from a cold page cache
//! does not fetch every record from disk by a random read of its own. It stops between
//! pieces when the loader closes, and is joined like the others.
//!
//! Shutdown needs no polling in the workers: [`Loader::close`] raises the stop flag and
//! drops the consumer's receivers. A worker blocked on a full queue then fails its send and
//! exits, dropping its job queue; the sampler, blocked on that queue or checking the flag,
//! exits and drops the rest; workers waiting for jobs see their queue closed. `close` joins
//! them all. Only the consumer waits with a timeout, so that a `close` from another thread
//! also ends a `next` that is waiting.
//!
//! Data that is not a zrecord dataset: [`Loader::fetching`] reads the same stream with the
//! same threads, but each worker hands its batch's indices to the caller's [`Fetch`] and
//! queues whatever it returns ([`LoaderBatch::fetched`]). The Python binding fetches a
//! user's `__getitems__` this way, taking the GIL only for the call.
//!
//! Fork: threads do not survive `fork()`. In a forked child, [`Loader::next`] of a threaded
//! loader fails with [`LoaderError::Forked`], and closing or dropping it lets go of the
//! thread handles without joining threads that are not there.
//!
//! The files, one concept each:
//! - `mod.rs`: the [`Loader`] (how it is built, what it reports), its [`LoaderBatch`], the
//!   caller's [`Fetch`] and [`Transform`];
//! - `consumer.rs`: [`Loader::next`], the threads started by the first call, and shutdown;
//! - `error.rs`: [`LoaderError`] and [`Place`];
//! - `options.rs`: [`LoaderOptions`] and [`Warm`], with their defaults;
//! - `spec.rs`: a loader as a binding describes it ([`LoaderSpec`]), its arguments' rules,
//!   and [`Loader::from_spec`];
//! - `source.rs`: what a loader reads ([`Source`]), and whether the sources fit the stream;
//! - `start.rs`: what every constructor ends in, the loader built from a set-up;
//!   `samples.rs` the set-up of a loader of samples (stores, or a [`Fetch`]);
//! - `workers.rs`: the sampler and worker threads, their jobs and the batch each makes;
//! - `gather.rs`: a worker's gather of every field of a batch; `skip.rs` the same with
//!   damaged samples replaced ([`OnError::Skip`]); `pack.rs` packed rows ([`Loader::packed`]);
//!   `packed.rs` a packed loader's set-up, and what it keeps of its batches;
//! - `buffers.rs`: the [`BufferPool`] batches take their buffers from;
//! - `warm.rs`: warming the stores into the page cache ([`Warm`]);
//! - `ahead.rs`: read-ahead, the batches to come announced to the dataset (an object
//!   store fetches them, a cold local disk reads them);
//! - `cache_plan.rs`: the stream as a remote cache's plan of what to keep.

use std::any::Any;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

use zrecord_core::stream::pass::FinitePass;
use zrecord_core::stream::{Stream, StreamState};

mod ahead;
mod buffers;
mod cache_plan;
mod consumer;
mod error;
mod gather;
mod options;
mod pack;
mod packed;
mod row_index;
mod samples;
mod skip;
mod source;
mod spec;
mod start;
mod warm;
mod workers;

pub use buffers::BufferPool;
pub use error::{ArgumentError, LoaderError, Place};
pub use gather::{RaggedBatch, RaggedField};
pub use options::{global_pool, LoaderOptions, Warm};
pub use pack::{PackInfo, PackOptions, RowIndexes};
pub use row_index::RowIndexDir;
pub use skip::{OnError, Skipped};
pub use source::Source;
pub use spec::{mode_of, IndexDirArg, LoaderSpec, PackArgs, Reads};

use consumer::Consumer;
use packed::Packed;
use source::check_sources;
use start::Feed;
use warm::WarmProgress;
use workers::{Planner, Shared};

use crate::Error;

/// One batch: this rank's slice of a global batch.
#[derive(Debug)]
pub struct LoaderBatch {
    /// The global batch this is a slice of; the state after it is `stream.state(step + 1)`.
    pub step: u64,
    /// The sample index of each slot, in its source.
    pub indices: Vec<u64>,
    /// The source number of each slot (always 0 outside a mixture).
    pub sources: Vec<u32>,
    /// One buffer per field: for a fixed field, slot `i` holds the sample at
    /// `i * sample_size`; a ragged field's layout is in [`LoaderBatch::ragged`].
    pub fields: Vec<Vec<u8>>,
    /// Per field: `None` for a fixed field, where each sample of a ragged one lies.
    pub ragged: RaggedBatch,
    /// For a [`Loader::fetching`] loader: what [`Fetch::fetch`] returned (and no fields).
    pub fetched: Option<Box<dyn Any + Send>>,
    /// For a [`Loader::packed`] loader: where packing stands after this batch. Its
    /// `fields` are then the rows' tokens, segment ids, positions (and sources), and
    /// `indices` / `sources` the documents the rows hold.
    pub pack: Option<PackInfo>,
    /// Slots at the front holding samples: all of them, but in the last batch of a finite
    /// pass ([`LoaderOptions::passes`]), whose slots after these repeat the first samples
    /// as padding. Packed batches count rows (their padding is segment id 0).
    pub valid: usize,
    /// Slots whose sample failed its checksum or decode and was replaced under
    /// [`OnError::Skip`] (they hold the replacement's values), in slot order. In a finite
    /// pass they hold no sample of the pass: the replacement is read at its own slot too,
    /// so counting them would count it twice.
    pub replaced: Vec<usize>,
}

/// The caller's reader of a dataset that is not zrecord's (see [`Loader::fetching`]).
pub trait Fetch: Send + Sync {
    /// The batch of samples `indices`, in any form the caller's consumer downcasts
    /// ([`LoaderBatch::fetched`]). Called on the loader's worker threads (several at once
    /// with several workers), or in [`Loader::next`] without workers. A failure belongs in
    /// the returned value: the loader goes on to the next batch, and the consumer decides.
    fn fetch(&self, indices: &[u64]) -> Box<dyn Any + Send>;
}

/// The caller's step on each finished batch, run on the worker that gathered it (or in
/// [`Loader::next`] without workers), so it is prefetched and, with several workers, runs
/// several batches at once; see [`Loader::with_transform`]. It takes the batch whole and
/// returns what the consumer gets in [`LoaderBatch::fetched`]; a failure belongs in the
/// returned value, as for [`Fetch`]. A fetching loader's batch comes with `fetched` set.
pub trait Transform: Send + Sync {
    /// The finished form of `batch`.
    fn transform(&self, batch: LoaderBatch) -> Box<dyn Any + Send>;
}

/// A loader over a [`Stream`]: see the module documentation.
pub struct Loader {
    stream: Stream,
    rank: u64,
    world_size: u64,
    batch_size: usize,
    shared: Mutex<Option<Arc<Shared>>>,
    stop: Arc<AtomicBool>,
    consumer: Mutex<Consumer>,
    /// Global batches the caller consumed: the step after the last batch returned. Apart
    /// from `consumer` so that `state()` never waits for a `next()` that is waiting.
    consumed: Arc<AtomicU64>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    /// With no workers, `next()` plans each batch itself.
    inline: Option<Mutex<Planner>>,
    /// With workers: what the first `next()` starts the threads with (planner, workers,
    /// prefetch). Starting there rather than in the constructor means a loader that is
    /// resumed, or dropped, before it is read never gathers a batch for nothing.
    pending: Mutex<Option<(Planner, usize, usize)>>,
    /// A packed loader's packing, the cursor after the last batch returned (with its step)
    /// and the padding tokens of the batches returned.
    packing: Option<Packed>,
    owner_pid: u32,
    /// Where consumers give field buffers back ([`Loader::buffers`]).
    buffers: Arc<BufferPool>,
    warm: Warm,
    /// Set when the threads start and the stores are to be warmed.
    warming: Mutex<Option<Arc<WarmProgress>>>,
    /// Each remote source's cache told that this loader streams it (dropped at shutdown).
    streaming: Mutex<Vec<crate::remote::file::Streaming>>,
    /// The warming thread, apart from `threads` ([`Loader::threads_alive`] counts the
    /// sampler and the workers); joined by `shutdown` like them.
    warmer: Mutex<Option<JoinHandle<()>>>,
    /// With [`OnError::Skip`]: the samples replaced so far (kept after close).
    skips: Option<Arc<skip::Skips>>,
    /// A finite pass of samples ([`LoaderOptions::passes`]): where it ends.
    pass: Option<FinitePass>,
    /// A finite pass returned its last batch: `next()` returns `None`.
    ended: AtomicBool,
    /// A packed loader with a finite pass.
    finite_packed: bool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section here leaves its state whole, so a poisoned lock is still sound.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A zeroed vector of `n` items, or [`Error::OutOfMemory`] where `vec!` would abort (batch
/// sizes come from callers and may be absurd).
fn zeroed<T: Clone + Default>(n: usize) -> Result<Vec<T>, Error> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| Error::OutOfMemory)?;
    v.resize(n, T::default());
    Ok(v)
}

impl Loader {
    /// A loader reading `stream` from its start: rank `options.rank` of
    /// `options.world_size`, with one [`Source`] per dataset of the stream (one, or one per
    /// mixture source), in order.
    ///
    /// Fails when the sources are not the stream's datasets (another length or
    /// generation: the stream was built for other data), when they do not share their
    /// fields' sample sizes, when the rank or world size do not fit the stream, or when a
    /// batch cannot be allocated ([`Error::OutOfMemory`]). Threads start with the first
    /// [`Loader::next`].
    pub fn new(stream: Stream, sources: Vec<Source>, options: LoaderOptions) -> Result<Loader, LoaderError> {
        Self::start(stream, Feed::Sources(sources), options, 0)
    }

    /// A loader reading `stream` (over one dataset, known by its length: build it from
    /// `DatasetId { length, generation: 0 }` or the data's own identity) whose batches
    /// `fetch` reads: each batch is [`LoaderBatch::fetched`], with its step, indices and no
    /// fields. Everything else (ranks, epochs, prefetch, state and resume, close) is the
    /// loader's as for stores. Fails for a mixture stream.
    pub fn fetching(stream: Stream, fetch: Arc<dyn Fetch>, options: LoaderOptions) -> Result<Loader, LoaderError> {
        Self::start(stream, Feed::Fetch(fetch), options, 0)
    }

    /// [`Loader::fetching`], going on where `state` was saved (see [`Loader::resume`]).
    pub fn resume_fetching(
        stream: Stream,
        fetch: Arc<dyn Fetch>,
        options: LoaderOptions,
        state: &StreamState,
    ) -> Result<Loader, LoaderError> {
        let step = stream.resume(state)?;
        Self::start(stream, Feed::Fetch(fetch), options, step)
    }

    /// A loader that goes on where the one that saved `state` stopped: its first batch is
    /// the one after the last batch that loader returned. The state must come from this
    /// stream (same datasets at the same generations, seed, mode, weights and global
    /// batch, else [`LoaderError::State`] says what differs); the rank, world size, number
    /// of workers and prefetch depth may differ. Costs no replay.
    ///
    /// A state saved on a dataset that has grown by appends since resumes too: the epoch
    /// (SHUFFLE) or pass it was in finishes over the samples it began with, exactly as it
    /// would have, and the new samples join from the next (`Stream::resumed`).
    pub fn resume(
        stream: Stream,
        sources: Vec<Source>,
        options: LoaderOptions,
        state: &StreamState,
    ) -> Result<Loader, LoaderError> {
        let grown_from = match sources.as_slice() {
            [one] => one.data().grown_from().to_vec(),
            _ => Vec::new(),
        };
        let (stream, step) =
            stream.resumed(state, &grown_from).map_err(|e| error::explain_resume(e, &source_paths(&sources)))?;
        Self::start(stream, Feed::Sources(sources), options, step)
    }

    /// A loader of packed rows: `rows` rows of `pack.seq_len` tokens per global batch
    /// (rank `r` of `W` reads rows `r rows / W ..`), made of the token documents of ragged
    /// field `pack.field`, read in the order of `docs`: the stream of documents, with a
    /// global batch of 1 (`Stream::new(source.id(), mode, seed, 1)`, or a mixture's, whose
    /// weights then count tokens). See [`zrecord_core::stream::pack`] for how rows are
    /// made, and [`PackInfo`] for what each batch carries.
    ///
    /// Fails as [`Loader::new`] does, and when the field is not a ragged integer field,
    /// an id does not fit its dtype, `rows` is not a multiple of the world size, or with
    /// [`OnError::Skip`] (a replaced document would change every later row).
    pub fn packed(
        docs: Stream,
        rows: u64,
        sources: Vec<Source>,
        pack: PackOptions,
        options: LoaderOptions,
    ) -> Result<Loader, LoaderError> {
        Self::start(docs, Feed::Packed { sources, pack, rows, cursor: None }, options, 0)
    }

    /// [`Loader::packed`], going on where a packed loader of the same documents, spec and
    /// global rows saved `state` (any world size and number of workers).
    pub fn resume_packed(
        docs: Stream,
        rows: u64,
        sources: Vec<Source>,
        pack: PackOptions,
        options: LoaderOptions,
        state: &StreamState,
    ) -> Result<Loader, LoaderError> {
        check_sources(&docs, &sources)?;
        let packing = pack::Packing::new(&pack, &sources, rows, &docs)?;
        let (step, cursor) = state
            .check_packed(&docs, &packing.spec, rows)
            .map_err(|e| error::explain_resume(e, &source_paths(&sources)))?;
        Self::start(docs, Feed::Packed { sources, pack, rows, cursor: Some(cursor) }, options, step)
    }

    /// The resume state: the position after the last batch [`Loader::next`] returned
    /// (never counting what workers prepared ahead), with the stream's identity. Save
    /// [`StreamState::encode`]; every rank's is the same.
    pub fn state(&self) -> StreamState {
        match &self.packing {
            None => self.stream.state(self.step()),
            Some(packed) => {
                let (step, cursor) = lock(&packed.last).clone();
                packed.packing.state(&self.stream, step, cursor)
            }
        }
    }

    /// A packed loader's padding so far: the share of padding tokens in the global
    /// batches returned (0 for concat), or `None` for a loader of samples or before the
    /// first batch.
    pub fn padding_fraction(&self) -> Option<f64> {
        let packed = self.packing.as_ref()?;
        let batches = packed.batches.load(Ordering::Acquire);
        let cells = batches * u64::from(packed.packing.rows) * u64::from(packed.packing.spec.seq_len);
        (cells > 0).then(|| packed.padding.load(Ordering::Acquire) as f64 / cells as f64)
    }

    /// Where to give a batch's field buffers back once nothing reads them any more, so
    /// that later batches reuse their memory ([`BufferPool`]). Giving back is optional: a
    /// buffer that is simply dropped is freed.
    pub fn buffers(&self) -> Arc<BufferPool> {
        self.buffers.clone()
    }

    /// Global batches consumed: the step of the next batch [`Loader::next`] returns.
    pub fn step(&self) -> u64 {
        self.consumed.load(Ordering::Acquire)
    }

    /// The stream read.
    pub fn stream(&self) -> &Stream {
        &self.stream
    }

    /// Global batches of a finite pass of samples ([`LoaderOptions::passes`]); `None` for
    /// an endless loader or a packed one (whose pass ends where its documents do).
    pub fn pass_steps(&self) -> Option<u64> {
        self.pass.map(|p| p.steps())
    }

    /// True for a loader that ends ([`LoaderOptions::passes`]).
    pub fn is_finite(&self) -> bool {
        self.pass.is_some() || self.packing.as_ref().is_some_and(|_| self.finite_packed)
    }

    /// Samples per batch of this rank: the global batch over the world size.
    pub fn batch_size(&self) -> usize {
        self.batch_size
    }

    /// This loader's rank.
    pub fn rank(&self) -> u64 {
        self.rank
    }

    /// The number of ranks reading the stream.
    pub fn world_size(&self) -> u64 {
        self.world_size
    }

    /// Batches per epoch of every rank (SHUFFLE over one dataset); `None` for the endless
    /// SEQUENTIAL, IID and mixture streams. After a resume on a dataset grown since the
    /// state was saved, the epoch the loader is in counts; later ones are longer.
    pub fn steps_per_epoch(&self) -> Option<u64> {
        if let Some(packed) = &self.packing {
            // Shuffled rows have epochs of their own; sequential rows run on across the
            // documents' epochs, endless.
            return packed.steps_per_epoch;
        }
        self.stream.steps_in_epoch_of(self.step())
    }

    /// Whether a job that keeps running should look for rows appended to its dataset
    /// before global batch `step`, and resume there on the grown dataset if it grew
    /// ([`Stream::takes_growth_at`]): so that it reads what a job restarted from any state
    /// it saved reads. Never for a packed loader, a finite pass or a mixture, whose states
    /// do not follow appends.
    pub fn takes_growth_at(&self, step: u64) -> bool {
        self.packing.is_none() && self.pass.is_none() && self.stream.takes_growth_at(step)
    }

    /// `(epoch, step within it)` of global batch `step` (SHUFFLE over one dataset, packed
    /// in shuffled rows or not); `None` for endless streams, sequential packed rows among
    /// them (their epochs are the documents').
    pub fn epoch_of(&self, step: u64) -> Option<(u64, u64)> {
        if let Some(packed) = &self.packing {
            return packed.steps_per_epoch.map(|n| (step / n, step % n));
        }
        self.steps_per_epoch().and_then(|_| self.stream.epoch_of(step))
    }

    /// Stops and joins every thread, then lets go of the stores. Idempotent; returns once
    /// no thread is left. [`Loader::next`] then returns `Ok(None)`.
    pub fn close(&self) {
        self.shutdown();
    }

    /// True once [`Loader::close`] has been called.
    pub fn is_closed(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// Runs `transform` on every batch before [`Loader::next`] returns it, on the worker
    /// that gathered it ([`Transform`]). Only before the first `next()`.
    pub fn with_transform(self, transform: Arc<dyn Transform>) -> Result<Self, LoaderError> {
        {
            let mut shared = lock(&self.shared);
            let started = shared.as_mut().and_then(Arc::get_mut).map(|s| s.transform = Some(transform)).is_none();
            if started {
                return Err(LoaderError::Sources("a transform must be set before the loader starts".into()));
            }
        }
        Ok(self)
    }

    /// The samples replaced so far under [`OnError::Skip`], each once, by source and index
    /// (empty with [`OnError::Raise`]).
    pub fn skipped(&self) -> Vec<Skipped> {
        self.skips.as_ref().map(|s| s.all()).unwrap_or_default()
    }

    /// Number of this loader's sampler and worker threads still running (0 after
    /// [`Loader::close`]); the warming thread is not counted ([`Loader::warm_progress`]).
    pub fn threads_alive(&self) -> usize {
        lock(&self.threads).iter().filter(|t| !t.is_finished()).count()
    }
}

impl std::fmt::Debug for Loader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loader")
            .field("stream", &self.stream)
            .field("rank", &self.rank)
            .field("world_size", &self.world_size)
            .field("batch_size", &self.batch_size)
            .field("step", &self.step())
            .field("closed", &self.is_closed())
            .finish_non_exhaustive()
    }
}

impl Drop for Loader {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// What a sample or a packed set-up (`samples.rs`, `packed.rs`) gives [`Loader::start`] to
/// build the loader of.
struct SetUp {
    sources: Vec<Source>,
    /// Set for a fetching loader (`sources` is then empty).
    fetch: Option<Arc<dyn Fetch>>,
    planner: Planner,
    /// Samples (or packed rows) per batch of this rank.
    batch_size: usize,
    /// A packed loader's own state, and its packing with its rows per rank for the workers.
    packed: Option<(Packed, (pack::Packing, usize))>,
    /// A finite pass of samples (a packed loader's pass ends where its documents do).
    pass: Option<FinitePass>,
    /// A packed loader resumed after the last batch of its finite pass.
    ended: bool,
}

/// Where each source's dataset lives, for the errors of a refused resume.
fn source_paths(sources: &[Source]) -> Vec<std::path::PathBuf> {
    sources.iter().map(|s| s.data().path().to_path_buf()).collect()
}
