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
//! arrays.

mod args;

use std::any::Any;
use std::sync::Arc;

use numpy::PyArray1;
use pyo3::exceptions::{PyRuntimeError, PyStopIteration, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString, PyTuple};
use zrecord::loader::{LoaderSpec, Reads};
use zrecord::{BufferPool, Fetch, Loader, LoaderBatch, LoaderError, Mixture, RaggedField, Transform};

use crate::batch::pooled_array;
use crate::dataset::PyDataset;
use crate::error;
use crate::pool::loader_pool;

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
        pooled_array(py, buf, pool, self.dtype.bind(py), self.shape.bind(py).as_any())
    }
}

fn shaped(py: Python<'_>, batch_size: usize, shape: &Bound<'_, PyAny>) -> PyResult<Py<PyTuple>> {
    let mut dims: Vec<Bound<'_, PyAny>> = vec![batch_size.into_pyobject(py)?.into_any()];
    for d in shape.try_iter()? {
        dims.push(d?);
    }
    Ok(PyTuple::new(py, dims)?.unbind())
}

/// How the buffers of a batch become Python's dict of arrays.
struct Layout {
    /// Where batch arrays give their memory back ([`BatchBuffer`]).
    buffers: Arc<BufferPool>,
    views: Vec<View>,
    /// True for a mixture: batches carry each sample's source.
    mixture: bool,
    /// For datasets of named fields: each field's numpy dtype (views of fixed fields are in
    /// `views`, ragged ones are shaped per batch) and the keys of the arrays, in order;
    /// `None` for loaderx's pair, whose keys are "data" and "label".
    named: Option<Named>,
    /// A packed loader: the keys of its `(rows, seq_len)` arrays, one per view.
    packed: Option<Vec<String>>,
}

impl Layout {
    /// A fetching loader's: its batches are what the fetch returned.
    fn fetched(loader: &Loader) -> Layout {
        Layout { buffers: loader.buffers(), views: Vec::new(), mixture: false, named: None, packed: None }
    }

    /// loaderx's form: one view per field, of `dtypes` and `shapes` (checked one per field).
    fn stores(py: Python<'_>, loader: &Loader, dtypes: Vec<Py<PyAny>>, shapes: &Bound<'_, PyList>) -> PyResult<Layout> {
        let per_rank = loader.batch_size();
        let views = dtypes
            .into_iter()
            .zip(shapes.iter())
            .map(|(dtype, shape)| Ok(View { dtype, shape: shaped(py, per_rank, &shape)? }))
            .collect::<PyResult<Vec<_>>>()?;
        let mixture = loader.stream().mixture_sources().is_some();
        Ok(Layout { buffers: loader.buffers(), views, mixture, named: None, packed: None })
    }

    /// Datasets of named fields, laid out as the first one's fields are.
    fn named(
        py: Python<'_>,
        loader: &Loader,
        dataset: &PyRef<'_, PyDataset>,
        pads: Option<&Bound<'_, PyDict>>,
        images: &[(String, zrecord::image::crop::Pipeline)],
    ) -> PyResult<Layout> {
        let (views, named) = named_views(py, dataset, loader.batch_size(), pads, images)?;
        let mixture = loader.stream().mixture_sources().is_some();
        Ok(Layout { buffers: loader.buffers(), views, mixture, named, packed: None })
    }

    /// A packed loader's `(rows, seq_len)` arrays of the token field `field` of `dataset`:
    /// the tokens, segment ids and positions (and each token's source, for a mixture).
    fn packed(
        py: Python<'_>,
        loader: &Loader,
        dataset: &PyRef<'_, PyDataset>,
        field: String,
        seq_len: usize,
    ) -> PyResult<Layout> {
        let mixture = loader.stream().mixture_sources().is_some();
        let handle = dataset.handle(py)?;
        let numpy_dtype = py.import("numpy")?.getattr("dtype")?;
        let token_dtype = handle
            .fields()
            .iter()
            .find(|f| f.name == field)
            .map(|f| f.dtype.clone())
            .ok_or_else(|| PyValueError::new_err(format!("no field {field:?}")))?;
        let shape = PyTuple::new(py, [loader.batch_size(), seq_len])?.unbind();
        let mut keys = vec![field, "segment_ids".to_owned(), "positions".to_owned()];
        let mut dtypes = vec![token_dtype.as_str(), "<i4", "<i4"];
        if mixture {
            keys.push("source".into());
            dtypes.push("<i4");
        }
        let views = dtypes
            .iter()
            .map(|d| Ok(View { dtype: numpy_dtype.call1((*d,))?.unbind(), shape: shape.clone_ref(py) }))
            .collect::<PyResult<Vec<_>>>()?;
        Ok(Layout { buffers: loader.buffers(), views, mixture: false, named: None, packed: Some(keys) })
    }

    /// The batch as a dict of arrays ("source" last for a mixture), or for a fetching
    /// loader whatever its fetch returned (or raised).
    fn object<'py>(&self, py: Python<'py>, batch: LoaderBatch) -> PyResult<Bound<'py, PyAny>> {
        if let Some(fetched) = batch.fetched {
            let result = fetched.downcast::<PyResult<Py<PyAny>>>().map_err(|_| {
                error::zrecord_error(py, error::INTERNAL, "a fetched batch of an unexpected type".into())
            })?;
            return Ok((*result)?.into_bound(py));
        }
        let out = PyDict::new(py);
        if let Some(keys) = &self.packed {
            for ((view, buf), key) in self.views.iter().zip(batch.fields).zip(keys) {
                out.set_item(key, view.to_array(py, buf, &self.buffers)?)?;
            }
            return Ok(out.into_any());
        }
        match &self.named {
            None => {
                for ((view, buf), key) in self.views.iter().zip(batch.fields).zip(["data", "label"]) {
                    out.set_item(key, view.to_array(py, buf, &self.buffers)?)?;
                }
            }
            Some(named) => {
                let int64 = py.import("numpy")?.getattr("int64")?;
                let mut fixed = self.views.iter();
                let mut keys = named.keys.iter();
                let per_field = batch.fields.into_iter().zip(batch.ragged).zip(&named.dtypes).zip(&named.strings);
                for (((buf, layout), dtype), &string) in per_field {
                    let key = keys.next().expect("a key per array");
                    match layout {
                        Some(RaggedField::Offsets(offsets)) if string => {
                            out.set_item(key, strings(py, &buf, &offsets)?)?;
                            self.buffers.give(buf);
                        }
                        None => {
                            let view = fixed.next().expect("one view per fixed field");
                            out.set_item(key, view.to_array(py, buf, &self.buffers)?)?;
                        }
                        Some(RaggedField::Offsets(offsets)) => {
                            let flat = PyTuple::new(py, [-1i64])?;
                            out.set_item(key, pooled_array(py, buf, &self.buffers, dtype.bind(py), flat.as_any())?)?;
                            let key = keys.next().expect("a key per array");
                            out.set_item(key, PyArray1::from_vec(py, offsets).call_method1("view", (&int64,))?)?;
                        }
                        Some(RaggedField::Padded { lengths, width }) => {
                            let rows = PyTuple::new(py, [lengths.len(), width])?;
                            out.set_item(key, pooled_array(py, buf, &self.buffers, dtype.bind(py), rows.as_any())?)?;
                            let key = keys.next().expect("a key per array");
                            out.set_item(key, PyArray1::from_vec(py, lengths).call_method1("view", (&int64,))?)?;
                        }
                    }
                }
            }
        }
        if self.mixture {
            // Source numbers are below the number of sources, far below 2^31: the u32
            // buffer is the int32 array's memory as it is.
            let int32 = py.import("numpy")?.getattr("int32")?;
            out.set_item("source", PyArray1::from_vec(py, batch.sources).call_method1("view", (int32,))?)?;
        }
        Ok(out.into_any())
    }
}

/// A string field's values (checked UTF-8 by the gather) as a list of `str`.
fn strings<'py>(py: Python<'py>, values: &[u8], offsets: &[u64]) -> PyResult<Bound<'py, PyList>> {
    let items = offsets.windows(2).map(|w| {
        let text = std::str::from_utf8(&values[w[0] as usize..w[1] as usize])
            .map_err(|e| error::zrecord_error(py, error::INTERNAL, format!("a string value is not UTF-8: {e}")))?;
        Ok(PyString::new(py, text))
    });
    PyList::new(py, items.collect::<PyResult<Vec<_>>>()?)
}

struct Named {
    dtypes: Vec<Py<PyAny>>,
    keys: Vec<String>,
    /// Per field: true for a string field, handed out as a list of `str` (no offsets key).
    strings: Vec<bool>,
}

/// The views of a dataset's fixed fields, each field's dtype and the batch keys.
fn named_views(
    py: Python<'_>,
    dataset: &PyRef<'_, PyDataset>,
    per_rank: usize,
    pads: Option<&Bound<'_, PyDict>>,
    images: &[(String, zrecord::image::crop::Pipeline)],
) -> PyResult<(Vec<View>, Option<Named>)> {
    let handle = dataset.handle(py)?;
    let numpy_dtype = py.import("numpy")?.getattr("dtype")?;
    let (mut views, mut dtypes, mut keys, mut strings) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for f in handle.fields() {
        let dtype = numpy_dtype.call1((f.dtype.as_str(),))?.unbind();
        keys.push(f.name.clone());
        strings.push(f.kind == zrecord::FieldKind::String);
        if let Some((_, pipeline)) = images.iter().find(|(name, _)| *name == f.name) {
            // Decoded images: one (batch, h, w, 3) or (batch, 3, h, w) block.
            let dtype = match pipeline.dtype {
                zrecord::image::crop::Dtype::U8 => numpy_dtype.call1(("|u1",))?,
                zrecord::image::crop::Dtype::F32 => numpy_dtype.call1(("<f4",))?,
            };
            let shape = PyTuple::new(py, pipeline.shape())?;
            views.push(View { dtype: dtype.clone().unbind(), shape: shaped(py, per_rank, shape.as_any())? });
            dtypes.push(dtype.unbind());
            continue;
        } else if f.kind == zrecord::FieldKind::String {
            // A list of str: no offsets beside it.
        } else if f.is_ragged() {
            let padded = pads.is_some_and(|p| p.contains(f.name.as_str()).unwrap_or(false));
            keys.push(format!("{}{}", f.name, if padded { "_lengths" } else { "_offsets" }));
        } else {
            let shape = PyTuple::new(py, &f.shape)?;
            views.push(View { dtype: dtype.clone_ref(py), shape: shaped(py, per_rank, shape.as_any())? });
        }
        dtypes.push(dtype);
    }
    Ok((views, Some(Named { dtypes, keys, strings })))
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
        LoaderError::Dataset(e) => crate::dataset::to_py(py, e),
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
        self.valid.store(valid, std::sync::atomic::Ordering::Release);
        let out = self.layout.object(py, batch)?;
        if self.loader.pass_steps().is_some() {
            // A finite pass of samples: which slots hold the pass's samples (the last
            // batch's others repeat the first samples as padding).
            if let Ok(dict) = out.cast::<PyDict>() {
                let slots = py.import("numpy")?.call_method1("arange", (self.loader.batch_size(),))?;
                dict.set_item("valid", slots.call_method1("__lt__", (valid,))?)?;
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
