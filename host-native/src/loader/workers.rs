//! The loader's threads: the sampler plans a [`Job`] per batch ([`Planner`]) and deals the
//! jobs round-robin to the workers, each of which makes its batches ([`make_batch`]: a
//! gather, a packed gather, or the caller's fetch, then the transform) and queues them for
//! the consumer. Shutdown is by the stop flag and closed queues (see the module docs of
//! [`loader`](super)).

use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;

use zrecord_core::stream::Shard;

use super::{ahead, gather, pack, skip, zeroed, BufferPool, Fetch, LoaderBatch, LoaderError, Source, Transform};
use crate::Error;

/// What a worker is asked to gather.
pub(super) struct Job {
    pub(super) step: u64,
    pub(super) indices: Vec<u64>,
    pub(super) sources: Vec<u32>,
    /// A packed loader's pieces of this rank's rows.
    pub(super) pack: Option<pack::PackJob>,
}

/// Where the sampler thread takes its jobs from.
#[allow(clippy::large_enum_variant)] // one per loader, never moved in a loop
pub(super) enum Planner {
    /// Batches of samples: the shard's slice of each global batch.
    Samples { shard: Shard, mixture: bool },
    /// Packed rows ([`Loader::packed`](super::Loader::packed)).
    Packed(pack::RankPlanner),
}

impl Planner {
    pub(super) fn next_job(&mut self) -> Result<Job, LoaderError> {
        match self {
            Planner::Samples { shard, mixture } => Ok(next_job(shard, *mixture)?),
            Planner::Packed(planner) => planner.next_job(),
        }
    }
}

pub(super) type Produced = Result<LoaderBatch, LoaderError>;

/// What the threads read from; released on close so that the stores can close.
pub(super) struct Shared {
    pub(super) sources: Vec<Source>,
    /// Set for a [`Loader::fetching`](super::Loader::fetching) loader (`sources` is then
    /// empty).
    pub(super) fetch: Option<Arc<dyn Fetch>>,
    pub(super) pool: fn() -> Option<&'static rayon::ThreadPool>,
    pub(super) buffers: Arc<BufferPool>,
    /// Set with [`OnError::Skip`](super::OnError::Skip): the samples replaced so far.
    pub(super) skips: Option<Arc<skip::Skips>>,
    /// Set by [`Loader::with_transform`](super::Loader::with_transform).
    pub(super) transform: Option<Arc<dyn Transform>>,
    /// Set for a packed loader, with its rows per rank.
    pub(super) packing: Option<(pack::Packing, usize)>,
    /// The global step up to which the read-ahead has announced batches: the remote
    /// cache's plan keeps what they need ([`crate::remote::plan::Plan::horizon`]).
    pub(super) announced: Arc<std::sync::atomic::AtomicU64>,
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
pub(super) fn make_batch(shared: &Shared, job: Job) -> Produced {
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
            valid: 0, // set by Loader::next
            replaced: Vec::new(),
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
    Ok(LoaderBatch {
        step,
        indices,
        sources,
        fields: Vec::new(),
        ragged: Vec::new(),
        fetched: Some(out),
        pack,
        valid: 0,
        replaced: Vec::new(),
    })
}

/// Starts the sampler and the workers, adding their handles to `threads` as each starts
/// (so that a failure leaves those already running to be stopped and joined), and returns
/// the workers' batch queues in the order their batches come.
pub(super) fn spawn_threads(
    mut planner: Planner,
    shared: &Arc<Shared>,
    workers: usize,
    prefetch: usize,
    stop: &Arc<AtomicBool>,
    threads: &mut Vec<JoinHandle<()>>,
) -> std::io::Result<Vec<Receiver<Produced>>> {
    let mut job_queues = Vec::with_capacity(workers);
    let mut batch_queues = Vec::with_capacity(workers);
    // `prefetch` batches ahead in all, spread over the workers' queues.
    let depth = prefetch.div_ceil(workers).max(1);
    for w in 0..workers {
        let (job_tx, job_rx) = sync_channel::<Result<Job, LoaderError>>(1);
        let (out_tx, out_rx) = sync_channel::<Produced>(depth);
        let shared = Arc::clone(shared);
        let stop = Arc::clone(stop);
        let handle = std::thread::Builder::new()
            .name(format!("zrecord-loader-{w}"))
            .spawn(move || worker(&shared, &stop, job_rx, out_tx))?;
        threads.push(handle);
        job_queues.push(job_tx);
        batch_queues.push(out_rx);
    }
    let stop = Arc::clone(stop);
    // One dataset: its batches to come are announced ahead.
    let mut ahead = match (&planner, shared.sources.as_slice()) {
        (Planner::Samples { shard, mixture: false }, [source]) => {
            Some(ahead::ReadAhead::new(shard, source.data(), shared.announced.clone()))
        }
        _ => None,
    };
    let handle = std::thread::Builder::new().name("zrecord-sampler".into()).spawn(move || {
        let mut turn = 0usize;
        while !stop.load(Ordering::Acquire) {
            // A failure (an allocation, a packed loader's table read) goes to the
            // worker whose turn it is, which hands it to the consumer in order.
            let job = planner.next_job();
            if stop.load(Ordering::Acquire) {
                break; // closing: announce nothing more
            }
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
    Ok(batch_queues)
}
