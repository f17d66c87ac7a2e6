//! The training loader: batches of a [`Stream`] read from stores by worker threads, with a
//! bounded prefetch, a prompt close, and an exact resume state.
//!
//! Which samples a batch holds is the core's business ([`zrecord_core::stream`]): a
//! [`Shard`] of the stream names rank `r`'s slice of every global batch. This module only
//! moves bytes. From the first [`Loader::next`] on (so a loader that is resumed or dropped
//! before it is read never gathers for nothing), one sampler thread fills each batch's
//! indices from the shard and deals the batches round-robin to `num_workers` worker threads; each worker gathers every field of
//! its batch (images, labels, ...) into buffers (fresh, or given back by the consumer: [`BufferPool`]) and queues them. [`Loader::next`]
//! takes batches from the workers in the same round-robin order, so batch `k` is always the
//! shard's `k`-th, however many workers there are. The queues are bounded: at most about
//! `prefetch` batches wait ahead of the consumer.
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
//! ([`Zrecord::warm`]), so that a first epoch from a cold page cache does not fetch every
//! record from disk by a random read of its own. It stops between pieces when the loader
//! closes, and is joined like the others.
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

use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use zrecord_core::stream::pack::PackCursor;
use zrecord_core::stream::{Shard, StateError, Stream, StreamError, StreamState};

mod ahead;
mod gather;
mod pack;
mod skip;
mod source;

pub use gather::{RaggedBatch, RaggedField};
pub use pack::{PackInfo, PackOptions};
pub use skip::{OnError, Skipped};
pub use source::Source;

use crate::{DatasetError, Error, Zrecord};

/// How often a waiting [`Loader::next`] checks whether another thread closed the loader.
const CONSUMER_POLL: Duration = Duration::from_millis(50);

/// Why a loader cannot be built or cannot go on.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoaderError {
    /// A store failed (reading a record, or an allocation).
    #[error(transparent)]
    Store(#[from] Error),
    /// A dataset's store failed: the error names the store's path and the field.
    #[error(transparent)]
    Dataset(#[from] DatasetError),
    /// The stream or the shard cannot be built (empty dataset, batch larger than an epoch,
    /// a world size that does not divide the global batch, ...).
    #[error(transparent)]
    Stream(#[from] StreamError),
    /// A saved state does not belong to this loader's stream.
    #[error(transparent)]
    State(#[from] StateError),
    /// The sources do not fit the stream or each other.
    #[error("{0}")]
    Sources(String),
    /// The threads could not be started.
    #[error("cannot start loader threads: {0}")]
    Spawn(std::io::Error),
    /// A worker panicked: a bug in zrecord.
    #[error("internal error (please report): {0}")]
    Panic(String),
    /// A worker went away without a batch or an error: a bug in zrecord.
    #[error("internal error (please report): a loader worker exited unexpectedly")]
    WorkerExited,
    /// An earlier [`Loader::next`] failed with this; the loader stops there. `code` is the
    /// store error's [`Error::code`] when it was one.
    #[error("{message}")]
    Stopped {
        /// The first error's code, if it was a store error.
        code: Option<i32>,
        /// The first error's message.
        message: String,
        /// Where it happened, when it was a dataset error: the store, field and record.
        at: Option<Place>,
    },
    /// The loader's threads live in the process that made it, and this one was forked.
    #[error(
        "this loader was created in a parent process and has no threads after fork(); create a new one in the child"
    )]
    Forked,
}

/// Where a dataset error happened ([`LoaderError::Stopped`] keeps it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    /// The store (or dataset directory).
    pub path: std::path::PathBuf,
    /// The field.
    pub field: Option<String>,
    /// The store's record that failed its checksum or decode.
    pub record: Option<u64>,
}

impl LoaderError {
    /// Where a dataset error happened: its own place, or the first error's for a stopped
    /// loader.
    pub fn place(&self) -> Option<Place> {
        match self {
            LoaderError::Dataset(e) => Some(Place { path: e.path.clone(), field: e.field.clone(), record: e.record() }),
            LoaderError::Stopped { at, .. } => at.clone(),
            _ => None,
        }
    }

    /// The store error's stable code ([`Error::code`]), for this error or the one a
    /// stopped loader first failed with.
    pub fn code(&self) -> Option<i32> {
        match self {
            LoaderError::Store(e) => Some(e.code()),
            LoaderError::Dataset(e) => Some(e.code()),
            LoaderError::Stopped { code, .. } => *code,
            _ => None,
        }
    }
}

/// How a loader reads its stream.
#[derive(Clone, Copy, Debug)]
pub struct LoaderOptions {
    /// This process's rank, in `0..world_size` (default 0).
    pub rank: u64,
    /// Number of processes reading the stream (default 1); it must divide the stream's
    /// global batch, and each batch holds `global_batch / world_size` samples.
    pub world_size: u64,
    /// Gathering threads; 0 gathers inside [`Loader::next`] (default 4).
    pub num_workers: usize,
    /// Batches prepared ahead of the consumer, at least 1 (default 4).
    pub prefetch: usize,
    /// Which rayon pool a batch's gathers run on, asked once per batch; `None` for rayon's
    /// global pool (the default, [`global_pool`]). A process forked after the global pool
    /// started must answer with a pool of its own there: the inherited one has no threads.
    pub pool: fn() -> Option<&'static rayon::ThreadPool>,
    /// Whether the stores are read into the page cache in the background when the threads
    /// start (default [`Warm::Auto`]).
    pub warm: Warm,
    /// What a sample that fails its checksum or decode does (default [`OnError::Raise`];
    /// [`OnError::Skip`] replaces it, deterministically: see [`Skipped`]).
    pub on_error: OnError,
}

/// Whether a loader with workers warms its stores ([`Zrecord::warm`]) on a thread of its
/// own when it starts: the stores' used bytes read once, front to back, so that the random
/// reads of a cold first epoch find them in memory instead of going to disk one record at a
/// time. A loader with no workers starts no thread, and never warms.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Warm {
    /// When all the loader's stores together fit in a quarter of the memory available to
    /// the page cache ([`zrecord_core::engine::worth_warming`]; `MemAvailable`, and the
    /// room left under this process's cgroup memory limit, v1 or v2, when it has one). Larger
    /// stores are read as the batches ask: warming them would evict what it read before
    /// the epoch got there.
    #[default]
    Auto,
    /// Always, whatever the size.
    Always,
    /// Never.
    Never,
}

/// Bytes of memory the page cache can use without pushing anything out: the kernel's
/// `MemAvailable`, or less when this process's memory cgroup has a limit with less room
/// left under it. `None` where `MemAvailable` cannot be read (not Linux).
fn available_memory() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib: u64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse()
        .ok()?;
    let mut avail = kib.saturating_mul(1024);
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let read = |path: std::path::PathBuf| std::fs::read_to_string(path).ok().and_then(|v| v.trim().parse::<u64>().ok());
    for line in cgroups.lines() {
        // "0::/path" is the cgroup v2 hierarchy; "N:memory:/path" (or "N:...,memory,...:")
        // the v1 memory controller. "max", or v1's huge "no limit", leaves `avail` as is.
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next()) else { continue };
        let path = path.trim().trim_start_matches('/');
        let (limit, usage) = if controllers.is_empty() {
            let dir = std::path::Path::new("/sys/fs/cgroup").join(path);
            (read(dir.join("memory.max")), read(dir.join("memory.current")))
        } else if controllers.split(',').any(|c| c == "memory") {
            let dir = std::path::Path::new("/sys/fs/cgroup/memory").join(path);
            (read(dir.join("memory.limit_in_bytes")), read(dir.join("memory.usage_in_bytes")))
        } else {
            continue;
        };
        if let (Some(limit), Some(usage)) = (limit, usage) {
            avail = avail.min(limit.saturating_sub(usage));
        }
    }
    Some(avail)
}

/// Progress of a loader's warming ([`Loader::warm_progress`]): bytes read (set to `total`
/// when done) and bytes to read.
#[derive(Debug, Default)]
struct WarmProgress {
    done: AtomicU64,
    total: AtomicU64,
}

/// The default [`LoaderOptions::pool`]: rayon's global pool.
pub fn global_pool() -> Option<&'static rayon::ThreadPool> {
    None
}

impl Default for LoaderOptions {
    fn default() -> Self {
        LoaderOptions {
            rank: 0,
            world_size: 1,
            num_workers: 4,
            prefetch: 4,
            pool: global_pool,
            warm: Warm::Auto,
            on_error: OnError::Raise,
        }
    }
}

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

/// What a worker is asked to gather.
struct Job {
    step: u64,
    indices: Vec<u64>,
    sources: Vec<u32>,
    /// A packed loader's pieces of this rank's rows.
    pack: Option<pack::PackJob>,
}

/// Where the sampler thread takes its jobs from.
#[allow(clippy::large_enum_variant)] // one per loader, never moved in a loop
enum Planner {
    /// Batches of samples: the shard's slice of each global batch.
    Samples { shard: Shard, mixture: bool },
    /// Packed rows ([`Loader::packed`]).
    Packed(pack::RankPlanner),
}

impl Planner {
    fn next_job(&mut self) -> Result<Job, LoaderError> {
        match self {
            Planner::Samples { shard, mixture } => Ok(next_job(shard, *mixture)?),
            Planner::Packed(planner) => planner.next_job(),
        }
    }
}

type Produced = Result<LoaderBatch, LoaderError>;

/// What the threads read from; released on close so that the stores can close.
struct Shared {
    sources: Vec<Source>,
    /// Set for a [`Loader::fetching`] loader (`sources` is then empty).
    fetch: Option<Arc<dyn Fetch>>,
    pool: fn() -> Option<&'static rayon::ThreadPool>,
    buffers: Arc<BufferPool>,
    /// Set with [`OnError::Skip`]: the samples replaced so far.
    skips: Option<Arc<skip::Skips>>,
    /// Set by [`Loader::with_transform`].
    transform: Option<Arc<dyn Transform>>,
    /// Set for a packed loader, with its rows per rank.
    packing: Option<(pack::Packing, usize)>,
}

/// Field buffers that consumers gave back, for later batches to fill again.
///
/// A fresh buffer per batch costs more than the gather on large raw batches: the allocator
/// maps new pages, the kernel zeroes each one on its first touch, and the loader zeroes
/// them again. A consumer that is done with a batch's buffer (the Python binding does so
/// when the last array viewing it is freed) hands it to [`BufferPool::give`], and a later
/// batch with a field that fits it takes it instead of allocating. A buffer is only ever
/// given back by its owner, so no batch a caller still holds is written again.
///
/// A ragged field's buffer changes size from batch to batch, so buffers are matched by
/// capacity, not length: a new one gets [`BufferPool::ROOM`] to spare (address space: the
/// kernel backs pages only once they are touched), and a request takes the smallest that
/// holds it, unless that is over twice what it asks. When the pool is full, the buffer
/// given back longest ago goes, so buffers that nothing fits any more cannot crowd out
/// those that are reused.
#[derive(Debug, Default)]
pub struct BufferPool {
    /// Oldest first.
    free: Mutex<Vec<Vec<u8>>>,
}

impl BufferPool {
    /// Buffers kept at most, and bytes kept at most (by capacity).
    const KEEP: usize = 16;
    const KEEP_BYTES: usize = 512 << 20;

    /// A new buffer's spare capacity, as a fraction of its length: 1 / ROOM. The sum of a
    /// batch of 256 ragged samples of 256 to 768 tokens varies by about 2% from batch to
    /// batch; an eighth holds that many times over.
    const ROOM: usize = 8;

    /// A buffer of exactly `len` bytes: a given-back one (holding an earlier batch's bytes:
    /// the caller overwrites or clears every byte), or a new zeroed one. Its second value
    /// says whether it was reused.
    pub fn take(&self, len: usize) -> Result<(Vec<u8>, bool), Error> {
        let mut free = lock(&self.free);
        let fits = |b: &Vec<u8>| b.capacity() >= len && b.capacity() / 2 <= len;
        let best = free.iter().enumerate().filter(|(_, b)| fits(b)).min_by_key(|(_, b)| b.capacity()).map(|(k, _)| k);
        if let Some(k) = best {
            let mut buf = free.remove(k);
            drop(free);
            // Within the capacity: no reallocation; growing writes zeros past the old end.
            buf.resize(len, 0);
            return Ok((buf, true));
        }
        drop(free);
        let mut buf = Vec::new();
        buf.try_reserve_exact(len.saturating_add(len / Self::ROOM)).map_err(|_| Error::OutOfMemory)?;
        buf.resize(len, 0);
        Ok((buf, false))
    }

    /// Gives back a buffer a [`LoaderBatch`] field came in, once nothing reads it any more.
    pub fn give(&self, buf: Vec<u8>) {
        if buf.capacity() > Self::KEEP_BYTES {
            return;
        }
        let mut free = lock(&self.free);
        free.push(buf);
        let mut held: usize = free.iter().map(Vec::capacity).sum();
        while free.len() > Self::KEEP || held > Self::KEEP_BYTES {
            held -= free.remove(0).capacity();
        }
    }

    /// Buffers waiting to be reused.
    pub fn len(&self) -> usize {
        lock(&self.free).len()
    }

    /// True when no buffer waits to be reused.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

struct Consumer {
    /// One per worker; `None` once closed.
    queues: Option<Vec<Receiver<Produced>>>,
    /// The worker whose batch comes next.
    turn: usize,
    /// Set when a batch failed: every later `next()` returns it again.
    failure: Option<(Option<i32>, String, Option<Place>)>,
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
    /// The warming thread, apart from `threads` ([`Loader::threads_alive`] counts the
    /// sampler and the workers); joined by `shutdown` like them.
    warmer: Mutex<Option<JoinHandle<()>>>,
    /// With [`OnError::Skip`]: the samples replaced so far (kept after close).
    skips: Option<Arc<skip::Skips>>,
}

/// A packed loader's own state ([`Loader::packed`]).
struct Packed {
    packing: pack::Packing,
    /// `(step after, cursor)` of the last batch returned.
    last: Mutex<(u64, PackCursor)>,
    padding: AtomicU64,
    batches: AtomicU64,
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
    pub fn resume(
        stream: Stream,
        sources: Vec<Source>,
        options: LoaderOptions,
        state: &StreamState,
    ) -> Result<Loader, LoaderError> {
        let step = stream.resume(state)?;
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
        let mixture = docs.mixture_sources().is_some();
        let packing = pack::Packing::new(&pack, &sources, rows, mixture)?;
        let (step, cursor) = state.check_packed(&docs, &packing.spec, rows)?;
        Self::start(docs, Feed::Packed { sources, pack, rows, cursor: Some(cursor) }, options, step)
    }

    fn start(stream: Stream, feed: Feed, options: LoaderOptions, step: u64) -> Result<Loader, LoaderError> {
        let mixture = stream.mixture_sources().is_some();
        let mut packed = None;
        let (sources, fetch) = match feed {
            Feed::Sources(sources) => {
                check_sources(&stream, &sources)?;
                (sources, None)
            }
            Feed::Packed { sources, pack, rows, cursor } => {
                check_sources(&stream, &sources)?;
                if options.on_error == OnError::Skip {
                    return Err(LoaderError::Sources(
                        "on_error=skip cannot be used with packing: a replaced document would change every later row"
                            .into(),
                    ));
                }
                if options.world_size == 0 || rows % options.world_size != 0 || rows == 0 {
                    return Err(LoaderError::Stream(StreamError::WorldSize {
                        world_size: options.world_size,
                        global_batch: rows,
                    }));
                }
                let packing = pack::Packing::new(&pack, &sources, rows, mixture)?;
                packed = Some((packing, rows, cursor));
                (sources, None)
            }
            Feed::Fetch(fetch) => {
                if options.on_error == OnError::Skip {
                    return Err(LoaderError::Sources(
                        "on_error=skip replaces samples of zrecord datasets; a fetching loader's errors are its fetch's"
                            .into(),
                    ));
                }
                if stream.mixture_sources().is_some() {
                    return Err(LoaderError::Sources("a fetching loader reads one dataset, not a mixture".into()));
                }
                (Vec::new(), Some(fetch))
            }
        };
        let (planner, batch_size, packing) = match packed {
            None => {
                let mut shard = stream.shard(options.rank, options.world_size)?;
                shard.seek(step)?;
                let batch_size = shard.batch_size();
                // Make one batch's buffers now, so that an impossible batch size fails
                // here rather than inside a thread.
                zeroed::<u64>(batch_size)?;
                zeroed::<u32>(batch_size)?;
                for size in sources.first().map(Source::sample_sizes).unwrap_or_default() {
                    zeroed::<u8>(batch_size.checked_mul(size).ok_or(Error::OutOfMemory)?)?;
                }
                (Planner::Samples { shard, mixture }, batch_size, None)
            }
            Some((packing, rows, cursor)) => {
                if options.rank >= options.world_size {
                    return Err(LoaderError::Stream(StreamError::Rank {
                        rank: options.rank,
                        world_size: options.world_size,
                    }));
                }
                let per_rank = (rows / options.world_size) as usize;
                let cells = per_rank.checked_mul(packing.spec.seq_len as usize).ok_or(Error::OutOfMemory)?;
                zeroed::<u8>(cells.checked_mul(packing.item.max(4)).ok_or(Error::OutOfMemory)?)?;
                let planner = pack::RankPlanner::new(
                    &stream,
                    sources.clone(),
                    packing.clone(),
                    options.rank,
                    per_rank,
                    step,
                    cursor.as_ref(),
                )?;
                let last = planner.packer.cursor();
                let packed = Packed {
                    packing: packing.clone(),
                    last: Mutex::new((step, last)),
                    padding: AtomicU64::new(0),
                    batches: AtomicU64::new(0),
                };
                (Planner::Packed(planner), per_rank, Some((packed, (packing, per_rank))))
            }
        };
        let (packing, shared_packing) = match packing {
            Some((p, s)) => (Some(p), Some(s)),
            None => (None, None),
        };
        let buffers = Arc::new(BufferPool::default());
        let skips = (options.on_error == OnError::Skip).then(|| Arc::new(skip::Skips::default()));
        let mut loader = Loader {
            stream,
            rank: options.rank,
            world_size: options.world_size,
            batch_size,
            shared: Mutex::new(Some(Arc::new(Shared {
                sources,
                fetch,
                pool: options.pool,
                buffers: buffers.clone(),
                skips: skips.clone(),
                transform: None,
                packing: shared_packing,
            }))),
            buffers,
            stop: Arc::new(AtomicBool::new(false)),
            consumer: Mutex::new(Consumer { queues: None, turn: 0, failure: None }),
            consumed: Arc::new(AtomicU64::new(step)),
            threads: Mutex::new(Vec::new()),
            inline: None,
            pending: Mutex::new(None),
            packing,
            owner_pid: std::process::id(),
            warm: options.warm,
            warming: Mutex::new(None),
            warmer: Mutex::new(None),
            skips,
        };
        if options.num_workers == 0 {
            loader.inline = Some(Mutex::new(planner));
        } else {
            *lock(&loader.pending) = Some((planner, options.num_workers, options.prefetch.max(1)));
        }
        lock(&loader.consumer).queues = Some(Vec::new());
        loader.plan_remote_reads();
        Ok(loader)
    }

    /// For a dataset read from an object store, tells its cache when each sample is read
    /// next (from the stream and how far the caller has read), so that it evicts the data
    /// needed furthest ahead ([`crate::remote::file::Cache`]). Streams whose future is not
    /// a schedule (IID, mixtures, packed rows) leave the cache to its oldest-first rule.
    fn plan_remote_reads(&self) {
        if self.packing.is_some() || self.stream.mixture_sources().is_some() {
            return;
        }
        let Some(shared) = lock(&self.shared).clone() else { return };
        let Some(cache) = shared.sources.first().and_then(|s| s.data().cache()) else { return };
        let schedule = Mutex::new(zrecord_core::stream::Schedule::new(self.stream.clone()));
        let consumed = Arc::clone(&self.consumed);
        let global = self.stream.global_batch();
        cache.set_plan(Some(Arc::new(move |index| {
            let now = consumed.load(Ordering::Acquire).saturating_mul(global);
            lock(&schedule).next_use(index, now)
        })));
    }

    /// Starts the sampler and the workers (called by the first `next()`, under the
    /// consumer lock).
    fn spawn(
        &self,
        mut planner: Planner,
        shared: Arc<Shared>,
        workers: usize,
        prefetch: usize,
    ) -> std::io::Result<Vec<Receiver<Produced>>> {
        let mut threads = lock(&self.threads);
        let mut job_queues = Vec::with_capacity(workers);
        let mut batch_queues = Vec::with_capacity(workers);
        // `prefetch` batches ahead in all, spread over the workers' queues.
        let depth = prefetch.div_ceil(workers).max(1);
        for w in 0..workers {
            let (job_tx, job_rx) = sync_channel::<Result<Job, LoaderError>>(1);
            let (out_tx, out_rx) = sync_channel::<Produced>(depth);
            let shared = Arc::clone(&shared);
            let stop = Arc::clone(&self.stop);
            let handle = std::thread::Builder::new()
                .name(format!("zrecord-loader-{w}"))
                .spawn(move || worker(&shared, &stop, job_rx, out_tx))?;
            threads.push(handle);
            job_queues.push(job_tx);
            batch_queues.push(out_rx);
        }
        let stop = Arc::clone(&self.stop);
        // One dataset in an object store: its batches to come are announced ahead.
        let mut ahead = match (&planner, shared.sources.as_slice()) {
            (Planner::Samples { shard, mixture: false }, [source]) => ahead::ReadAhead::new(shard, source.data()),
            _ => None,
        };
        let handle = std::thread::Builder::new().name("zrecord-sampler".into()).spawn(move || {
            let mut turn = 0usize;
            while !stop.load(Ordering::Acquire) {
                // A failure (an allocation, a packed loader's table read) goes to the
                // worker whose turn it is, which hands it to the consumer in order.
                let job = planner.next_job();
                if let (Some(ahead), Ok(job)) = (ahead.as_mut(), &job) {
                    ahead.planned(job.step);
                }
                let failed = job.is_err();
                if job_queues[turn].send(job).is_err() || failed {
                    break;
                }
                turn = (turn + 1) % job_queues.len();
            }
        })?;
        threads.push(handle);
        drop(threads);
        self.start_warming(&shared)?;
        Ok(batch_queues)
    }

    /// Starts the warming thread if [`Warm`] says the stores should be warmed: each store
    /// once, in source and field order, stopping between pieces when the loader closes.
    fn start_warming(&self, shared: &Shared) -> std::io::Result<()> {
        if shared.fetch.is_some() {
            return Ok(()); // no stores of ours to warm
        }
        let mut stores: Vec<Arc<Zrecord>> = Vec::new();
        for source in &shared.sources {
            for store in source.data().stores() {
                if !stores.iter().any(|s| s.path() == store.path()) {
                    stores.push(Arc::clone(store));
                }
            }
        }
        let total: u64 = stores.iter().map(|s| s.footprint()).sum();
        let wanted = match self.warm {
            Warm::Never => false,
            Warm::Always => total > 0,
            Warm::Auto => zrecord_core::engine::worth_warming(total, available_memory()),
        };
        if !wanted {
            return Ok(());
        }
        let progress = Arc::new(WarmProgress::default());
        progress.total.store(total, Ordering::Release);
        let stop = Arc::clone(&self.stop);
        let shown = Arc::clone(&progress);
        let handle = std::thread::Builder::new().name("zrecord-warm".into()).spawn(move || {
            let mut before = 0u64;
            for store in stores {
                let mut keep_going = |done: u64, _total: u64| {
                    shown.done.store(before + done, Ordering::Release);
                    !stop.load(Ordering::Acquire)
                };
                // A store that cannot be read is reported by the batches that read it.
                let covered = store.warm(&mut keep_going).unwrap_or(0);
                before += covered;
                if stop.load(Ordering::Acquire) {
                    return;
                }
            }
            shown.done.store(total, Ordering::Release);
        })?;
        *lock(&self.warming) = Some(progress);
        *lock(&self.warmer) = Some(handle);
        Ok(())
    }

    /// How far the background warming of the stores has come ([`Warm`]): `(bytes read,
    /// bytes to read)`, equal once it is done; `None` when the loader does not warm (not
    /// started yet, no workers, [`Warm::Never`], or stores too large for [`Warm::Auto`]).
    pub fn warm_progress(&self) -> Option<(u64, u64)> {
        let progress = lock(&self.warming).clone()?;
        let total = progress.total.load(Ordering::Acquire);
        Some((progress.done.load(Ordering::Acquire).min(total), total))
    }

    fn forked(&self) -> bool {
        std::process::id() != self.owner_pid
    }

    /// Stops and joins every thread; idempotent.
    fn shutdown(&self) {
        self.stop.store(true, Ordering::Release);
        if let Some(shared) = lock(&self.shared).as_ref() {
            if let Some(cache) = shared.sources.first().and_then(|s| s.data().cache()) {
                cache.set_plan(None);
            }
        }
        // Waits at most one CONSUMER_POLL for a `next()` running in another thread.
        lock(&self.consumer).queues = None;
        let mut threads = std::mem::take(&mut *lock(&self.threads));
        threads.extend(lock(&self.warmer).take());
        if self.forked() {
            // Those threads live only in the parent; joining them here would never return.
            std::mem::forget(threads);
        } else {
            for t in threads {
                // A worker's panics are caught per batch, so join only fails on a bug; the
                // loader is being torn down either way.
                let _ = t.join();
            }
        }
        drop(lock(&self.shared).take());
    }

    /// The next batch, or `Ok(None)` once the loader is closed. The stream never ends.
    ///
    /// The first call of a loader with workers starts its threads ([`LoaderError::Spawn`]
    /// if the system refuses). A failed batch (a damaged record, say) is returned as its
    /// error, and the loader stops there: every later call returns [`LoaderError::Stopped`] with the same
    /// message, and [`Loader::state`] stays at the last batch returned.
    pub fn next(&self) -> Result<Option<LoaderBatch>, LoaderError> {
        if self.forked() && self.inline.is_none() {
            return Err(LoaderError::Forked);
        }
        let produced = if let Some(inline) = &self.inline {
            let Some(shared) = lock(&self.shared).clone() else { return Ok(None) };
            if let Some((code, message, at)) = &lock(&self.consumer).failure {
                return Err(LoaderError::Stopped { code: *code, message: message.clone(), at: at.clone() });
            }
            let job = lock(inline).next_job();
            match job {
                Ok(job) => make_batch(&shared, job),
                Err(e) => Err(e),
            }
        } else {
            let mut consumer = lock(&self.consumer);
            if let Some((code, message, at)) = &consumer.failure {
                return Err(LoaderError::Stopped { code: *code, message: message.clone(), at: at.clone() });
            }
            if let Some((shard, workers, prefetch)) = lock(&self.pending).take() {
                let Some(shared) = lock(&self.shared).clone() else { return Ok(None) };
                if self.stop.load(Ordering::Acquire) {
                    return Ok(None);
                }
                match self.spawn(shard, shared, workers, prefetch) {
                    Ok(queues) => consumer.queues = Some(queues),
                    Err(e) => {
                        drop(consumer);
                        self.shutdown();
                        return Err(LoaderError::Spawn(e));
                    }
                }
            }
            let turn = consumer.turn;
            loop {
                let Some(queues) = consumer.queues.as_ref() else { return Ok(None) };
                match queues[turn].recv_timeout(CONSUMER_POLL) {
                    Ok(batch) => {
                        consumer.turn = (turn + 1) % queues.len();
                        break batch;
                    }
                    Err(RecvTimeoutError::Timeout) if !self.stop.load(Ordering::Acquire) => continue,
                    Err(RecvTimeoutError::Timeout) => return Ok(None),
                    Err(RecvTimeoutError::Disconnected) if self.stop.load(Ordering::Acquire) => return Ok(None),
                    Err(RecvTimeoutError::Disconnected) => break Err(LoaderError::WorkerExited),
                }
            }
        };
        match produced {
            Ok(batch) => {
                if let (Some(packed), Some(info)) = (&self.packing, &batch.pack) {
                    let mut last = lock(&packed.last);
                    if batch.step + 1 > last.0 {
                        *last = (batch.step + 1, info.cursor.clone());
                    }
                    packed.padding.fetch_add(info.padding, Ordering::AcqRel);
                    packed.batches.fetch_add(1, Ordering::AcqRel);
                }
                // Batches come in stream order; `max` keeps the count from going back when
                // several threads call an inline loader's `next()` at once.
                self.consumed.fetch_max(batch.step + 1, Ordering::AcqRel);
                Ok(Some(batch))
            }
            Err(e) => {
                lock(&self.consumer).failure = Some((e.code(), e.to_string(), e.place()));
                Err(e)
            }
        }
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
    /// SEQUENTIAL, IID and mixture streams.
    pub fn steps_per_epoch(&self) -> Option<u64> {
        if self.packing.is_some() {
            return None; // rows are endless; epochs are the documents'
        }
        self.stream.steps_per_epoch()
    }

    /// `(epoch, step within it)` of global batch `step` (SHUFFLE over one dataset); `None`
    /// for endless streams, packed rows among them (their epochs are the documents').
    pub fn epoch_of(&self, step: u64) -> Option<(u64, u64)> {
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

fn check_sources(stream: &Stream, sources: &[Source]) -> Result<(), LoaderError> {
    let datasets = stream.datasets();
    if sources.len() != datasets.len() {
        return Err(LoaderError::Sources(format!(
            "the stream reads {} dataset(s) but {} source(s) were given",
            datasets.len(),
            sources.len()
        )));
    }
    for (s, (source, dataset)) in sources.iter().zip(datasets).enumerate() {
        if source.id() != *dataset {
            return Err(LoaderError::Sources(format!(
                "source {s} is {:?} but the stream was built for {dataset:?}: build the stream from the sources' id()",
                source.id()
            )));
        }
    }
    let sizes = sources[0].sample_sizes();
    if let Some(s) = sources.iter().position(|src| src.sample_sizes() != sizes) {
        return Err(LoaderError::Sources(format!(
            "the sources of a loader must have the same fields and sample sizes: source 0 has {sizes:?} bytes, \
             source {s} has {:?}",
            sources[s].sample_sizes()
        )));
    }
    let shape = sources[0].shape();
    if let Some(s) = sources.iter().position(|src| src.shape() != shape) {
        return Err(LoaderError::Sources(format!(
            "the sources of a loader must have the same fields: source {s}'s kinds, element sizes or padding \
             differ from source 0's"
        )));
    }
    Ok(())
}

/// The shard's next batch of indices (and sources, for a mixture).
fn next_job(shard: &mut Shard, mixture: bool) -> Result<Job, Error> {
    let n = shard.batch_size();
    let mut indices = zeroed::<u64>(n)?;
    let mut sources = zeroed::<u32>(n)?;
    let step = if mixture { shard.fill_with_sources(&mut indices, &mut sources) } else { shard.fill(&mut indices) };
    Ok(Job { step, indices, sources, pack: None })
}

fn worker(shared: &Shared, stop: &AtomicBool, jobs: Receiver<Result<Job, LoaderError>>, out: SyncSender<Produced>) {
    while let Ok(job) = jobs.recv() {
        if stop.load(Ordering::Acquire) {
            break;
        }
        let batch = job.and_then(|job| make_batch(shared, job));
        let failed = batch.is_err();
        if out.send(batch).is_err() || failed {
            break;
        }
    }
}

/// Gathers every field of a job, on the loader's pool, with panics caught; or, for a
/// fetching loader, calls the fetch on this thread (never on the pool: a fetch may wait
/// for a lock, such as Python's, that a thread waiting on the pool holds).
fn make_batch(shared: &Shared, job: Job) -> Produced {
    let panicked = |p: Box<dyn Any + Send>| {
        LoaderError::Panic(
            p.downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into()),
        )
    };
    let batch = if let Some(fetch) = &shared.fetch {
        let fetched = catch_unwind(AssertUnwindSafe(|| fetch.fetch(&job.indices))).map_err(panicked)?;
        let Job { step, indices, sources, .. } = job;
        LoaderBatch {
            step,
            indices,
            sources,
            fields: Vec::new(),
            ragged: Vec::new(),
            fetched: Some(fetched),
            pack: None,
        }
    } else {
        let run = || match (&shared.packing, &shared.skips) {
            (Some((packing, per_rank)), _) => {
                pack::gather_rows(&shared.sources, &shared.buffers, packing, *per_rank, job)
            }
            (None, Some(skips)) => skip::gather_skipping(&shared.sources, &shared.buffers, skips, job),
            (None, None) => gather::gather(&shared.sources, &shared.buffers, job),
        };
        let result = match (shared.pool)() {
            Some(pool) => catch_unwind(AssertUnwindSafe(|| pool.install(run))),
            None => catch_unwind(AssertUnwindSafe(run)),
        };
        result.map_err(panicked)?.map_err(LoaderError::Dataset)?
    };
    let Some(transform) = &shared.transform else { return Ok(batch) };
    // Never on the pool, as a fetch: a transform may wait for a lock (Python's) that a
    // thread waiting on the pool holds.
    let (step, indices, sources, pack) = (batch.step, batch.indices.clone(), batch.sources.clone(), batch.pack.clone());
    let out = catch_unwind(AssertUnwindSafe(|| transform.transform(batch))).map_err(panicked)?;
    Ok(LoaderBatch { step, indices, sources, fields: Vec::new(), ragged: Vec::new(), fetched: Some(out), pack })
}

/// What a loader reads: stores, or the caller's [`Fetch`].
enum Feed {
    Sources(Vec<Source>),
    Fetch(Arc<dyn Fetch>),
    /// Packed rows of `rows` per global batch, from the start or a saved cursor.
    Packed {
        sources: Vec<Source>,
        pack: PackOptions,
        rows: u64,
        cursor: Option<PackCursor>,
    },
}

#[cfg(test)]
mod tests {
    use super::BufferPool;

    #[test]
    fn pool_reuses_a_buffer_for_a_batch_of_another_length() {
        let pool = BufferPool::default();
        let (first, reused) = pool.take(1000).unwrap();
        assert!(!reused && first.len() == 1000 && first.iter().all(|&b| b == 0));
        let at = first.as_ptr();
        pool.give(first);
        // A ragged field's next batch, a little longer: the same memory, grown in place.
        let (mut next, reused) = pool.take(1100).unwrap();
        assert!(reused && next.len() == 1100 && next.as_ptr() == at);
        next.fill(7);
        pool.give(next);
        let (shorter, reused) = pool.take(900).unwrap();
        assert!(reused && shorter.len() == 900 && shorter.as_ptr() == at);
        pool.give(shorter);
        // Far smaller requests do not tie up a large buffer.
        let (small, reused) = pool.take(100).unwrap();
        assert!(!reused && small.len() == 100);
        assert_eq!(pool.len(), 1);
    }

    #[test]
    fn pool_takes_the_smallest_fit_and_drops_the_oldest_when_full() {
        let pool = BufferPool::default();
        let (big, _) = pool.take(4000).unwrap();
        let (small, _) = pool.take(2000).unwrap();
        let small_at = small.as_ptr();
        pool.give(big);
        pool.give(small);
        assert_eq!(pool.take(1900).unwrap().0.as_ptr(), small_at);
        pool.give(pool.take(10).unwrap().0);
        assert!(pool.take(10).unwrap().1, "a buffer that fits is reused");
        pool.give(Vec::with_capacity(10));
        for _ in 0..BufferPool::KEEP {
            pool.give(Vec::with_capacity(5000));
        }
        assert_eq!(pool.len(), BufferPool::KEEP);
        // The small buffer was given back before the others, so it went first.
        assert!(!pool.take(10).unwrap().1, "the oldest buffer was dropped");
    }
}
