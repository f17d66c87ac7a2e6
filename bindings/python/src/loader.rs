//! `zrecord._Pipeline`: the DataLoader's sample → gather → collate stages, in Rust threads.
//!
//! loaderx 0.5.4 runs these stages in Python threads, so every batch takes turns on the
//! GIL. Here they never touch Python: one sampler thread draws index batches and deals
//! them round-robin to `num_workers` worker threads; each worker gathers the data and label
//! records of its batch straight into two fresh buffers (which later become the numpy
//! arrays' memory, so nothing is copied) and queues them. The consumer (`next()`, called by
//! `DataLoader.__next__`) takes batches from the workers in the same round-robin order, so
//! batch `k` is always the sampler's `k`-th draw: a seed fixes the whole stream, however
//! many workers there are. Queues are bounded (`prefetch_size` batches ahead in all).
//!
//! Shutdown needs no polling in the workers: `close()` raises the stop flag and drops the
//! consumer's receivers. A worker blocked on a full queue then fails its send and exits,
//! dropping its index queue; the sampler, blocked on that queue or checking the flag, exits
//! and drops the rest; workers waiting for indices then see their queue closed. `close()`
//! joins them all. Only the consumer waits with a timeout, so that a `close()` from another
//! thread also ends a `next()` that is waiting.
//!
//! Fork: threads do not survive `fork()`. In a child, `next()` raises and `close()` only
//! lets go of the (thread-less) handles, never joining a thread that is not there.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use numpy::PyArray1;
use pyo3::exceptions::{PyRuntimeError, PyStopIteration, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::buffers::zeroed;
use crate::error;
use crate::pool::on_pool;
use crate::sampler::Sampler;
use crate::store::Zrecord;

/// How often a waiting `next()` checks whether another thread closed the loader.
const CONSUMER_POLL: Duration = Duration::from_millis(50);

/// One side of a batch (data or label): where it comes from and how Python sees it.
struct Column {
    store: Arc<zrecord::Zrecord>,
    itemsize: usize,
    /// numpy dtype of one element.
    dtype: Py<PyAny>,
    /// `(batch_size, *sample_shape)`.
    shape: Py<PyTuple>,
}

impl Column {
    fn fetch(&self, idxs: &[u64]) -> Result<Vec<u8>, zrecord::Error> {
        // Zeroed, not uninitialised: the gather API takes `&mut [u8]`. The allocation comes
        // from `malloc` (align 1 <= the system allocator's minimum), so it is aligned for
        // every numpy dtype, as numpy's own allocations are.
        let len = idxs.len().checked_mul(self.itemsize).ok_or(zrecord::Error::OutOfMemory)?;
        let mut buf = zeroed::<u8>(len)?;
        self.store.gather(idxs, &mut buf, self.itemsize)?;
        Ok(buf)
    }

    /// Hands `buf` to numpy as this column's batch array, without copying it.
    fn to_array<'py>(&self, py: Python<'py>, buf: Vec<u8>) -> PyResult<Bound<'py, PyAny>> {
        PyArray1::from_vec(py, buf)
            .call_method1("view", (self.dtype.bind(py),))?
            .call_method1("reshape", (self.shape.bind(py),))
    }
}

/// Why a batch could not be made.
enum Failure {
    Store(zrecord::Error),
    Panic(String),
}

type Batch = Result<(Vec<u8>, Vec<u8>), Failure>;

fn fetch_batch(data: &Column, label: &Column, idxs: &[u64]) -> Batch {
    let run = || -> Result<(Vec<u8>, Vec<u8>), zrecord::Error> { Ok((data.fetch(idxs)?, label.fetch(idxs)?)) };
    match catch_unwind(AssertUnwindSafe(|| on_pool(run))) {
        Ok(r) => r.map_err(Failure::Store),
        Err(p) => Err(Failure::Panic(
            p.downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into()),
        )),
    }
}

struct Consumer {
    /// One per worker; `None` once closed.
    queues: Option<Vec<Receiver<Batch>>>,
    /// The worker whose batch comes next.
    turn: usize,
    /// Set when a batch failed: every later `next()` raises it again.
    failure: Option<(i32, String)>,
}

/// The state of a loader with `num_workers == 0`: batches are made inside `next()`.
struct Inline {
    sampler: zrecord::Sampler,
}

/// The sample → gather → collate pipeline behind `zrecord.DataLoader` (internal).
#[pyclass(module = "zrecord", name = "_Pipeline", frozen)]
pub struct Pipeline {
    /// The data and label sides; taken on close, releasing the stores (so that, e.g., a
    /// `delete` can have them to itself again).
    columns: Mutex<Option<Columns>>,
    stop: Arc<AtomicBool>,
    consumer: Mutex<Consumer>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    inline: Option<Mutex<Inline>>,
    owner_pid: u32,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section here leaves its state whole, so a poisoned lock is still sound.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn shaped(py: Python<'_>, batch_size: usize, shape: &Bound<'_, PyAny>) -> PyResult<Py<PyTuple>> {
    let mut dims: Vec<Bound<'_, PyAny>> = vec![batch_size.into_pyobject(py)?.into_any()];
    for d in shape.try_iter()? {
        dims.push(d?);
    }
    Ok(PyTuple::new(py, dims)?.unbind())
}

type Columns = (Arc<Column>, Arc<Column>);

impl Pipeline {
    fn spawn(
        &self,
        mut sampler: zrecord::Sampler,
        workers: usize,
        prefetch: usize,
    ) -> std::io::Result<Vec<Receiver<Batch>>> {
        let mut threads = lock(&self.threads);
        let mut index_queues = Vec::with_capacity(workers);
        let mut batch_queues = Vec::with_capacity(workers);
        // `prefetch` batches ahead in all, spread over the workers' queues.
        let depth = prefetch.div_ceil(workers).max(1);
        for w in 0..workers {
            let (idx_tx, idx_rx) = sync_channel::<Vec<u64>>(1);
            let (out_tx, out_rx) = sync_channel::<Batch>(depth);
            let Some((data, label)) = lock(&self.columns).clone() else {
                return Err(std::io::Error::other("loader closed"));
            };
            let stop = Arc::clone(&self.stop);
            let handle = std::thread::Builder::new()
                .name(format!("zrecord-loader-{w}"))
                .spawn(move || worker(&data, &label, &stop, idx_rx, out_tx))?;
            threads.push(handle);
            index_queues.push(idx_tx);
            batch_queues.push(out_rx);
        }
        let stop = Arc::clone(&self.stop);
        let handle = std::thread::Builder::new().name("zrecord-sampler".into()).spawn(move || {
            let mut turn = 0usize;
            while !stop.load(Ordering::Acquire) {
                // The constructor made a batch of this size, so this allocation succeeds as
                // surely as any other; if it does not, the consumer hears of it (queues close).
                let Ok(mut idxs) = zeroed::<u64>(sampler.batch_size()) else { break };
                sampler.fill(&mut idxs);
                if index_queues[turn].send(idxs).is_err() {
                    break;
                }
                turn = (turn + 1) % index_queues.len();
            }
        })?;
        threads.push(handle);
        Ok(batch_queues)
    }

    fn forked(&self) -> bool {
        std::process::id() != self.owner_pid
    }

    /// Stops and joins every thread; idempotent.
    fn shutdown(&self) {
        self.stop.store(true, Ordering::Release);
        // Waits at most one CONSUMER_POLL for a `next()` running in another thread.
        lock(&self.consumer).queues = None;
        let threads = std::mem::take(&mut *lock(&self.threads));
        if self.forked() {
            // Those threads live only in the parent; joining them here would never return.
            std::mem::forget(threads);
            return;
        }
        for t in threads {
            // A worker's panics are caught per batch, so join only fails on a bug; the
            // loader is being torn down either way.
            let _ = t.join();
        }
    }

    fn raise(py: Python<'_>, failure: &(i32, String)) -> PyErr {
        error::zrecord_error(py, failure.0, failure.1.clone())
    }
}

fn worker(data: &Column, label: &Column, stop: &AtomicBool, indices: Receiver<Vec<u64>>, out: SyncSender<Batch>) {
    while let Ok(idxs) = indices.recv() {
        if stop.load(Ordering::Acquire) {
            break;
        }
        let batch = fetch_batch(data, label, &idxs);
        let failed = batch.is_err();
        if out.send(batch).is_err() || failed {
            break;
        }
    }
}

#[pymethods]
impl Pipeline {
    #[new]
    #[pyo3(signature = (data, data_itemsize, data_dtype, data_shape, label, label_itemsize, label_dtype,
                        label_shape, num_workers, batch_size, prefetch_size, mode, seed))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        data: &Bound<'_, Zrecord>,
        data_itemsize: usize,
        data_dtype: Py<PyAny>,
        data_shape: &Bound<'_, PyAny>,
        label: &Bound<'_, Zrecord>,
        label_itemsize: usize,
        label_dtype: Py<PyAny>,
        label_shape: &Bound<'_, PyAny>,
        num_workers: i64,
        batch_size: i64,
        prefetch_size: i64,
        mode: i64,
        seed: u64,
    ) -> PyResult<Self> {
        let workers = usize::try_from(num_workers).map_err(|_| PyValueError::new_err("num_workers must be >= 0"))?;
        let sampler = Sampler::build(py, i64::from(data.get().handle(py)?.len()), batch_size, mode, seed)?;
        let bs = sampler.batch_size();
        let data = Column {
            store: data.get().handle(py)?,
            itemsize: data_itemsize,
            dtype: data_dtype,
            shape: shaped(py, bs, data_shape)?,
        };
        let label = Column {
            store: label.get().handle(py)?,
            itemsize: label_itemsize,
            dtype: label_dtype,
            shape: shaped(py, bs, label_shape)?,
        };
        // Make one batch now, so that an impossible batch size fails here, as a MemoryError,
        // rather than inside a thread.
        let probe = || -> Result<(), zrecord::Error> {
            zeroed::<u64>(bs)?;
            for itemsize in [data_itemsize, label_itemsize] {
                zeroed::<u8>(bs.checked_mul(itemsize).ok_or(zrecord::Error::OutOfMemory)?)?;
            }
            Ok(())
        };
        probe().map_err(|e| error::to_py(py, e))?;
        let prefetch = usize::try_from(prefetch_size).unwrap_or(0).max(1);
        let mut pipeline = Pipeline {
            columns: Mutex::new(Some((Arc::new(data), Arc::new(label)))),
            stop: Arc::new(AtomicBool::new(false)),
            consumer: Mutex::new(Consumer { queues: None, turn: 0, failure: None }),
            threads: Mutex::new(Vec::new()),
            inline: None,
            owner_pid: std::process::id(),
        };
        if workers == 0 {
            pipeline.inline = Some(Mutex::new(Inline { sampler }));
            lock(&pipeline.consumer).queues = Some(Vec::new());
        } else {
            match pipeline.spawn(sampler, workers, prefetch) {
                Ok(queues) => lock(&pipeline.consumer).queues = Some(queues),
                Err(e) => {
                    pipeline.shutdown();
                    return Err(PyRuntimeError::new_err(format!("cannot start DataLoader threads: {e}")));
                }
            }
        }
        Ok(pipeline)
    }

    /// The next `(data, label)` batch; StopIteration once closed.
    fn next<'py>(&self, py: Python<'py>) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyAny>)> {
        if self.forked() && self.inline.is_none() {
            return Err(PyRuntimeError::new_err(
                "this DataLoader was created in a parent process and has no threads after fork(); \
                 create a new DataLoader in the child",
            ));
        }
        enum Got {
            Batch(Batch),
            Closed,
            Failed((i32, String)),
        }
        let Some((data, label)) = lock(&self.columns).clone() else {
            return Err(PyStopIteration::new_err(()));
        };
        let (data, label) = (&*data, &*label);
        let got = if let Some(inline) = &self.inline {
            if lock(&self.consumer).queues.is_none() {
                Got::Closed
            } else {
                let mut sampler = lock(inline);
                match zeroed::<u64>(sampler.sampler.batch_size()) {
                    Ok(mut idxs) => {
                        sampler.sampler.fill(&mut idxs);
                        drop(sampler);
                        Got::Batch(py.detach(|| fetch_batch(data, label, &idxs)))
                    }
                    Err(e) => Got::Batch(Err(Failure::Store(e))),
                }
            }
        } else {
            py.detach(|| {
                let mut consumer = lock(&self.consumer);
                if let Some(f) = &consumer.failure {
                    return Got::Failed(f.clone());
                }
                let turn = consumer.turn;
                loop {
                    let Some(queues) = consumer.queues.as_ref() else { return Got::Closed };
                    match queues[turn].recv_timeout(CONSUMER_POLL) {
                        Ok(batch) => {
                            consumer.turn = (turn + 1) % queues.len();
                            return Got::Batch(batch);
                        }
                        Err(RecvTimeoutError::Timeout) if !self.stop.load(Ordering::Acquire) => continue,
                        Err(RecvTimeoutError::Timeout) => return Got::Closed,
                        Err(RecvTimeoutError::Disconnected) => {
                            return if self.stop.load(Ordering::Acquire) {
                                Got::Closed
                            } else {
                                Got::Failed((error::INTERNAL, "DataLoader worker exited unexpectedly".into()))
                            }
                        }
                    }
                }
            })
        };
        match got {
            Got::Batch(Ok((d, l))) => Ok((data.to_array(py, d)?, label.to_array(py, l)?)),
            Got::Batch(Err(failure)) => {
                let failure = match failure {
                    Failure::Store(e) => (e.code(), e.to_string()),
                    Failure::Panic(what) => (error::INTERNAL, format!("internal error (please report): {what}")),
                };
                lock(&self.consumer).failure = Some(failure.clone());
                Err(Self::raise(py, &failure))
            }
            Got::Failed(failure) => Err(Self::raise(py, &failure)),
            Got::Closed => Err(PyStopIteration::new_err(())),
        }
    }

    /// Stop and join every thread, then let go of the stores. Idempotent; returns once no
    /// thread is left.
    fn close(&self, py: Python<'_>) {
        py.detach(|| self.shutdown());
        // Dropped attached: the columns hold Python objects (dtype, shape).
        drop(lock(&self.columns).take());
    }

    /// True once `close()` has been called.
    #[getter]
    fn closed(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// Number of threads still running (0 after `close()`).
    #[getter]
    fn threads_alive(&self) -> usize {
        lock(&self.threads).iter().filter(|t| !t.is_finished()).count()
    }
}

impl Drop for Pipeline {
    fn drop(&mut self) {
        // Dropped by Python's garbage collector, so attached: join without holding the GIL
        // (workers never need it, but other Python threads should not wait for the join).
        Python::attach(|py| py.detach(|| self.shutdown()));
    }
}
