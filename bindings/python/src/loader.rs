//! `zrecord._Pipeline`: the DataLoader's threads, which are the `zrecord` crate's
//! [`zrecord::Loader`] (sample → gather → collate over the core's stream).
//!
//! What is left here is what only Python needs: the GIL is released while a batch is
//! awaited or the threads are joined; each field's buffer becomes a numpy array's memory
//! without a copy (viewed as the dataset's dtype and shaped `(batch_size, *shape)`); errors
//! become the exceptions of their codes (state and stream errors are `ValueError`s); and
//! gathers made in a process forked from the importing one run on that process's own rayon
//! pool ([`crate::pool`]). The loader itself refuses `next()` in a forked child and never
//! joins threads that did not survive the fork.

use std::sync::Arc;

use numpy::ndarray::ArrayView1;
use numpy::PyArray1;
use pyo3::exceptions::{PyRuntimeError, PyStopIteration, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};
use zrecord::{BufferPool, Loader, LoaderError, LoaderOptions, Mixture, Source, Stream, StreamState, Warm};

use crate::error;
use crate::pool::loader_pool;
use crate::sampler::mode_from;
use crate::store::Zrecord;

/// How Python sees one field of a batch.
struct View {
    /// numpy dtype of one element.
    dtype: Py<PyAny>,
    /// `(batch_size, *sample_shape)`.
    shape: Py<PyTuple>,
}

impl View {
    /// Hands `buf` to numpy as this field's batch array, without copying it. The array's
    /// base is a [`BatchBuffer`], which gives the memory back to `pool` once the array and
    /// every view of it (a reshape, a slice, a torch tensor from `torch.from_numpy`) are gone.
    fn to_array<'py>(&self, py: Python<'py>, buf: Vec<u8>, pool: &Arc<BufferPool>) -> PyResult<Bound<'py, PyAny>> {
        let owner = Bound::new(py, BatchBuffer { buf, pool: pool.clone() })?;
        let bytes: &[u8] = &owner.get().buf;
        let view = ArrayView1::from(bytes);
        // SAFETY: the array views `owner.buf`, which `owner` (the array's base object, kept
        // alive by numpy for as long as the array or any view of it lives) owns and never
        // changes: the class is frozen, so the Vec is neither reallocated nor written through
        // it, and its memory is only handed back (in `Drop`) once `owner` itself is freed.
        let array = unsafe { PyArray1::borrow_from_array(&view, owner.clone().into_any()) };
        array.call_method1("view", (self.dtype.bind(py),))?.call_method1("reshape", (self.shape.bind(py),))
    }
}

/// The memory of one field of one batch, as the base object of its numpy array. When the
/// last array viewing it is freed, the buffer goes back to its loader's pool for a later
/// batch to fill ([`BufferPool`]): the batch a caller holds is never written again, and a
/// loop that drops each batch before the next reuses the same few buffers instead of
/// mapping, faulting in and zeroing fresh memory every step.
#[pyclass(module = "zrecord", frozen)]
struct BatchBuffer {
    buf: Vec<u8>,
    pool: Arc<BufferPool>,
}

impl Drop for BatchBuffer {
    fn drop(&mut self) {
        self.pool.give(std::mem::take(&mut self.buf));
    }
}

fn shaped(py: Python<'_>, batch_size: usize, shape: &Bound<'_, PyAny>) -> PyResult<Py<PyTuple>> {
    let mut dims: Vec<Bound<'_, PyAny>> = vec![batch_size.into_pyobject(py)?.into_any()];
    for d in shape.try_iter()? {
        dims.push(d?);
    }
    Ok(PyTuple::new(py, dims)?.unbind())
}

/// A loader error as the Python exception users expect.
fn to_py(py: Python<'_>, e: LoaderError) -> PyErr {
    match e {
        LoaderError::Store(e) => error::to_py(py, e),
        LoaderError::Stopped { code: Some(code), message } => error::zrecord_error(py, code, message),
        LoaderError::Stream(_) | LoaderError::State(_) | LoaderError::Sources(_) => {
            PyValueError::new_err(e.to_string())
        }
        LoaderError::Spawn(_) | LoaderError::Forked => PyRuntimeError::new_err(e.to_string()),
        other => error::zrecord_error(py, error::INTERNAL, other.to_string()),
    }
}

/// The threads behind `zrecord.DataLoader` (internal).
#[pyclass(module = "zrecord", name = "_Pipeline", frozen)]
pub struct Pipeline {
    loader: Loader,
    /// Where batch arrays give their memory back ([`BatchBuffer`]).
    buffers: Arc<BufferPool>,
    views: Vec<View>,
    /// True for a mixture: batches carry each sample's source.
    mixture: bool,
}

#[pymethods]
impl Pipeline {
    /// `sources`: one list of stores per source (one source, or one per mixture source),
    /// each with one store per field; `itemsizes`, `dtypes`, `shapes`: per field, shared
    /// by every source. `state`: a saved state as JSON text, or None to start at step 0.
    #[new]
    #[pyo3(signature = (sources, itemsizes, dtypes, shapes, batch_size, mode, seed, weights=None, rank=0,
                        world_size=1, num_workers=4, prefetch_size=4, state=None, warm=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        sources: &Bound<'_, PyList>,
        itemsizes: Vec<usize>,
        dtypes: Vec<Py<PyAny>>,
        shapes: &Bound<'_, PyList>,
        batch_size: i64,
        mode: i64,
        seed: u64,
        weights: Option<Vec<f64>>,
        rank: i64,
        world_size: i64,
        num_workers: i64,
        prefetch_size: i64,
        state: Option<&str>,
        warm: Option<bool>,
    ) -> PyResult<Self> {
        let num_workers =
            usize::try_from(num_workers).map_err(|_| PyValueError::new_err("num_workers must be >= 0"))?;
        let batch_size = u64::try_from(batch_size)
            .ok()
            .filter(|&b| b >= 1)
            .ok_or_else(|| PyValueError::new_err("batch_size must be >= 1"))?;
        let world_size = u64::try_from(world_size)
            .ok()
            .filter(|&w| w >= 1)
            .ok_or_else(|| PyValueError::new_err(format!("world_size must be >= 1, got {world_size}")))?;
        let rank = u64::try_from(rank)
            .ok()
            .filter(|&r| r < world_size)
            .ok_or_else(|| PyValueError::new_err(format!("rank must be in 0..{world_size}, got {rank}")))?;
        let global = batch_size.checked_mul(world_size).ok_or_else(|| {
            PyValueError::new_err(format!("batch_size * world_size ({batch_size} * {world_size}) is too large"))
        })?;
        let mode = mode_from(mode)?;
        if itemsizes.len() != dtypes.len() || itemsizes.len() != shapes.len() {
            return Err(PyValueError::new_err("one itemsize, dtype and shape per field"));
        }
        let mut built = Vec::with_capacity(sources.len());
        for source in sources.iter() {
            let stores: Vec<Bound<'_, Zrecord>> = source.extract()?;
            if stores.len() != itemsizes.len() {
                return Err(PyValueError::new_err("every source needs one store per field"));
            }
            let mut fields = Vec::with_capacity(stores.len());
            for (store, &size) in stores.iter().zip(&itemsizes) {
                fields.push((store.get().handle(py)?, size));
            }
            built.push(py.detach(|| Source::new(fields)).map_err(|e| to_py(py, e))?);
        }
        let ids: Vec<_> = built.iter().map(Source::id).collect();
        let stream = match weights {
            None => {
                let [id] = ids[..] else {
                    return Err(PyValueError::new_err("more than one source needs mixture weights"));
                };
                Stream::new(id, mode, seed, global)
            }
            Some(weights) => Mixture::new(ids, weights).and_then(|m| Stream::mixture(m, seed, global)),
        }
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
        let options = LoaderOptions {
            rank,
            world_size,
            num_workers,
            prefetch: usize::try_from(prefetch_size).unwrap_or(0).max(1),
            pool: loader_pool,
            warm: match warm {
                None => Warm::Auto,
                Some(true) => Warm::Always,
                Some(false) => Warm::Never,
            },
        };
        let mixture = stream.mixture_sources().is_some();
        let loader = match state {
            None => py.detach(|| Loader::new(stream, built, options)),
            Some(text) => {
                let state = StreamState::decode(text).map_err(|e| PyValueError::new_err(e.to_string()))?;
                py.detach(|| Loader::resume(stream, built, options, &state))
            }
        }
        .map_err(|e| to_py(py, e))?;
        let per_rank = loader.batch_size();
        let views = dtypes
            .into_iter()
            .zip(shapes.iter())
            .map(|(dtype, shape)| Ok(View { dtype, shape: shaped(py, per_rank, &shape)? }))
            .collect::<PyResult<Vec<_>>>()?;
        Ok(Pipeline { buffers: loader.buffers(), loader, views, mixture })
    }

    /// The next batch: a tuple of one array per field, and for a mixture the int32 array
    /// of each sample's source last. StopIteration once closed.
    fn next<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let batch = match py.detach(|| self.loader.next()) {
            Ok(Some(batch)) => batch,
            Ok(None) => return Err(PyStopIteration::new_err(())),
            Err(e) => return Err(to_py(py, e)),
        };
        let mut items = Vec::with_capacity(self.views.len() + 1);
        for (view, buf) in self.views.iter().zip(batch.fields) {
            items.push(view.to_array(py, buf, &self.buffers)?);
        }
        if self.mixture {
            // Source numbers are below the number of sources, far below 2^31: the u32
            // buffer is the int32 array's memory as it is.
            let numpy = py.import("numpy")?;
            items.push(PyArray1::from_vec(py, batch.sources).call_method1("view", (numpy.getattr("int32")?,))?);
        }
        PyTuple::new(py, items)
    }

    /// The resume state after the last batch `next()` returned, as one line of JSON.
    fn state(&self) -> String {
        self.loader.state().encode()
    }

    /// Global batches consumed: the step of the next batch.
    #[getter]
    fn step(&self) -> u64 {
        self.loader.step()
    }

    /// Samples per batch of this rank.
    #[getter]
    fn batch_size(&self) -> usize {
        self.loader.batch_size()
    }

    /// Batches per epoch (SHUFFLE over one dataset), else None.
    #[getter]
    fn steps_per_epoch(&self) -> Option<u64> {
        self.loader.steps_per_epoch()
    }

    /// Stop and join every thread, then let go of the stores. Idempotent; returns once no
    /// thread is left.
    fn close(&self, py: Python<'_>) {
        py.detach(|| self.loader.close());
    }

    /// True once `close()` has been called.
    #[getter]
    fn closed(&self) -> bool {
        self.loader.is_closed()
    }

    /// Number of threads still running (0 after `close()`).
    #[getter]
    fn threads_alive(&self) -> usize {
        self.loader.threads_alive()
    }

    /// `(bytes read, bytes to read)` of the background warming, or None when the loader
    /// does not warm.
    #[getter]
    fn warm_progress(&self) -> Option<(u64, u64)> {
        self.loader.warm_progress()
    }
}

impl Drop for Pipeline {
    fn drop(&mut self) {
        // Dropped by Python's garbage collector, so attached: join without holding the GIL
        // (workers never need it, but other Python threads should not wait for the join).
        Python::attach(|py| py.detach(|| self.loader.close()));
    }
}

/// The stream for datasets that are not zrecord stores (served by Python threads): rank
/// `rank`'s batches of indices, with the step each belongs to (internal).
///
/// The same core [`zrecord::Shard`] the native loader reads; the dataset is known only by
/// its length (generation 0).
#[pyclass(module = "zrecord", name = "_StreamShard")]
pub struct StreamShard {
    stream: Stream,
    shard: zrecord::Shard,
}

#[pymethods]
impl StreamShard {
    #[new]
    #[pyo3(signature = (length, batch_size, mode, seed, rank=0, world_size=1, state=None))]
    fn new(
        length: u64,
        batch_size: u64,
        mode: i64,
        seed: u64,
        rank: u64,
        world_size: u64,
        state: Option<&str>,
    ) -> PyResult<Self> {
        let value_error = |e: &dyn std::fmt::Display| PyValueError::new_err(e.to_string());
        let global = batch_size
            .checked_mul(world_size)
            .ok_or_else(|| PyValueError::new_err("batch_size * world_size is too large"))?;
        let dataset = zrecord::DatasetId { length, generation: 0 };
        let stream = Stream::new(dataset, mode_from(mode)?, seed, global).map_err(|e| value_error(&e))?;
        let mut shard = stream.shard(rank, world_size).map_err(|e| value_error(&e))?;
        if let Some(text) = state {
            let state = StreamState::decode(text).map_err(|e| value_error(&e))?;
            let step = stream.resume(&state).map_err(|e| value_error(&e))?;
            shard.seek(step).map_err(|e| value_error(&e))?;
        }
        Ok(StreamShard { stream, shard })
    }

    /// `(step, indices)`: the next batch's global step and its uint64 indices.
    fn next<'py>(&mut self, py: Python<'py>) -> PyResult<(u64, Bound<'py, PyArray1<u64>>)> {
        let mut indices = crate::buffers::zeroed::<u64>(self.shard.batch_size()).map_err(|e| error::to_py(py, e))?;
        let step = self.shard.fill(&mut indices);
        Ok((step, PyArray1::from_vec(py, indices)))
    }

    /// The state after global batches `0..step` were consumed, as one line of JSON.
    fn state(&self, step: u64) -> String {
        self.stream.state(step).encode()
    }

    /// The global batch the next `next()` reads.
    #[getter]
    fn step(&self) -> u64 {
        self.shard.step()
    }

    /// Batches per epoch (SHUFFLE), else None.
    #[getter]
    fn steps_per_epoch(&self) -> Option<u64> {
        self.stream.steps_per_epoch()
    }
}
