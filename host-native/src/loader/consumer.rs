//! The caller's side of a running loader. Starting the threads, taking their batches in
//! turn and shutting them down all work on the consumer's queues under the one consumer
//! lock, and the order in which they do it is what keeps a close prompt (a `next` waiting
//! in another thread ends within `CONSUMER_POLL`) and a state exact (only what `next`
//! returned counts). They are kept together here so that this order reads in one place,
//! apart from how a loader is built and what it reports.

use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::Duration;

use super::workers::{self, make_batch, Planner, Produced, Shared};
use super::{lock, warm, Loader, LoaderBatch, LoaderError, Place};

/// How often a waiting [`Loader::next`] checks whether another thread closed the loader.
const CONSUMER_POLL: Duration = Duration::from_millis(50);

pub(super) struct Consumer {
    /// One per worker; `None` once closed.
    pub(super) queues: Option<Vec<Receiver<Produced>>>,
    /// The worker whose batch comes next.
    pub(super) turn: usize,
    /// Set when a batch failed: every later `next()` returns it again.
    pub(super) failure: Option<(Option<i32>, String, Option<Place>)>,
}

impl Loader {
    /// Starts the sampler, the workers and the warming (called by the first `next()`,
    /// under the consumer lock).
    fn spawn(
        &self,
        planner: Planner,
        shared: Arc<Shared>,
        workers: usize,
        prefetch: usize,
    ) -> std::io::Result<Vec<Receiver<Produced>>> {
        let queues = workers::spawn_threads(planner, &shared, workers, prefetch, &self.stop, &mut lock(&self.threads))?;
        if let Some((progress, handle)) = warm::start_warming(&shared, self.warm, &self.stop)? {
            *lock(&self.warming) = Some(progress);
            *lock(&self.warmer) = Some(handle);
        }
        Ok(queues)
    }

    fn forked(&self) -> bool {
        std::process::id() != self.owner_pid
    }

    /// Stops and joins every thread; idempotent.
    pub(super) fn shutdown(&self) {
        self.stop.store(true, Ordering::Release);
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
        // Only now, with no worker left gathering, does a remote cache lose the plan and
        // the ranges read ahead: before, the batches the workers were finishing found
        // their ranges dropped (oldest first, in flight or not) and fetched them again one
        // record at a time, so a close at 20 ms a request took up to 1.2 s.
        if let Some(shared) = lock(&self.shared).as_ref() {
            if let Some(cache) = shared.sources.first().and_then(|s| s.data().cache()) {
                cache.set_plan(None);
            }
        }
        lock(&self.streaming).clear();
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
        if self.ended.load(Ordering::Acquire) || self.pass.is_some_and(|p| self.step() >= p.steps()) {
            return Ok(None);
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
            Ok(mut batch) => {
                batch.valid = match &self.pass {
                    Some(pass) => {
                        let b = self.batch_size as u64;
                        pass.valid(batch.step, self.rank * b, b) as usize
                    }
                    None => self.batch_size,
                };
                if let (Some(packed), Some(info)) = (&self.packing, &batch.pack) {
                    if info.last {
                        self.ended.store(true, Ordering::Release);
                    }
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
}
