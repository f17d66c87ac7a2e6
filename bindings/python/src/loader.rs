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
//!
//! A dataset that is not zrecord's (anything with `__getitems__`) is read by the same
//! loader ([`zrecord::Loader::fetching`]): its workers call a Python function ([`PyFetch`])
//! with each batch's indices, holding the GIL only for that call.
//!
//! Which arguments a pipeline accepts is the host's rule ([`zrecord::loader::LoaderSpec`],
//! checked by [`zrecord::Loader::from_spec`]), so `_Pipeline(...)` only turns its Python
//! values into that spec (`loader/args.rs`) and lays out the loader's buffers as numpy
//! arrays (`loader/layout.rs`).

mod args;
mod layout;

use std::any::Any;
use std::sync::Arc;

use numpy::PyArray1;
use pyo3::exceptions::{PyRuntimeError, PyStopIteration, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use zrecord::loader::{LoaderSpec, Reads};
use zrecord::{Fetch, Loader, LoaderBatch, LoaderError, Mixture, Transform};

use crate::dataset::PyDataset;
use crate::error;
use crate::pool::loader_pool;
use layout::Layout;

/// A Python function `fetch(indices) -> tuple` that reads a batch of a dataset that is not
/// zrecord's, called on the loader's worker threads with the GIL taken for the call only.
/// Its result, or the exception it raised, is what [`Pipeline::next`] returns or raises.
struct PyFetch(Py<PyAny>);

impl Fetch for PyFetch {
    fn fetch(&self, indices: &[u64]) -> Box<dyn Any + Send> {
        let result: PyResult<Py<PyAny>> = Python::attach(|py| self.0.call1(py, (PyArray1::from_slice(py, indices),)));
        Box::new(result)
    }
}

/// A loader error as the Python exception users expect, with `path`, `field` and
/// `record` attributes when it happened in a store (a stopped loader's too).
fn to_py(py: Python<'_>, e: LoaderError) -> PyErr {
    let place = e.place();
    let err = plain_to_py(py, e);
    if let Some(place) = place {
        let value = err.value(py);
        let _ = value.setattr("path", place.path.display().to_string());
        let _ = value.setattr("field", place.field);
        let _ = value.setattr("record", place.record);
    }
    err
}

fn plain_to_py(py: Python<'_>, e: LoaderError) -> PyErr {
    match e {
        LoaderError::Store(e) => error::to_py(py, e),
        LoaderError::Dataset(e) => crate::dataset::error::to_py(py, e),
        LoaderError::Stopped { code: Some(code), message, .. } => error::zrecord_error(py, code, message),
        LoaderError::Stream(_)
        | LoaderError::State(_)
        | LoaderError::Changed(_)
        | LoaderError::Sources(_)
        | LoaderError::Argument(_) => PyValueError::new_err(e.to_string()),
        LoaderError::Spawn(_) | LoaderError::Forked => PyRuntimeError::new_err(e.to_string()),
        other => error::zrecord_error(py, error::INTERNAL, other.to_string()),
    }
}

/// The threads behind `zrecord.DataLoader` (internal).
#[pyclass(module = "zrecord", name = "_Pipeline", frozen)]
pub struct Pipeline {
    loader: Loader,
    /// How a batch becomes the dict `next()` returns; shared with the worker-side transform.
    layout: Arc<Layout>,
    /// [`LoaderBatch::valid`] of the last batch returned.
    valid: std::sync::atomic::AtomicUsize,
}

/// A Python function `transform(batch) -> object` run by the loader's workers on each
/// batch dict (with the GIL taken for the call); its result, or the exception it raised,
/// is what [`Pipeline::next`] returns or raises.
struct PyTransform {
    func: Py<PyAny>,
    layout: Arc<Layout>,
}

impl Transform for PyTransform {
    fn transform(&self, batch: LoaderBatch) -> Box<dyn Any + Send> {
        let result: PyResult<Py<PyAny>> = Python::attach(|py| {
            let object = self.layout.object(py, batch)?;
            self.func.call1(py, (object,))
        });
        Box::new(result)
    }
}

impl Pipeline {
    /// The pipeline over `loader`, with `transform` run on its workers when given.
    fn finish(loader: Loader, layout: Layout, transform: Option<Py<PyAny>>) -> Result<Self, LoaderError> {
        let layout = Arc::new(layout);
        let loader = match transform {
            None => loader,
            Some(func) => loader.with_transform(Arc::new(PyTransform { func, layout: layout.clone() }))?,
        };
        Ok(Pipeline { loader, layout, valid: std::sync::atomic::AtomicUsize::new(0) })
    }
}

#[pymethods]
impl Pipeline {
    /// `sources`: one list of stores per source (one source, or one per mixture source),
    /// each with one store per field; `itemsizes`, `dtypes`, `shapes`: per field, shared
    /// by every source. `state`: a saved state as JSON text, or None to start at step 0.
    /// `datasets` (and `pads`): datasets of named fields instead of stores. `fetch` and
    /// `length`: a function reading a batch of indices of a dataset of `length` samples
    /// that is not zrecord's, instead of stores; `next()` returns the tuple it returns.
    #[new]
    #[pyo3(signature = (sources, itemsizes, dtypes, shapes, batch_size, mode, seed, weights=None, rank=0,
                        world_size=1, num_workers=4, prefetch_size=4, state=None, warm=None, datasets=None, pads=None,
                        fetch=None, length=None, on_error="raise", transform=None, pack=None, passes=None,
                        images=None, blocks=None))]
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
        datasets: Option<Vec<PyRef<'_, PyDataset>>>,
        pads: Option<&Bound<'_, PyDict>>,
        fetch: Option<Py<PyAny>>,
        length: Option<u64>,
        on_error: &str,
        transform: Option<Py<PyAny>>,
        pack: Option<&Bound<'_, PyDict>>,
        passes: Option<u64>,
        images: Option<&Bound<'_, PyDict>>,
        blocks: Option<(i64, i64)>,
    ) -> PyResult<Self> {
        let images = args::images(images)?;
        // What is read: a fetch, else datasets of named fields, else stores (the arguments
        // of the others are not read).
        let (reads, pack) = match (fetch, &datasets) {
            (Some(fetch), _) => (Reads::Fetch { fetch: Arc::new(PyFetch(fetch)), length }, None),
            (None, Some(datasets)) => (args::datasets(py, datasets, pads, images.clone())?, pack),
            (None, None) => (args::stores(py, sources, &itemsizes, &dtypes, shapes)?, pack),
        };
        let pack = pack.map(args::pack).transpose()?;
        let packed = pack.as_ref().map(|p| (p.field.clone(), p.seq_len as usize));
        let fetching = matches!(reads, Reads::Fetch { .. });
        let spec = LoaderSpec {
            batch_size,
            mode,
            seed,
            weights,
            rank,
            world_size,
            num_workers,
            prefetch_size,
            warm,
            on_error: on_error.to_owned(),
            passes,
            blocks,
            pool: loader_pool,
            state: state.map(str::to_owned),
            reads,
            pack,
        };
        let loader = py.detach(|| Loader::from_spec(spec)).map_err(|e| to_py(py, e))?;
        let layout = match (&datasets, packed) {
            _ if fetching => Layout::fetched(&loader),
            (Some(datasets), Some((field, seq_len))) => Layout::packed(py, &loader, &datasets[0], field, seq_len)?,
            (Some(datasets), None) => Layout::named(py, &loader, &datasets[0], pads, &images)?,
            (None, _) => Layout::stores(py, &loader, dtypes, shapes)?,
        };
        Self::finish(loader, layout, transform).map_err(|e| to_py(py, e))
    }

    /// A packed loader's share of padding tokens so far (None for a loader of samples, or
    /// before the first batch).
    #[getter]
    fn padding_fraction(&self) -> Option<f64> {
        self.loader.padding_fraction()
    }

    /// The next batch: a dict of one array per key (the fields; "data" and "label" for
    /// loaderx's pair; "source", each sample's int32 source, for a mixture), what a fetching
    /// loader's fetch returned, or with a transform what it returned. StopIteration once
    /// closed.
    fn next<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let batch = match py.detach(|| self.loader.next()) {
            Ok(Some(batch)) => batch,
            Ok(None) => return Err(PyStopIteration::new_err(())),
            Err(e) => return Err(to_py(py, e)),
        };
        let valid = batch.valid;
        let replaced = batch.replaced.clone();
        self.valid.store(valid, std::sync::atomic::Ordering::Release);
        let out = self.layout.object(py, batch)?;
        if self.loader.pass_steps().is_some() {
            // A finite pass of samples: which slots hold the pass's samples (the last
            // batch's others repeat the first samples as padding, and a damaged sample's
            // slot holds a replacement the pass reads at its own slot too).
            if let Ok(dict) = out.cast::<PyDict>() {
                let slots = py.import("numpy")?.call_method1("arange", (self.loader.batch_size(),))?;
                let mask = slots.call_method1("__lt__", (valid,))?;
                for slot in replaced {
                    mask.set_item(slot, false)?;
                }
                dict.set_item("valid", mask)?;
            }
        }
        Ok(out)
    }

    /// Slots at the front of the last batch `next()` returned that hold samples: the batch
    /// size, but in the last batch of a finite pass of samples.
    #[getter]
    fn valid(&self) -> usize {
        self.valid.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Global batches of a finite pass of samples (`passes=`), else None.
    #[getter]
    fn pass_steps(&self) -> Option<u64> {
        self.loader.pass_steps()
    }

    /// True when the loader ends (`passes=`).
    #[getter]
    fn finite(&self) -> bool {
        self.loader.is_finite()
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

    /// `(epoch, step within it)` of global batch `step` (SHUFFLE over one dataset), else
    /// None: the core stream's arithmetic.
    fn epoch_of(&self, step: u64) -> Option<(u64, u64)> {
        self.loader.epoch_of(step)
    }

    /// Whether a running job looks for appended rows before global batch `step`
    /// (`Loader::takes_growth_at`).
    fn takes_growth_at(&self, step: u64) -> bool {
        self.loader.takes_growth_at(step)
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

    /// The samples replaced under `on_error="skip"`, once each: dicts of source, index,
    /// replacement, path, field, record, chunk and message.
    #[getter]
    fn skipped<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyDict>>> {
        let mut out = Vec::new();
        for s in self.loader.skipped() {
            let d = PyDict::new(py);
            d.set_item("source", s.source)?;
            d.set_item("index", s.index)?;
            d.set_item("replacement", s.replacement)?;
            d.set_item("path", s.place.path.display().to_string())?;
            d.set_item("field", s.place.field)?;
            d.set_item("record", s.place.record)?;
            d.set_item("chunk", s.chunk)?;
            d.set_item("message", s.message)?;
            out.push(d);
        }
        Ok(out)
    }

    /// `(bytes read, bytes to read)` of the background warming, or None when the loader
    /// does not warm.
    #[getter]
    fn warm_progress(&self) -> Option<(u64, u64)> {
        self.loader.warm_progress()
    }
}

/// Checks mixture weights as the stream will (`ValueError` saying what is wrong), so a
/// `zrecord.Mixture` refuses them when it is made rather than when a loader reads it.
#[pyfunction]
#[pyo3(name = "_check_mixture_weights")]
pub fn check_mixture_weights(weights: Vec<f64>) -> PyResult<()> {
    Mixture::check_weights(&weights).map_err(|e| PyValueError::new_err(e.to_string()))
}

impl Drop for Pipeline {
    fn drop(&mut self) {
        // Dropped by Python's garbage collector, so attached: join without holding the GIL
        // (workers never need it, but other Python threads should not wait for the join).
        Python::attach(|py| py.detach(|| self.loader.close()));
    }
}
