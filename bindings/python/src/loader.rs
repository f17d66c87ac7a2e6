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

use std::any::Any;
use std::sync::Arc;

use numpy::PyArray1;
use pyo3::exceptions::{PyRuntimeError, PyStopIteration, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString, PyTuple};
use zrecord::{
    Blocks, BufferPool, DatasetId, Fetch, Loader, LoaderBatch, LoaderError, LoaderOptions, Mixture, OnError, PackMode,
    PackOptions, RaggedField, RowIndexes, Source, Stream, StreamError, StreamState, Transform, Warm,
};

use crate::batch::pooled_array;
use crate::dataset::PyDataset;
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
        LoaderError::Stream(_) | LoaderError::State(_) | LoaderError::Changed(_) | LoaderError::Sources(_) => {
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
    /// How a batch becomes the dict `next()` returns; shared with the worker-side transform.
    layout: Arc<Layout>,
    /// [`LoaderBatch::valid`] of the last batch returned.
    valid: std::sync::atomic::AtomicUsize,
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

impl Layout {
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

impl Pipeline {
    /// A packed loader (`pack`: field, seq_len, mode, bos, eos, pad, window) over the
    /// documents of `built`, `global` rows per global batch.
    #[allow(clippy::too_many_arguments)]
    fn packed(
        py: Python<'_>,
        pack: &Bound<'_, PyDict>,
        datasets: &[PyRef<'_, PyDataset>],
        built: Vec<Source>,
        ids: Vec<DatasetId>,
        weights: Option<Vec<f64>>,
        mode: zrecord::Mode,
        seed: u64,
        global: u64,
        options: LoaderOptions,
        state: Option<&str>,
        transform: Option<Py<PyAny>>,
    ) -> PyResult<Self> {
        let get = |key: &str| -> PyResult<Bound<'_, PyAny>> {
            pack.get_item(key)?.ok_or_else(|| PyValueError::new_err(format!("pack needs {key:?}")))
        };
        let mode_name: String = get("mode")?.extract()?;
        let spec = PackOptions {
            field: get("field")?.extract()?,
            seq_len: get("seq_len")?.extract()?,
            mode: PackMode::from_name(&mode_name).ok_or_else(|| {
                PyValueError::new_err(format!("pack mode must be \"concat\" or \"best_fit\", not {mode_name:?}"))
            })?,
            bos: get("bos")?.extract()?,
            eos: get("eos")?.extract()?,
            pad: get("pad")?.extract()?,
            window: get("window")?.extract()?,
            shuffle_rows: match pack.get_item("row_order")? {
                None => None,
                Some(v) => match v.extract::<Option<String>>()?.as_deref() {
                    None => None,
                    Some("shuffled") => Some(true),
                    Some("sequential") => Some(false),
                    Some(other) => {
                        return Err(PyValueError::new_err(format!(
                            "pack row_order must be \"shuffled\" or \"sequential\", not {other:?}"
                        )))
                    }
                },
            },
            row_indexes: match pack.get_item("index_dir")? {
                None => RowIndexes::Default,
                Some(v) if v.is_none() => RowIndexes::Default,
                Some(v) if v.is_instance_of::<pyo3::types::PyBool>() => match v.extract::<bool>()? {
                    false => RowIndexes::Off,
                    true => {
                        return Err(PyValueError::new_err(
                            "pack index_dir is a directory, None (the default cache) or False (none)",
                        ))
                    }
                },
                Some(v) => RowIndexes::In(v.extract::<std::path::PathBuf>()?),
            },
            keep_order: match pack.get_item("keep_order")? {
                Some(v) if !v.is_none() => v.extract()?,
                _ => zrecord_core::stream::rows::KEEP_DOCS,
            },
        };
        let mixture = weights.is_some();
        let docs = match weights {
            None => Stream::new(ids[0], mode, seed, 1),
            Some(weights) => Mixture::new(ids, weights).and_then(|m| Stream::mixture(m, seed, 1)),
        }
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
        let field = spec.field.clone();
        let seq_len = spec.seq_len as usize;
        let loader = match state {
            None => py.detach(|| Loader::packed(docs, global, built, spec, options)),
            Some(text) => {
                let state = StreamState::decode(text).map_err(|e| PyValueError::new_err(e.to_string()))?;
                py.detach(|| Loader::resume_packed(docs, global, built, spec, options, &state))
            }
        }
        .map_err(|e| to_py(py, e))?;
        let handle = datasets[0].handle(py)?;
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
        let layout = Layout { buffers: loader.buffers(), views, mixture: false, named: None, packed: Some(keys) };
        Self::finish(loader, layout, transform).map_err(|e| to_py(py, e))
    }

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
        let blocks = match blocks {
            None => None,
            Some((records, window)) => match (u64::try_from(records), u64::try_from(window)) {
                (Ok(r), Ok(w)) => Some(Blocks::new(r, w).map_err(stream_error)?),
                _ => {
                    return Err(PyValueError::new_err(format!(
                        "shuffle_block and shuffle_window must be positive, got {records} and {window}"
                    )))
                }
            },
        };
        // A stream in blocks when asked for; its refusal (not SHUFFLE over one dataset) as is.
        let blocked = |stream: Stream| match blocks {
            None => Ok(stream),
            Some(b) => stream.with_blocks(b),
        };
        let images = images
            .map(|d| {
                d.iter()
                    .map(|(name, spec)| Ok((name.extract::<String>()?, crate::vision::pipeline_of(&spec)?)))
                    .collect::<PyResult<Vec<_>>>()
            })
            .transpose()?
            .unwrap_or_default();
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
            on_error: match on_error {
                "raise" => OnError::Raise,
                "skip" => OnError::Skip,
                other => {
                    return Err(PyValueError::new_err(format!("on_error must be \"raise\" or \"skip\", not {other:?}")))
                }
            },
            passes,
        };
        if let Some(fetch) = fetch {
            let length = length.ok_or_else(|| PyValueError::new_err("fetch needs the dataset's length"))?;
            let stream = Stream::new(DatasetId { length, generation: 0 }, mode, seed, global)
                .and_then(blocked)
                .map_err(stream_error)?;
            let fetch: Arc<dyn Fetch> = Arc::new(PyFetch(fetch));
            let loader = match state {
                None => Loader::fetching(stream, fetch, options),
                Some(text) => {
                    let state = StreamState::decode(text).map_err(|e| PyValueError::new_err(e.to_string()))?;
                    Loader::resume_fetching(stream, fetch, options, &state)
                }
            }
            .map_err(|e| to_py(py, e))?;
            let layout =
                Layout { buffers: loader.buffers(), views: Vec::new(), mixture: false, named: None, packed: None };
            return Self::finish(loader, layout, transform).map_err(|e| to_py(py, e));
        }
        let built = match &datasets {
            Some(datasets) => dataset_sources(py, datasets, pads, &images)?,
            None => store_sources(py, sources, &itemsizes, &dtypes, shapes)?,
        };
        let ids: Vec<_> = built.iter().map(Source::id).collect();
        if let Some(pack) = pack {
            if blocks.is_some() {
                return Err(PyValueError::new_err(
                    "shuffle_block orders samples; a packed loader orders documents (pack's row_order shuffles rows)",
                ));
            }
            let datasets =
                datasets.as_ref().ok_or_else(|| PyValueError::new_err("pack reads a Dataset of named fields"))?;
            return Self::packed(
                py, pack, datasets, built, ids, weights, mode, seed, global, options, state, transform,
            );
        }
        let stream = match weights {
            None => {
                let [id] = ids[..] else {
                    return Err(PyValueError::new_err("more than one source needs mixture weights"));
                };
                Stream::new(id, mode, seed, global)
            }
            Some(weights) => Mixture::new(ids, weights).and_then(|m| Stream::mixture(m, seed, global)),
        }
        .and_then(blocked)
        .map_err(stream_error)?;
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
        let (views, named) = match &datasets {
            None => {
                let views = dtypes
                    .into_iter()
                    .zip(shapes.iter())
                    .map(|(dtype, shape)| Ok(View { dtype, shape: shaped(py, per_rank, &shape)? }))
                    .collect::<PyResult<Vec<_>>>()?;
                (views, None)
            }
            Some(datasets) => named_views(py, &datasets[0], per_rank, pads, &images)?,
        };
        let layout = Layout { buffers: loader.buffers(), views, mixture, named, packed: None };
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

/// The loaderx form: one list of stores per source, one store per field.
fn store_sources(
    py: Python<'_>,
    sources: &Bound<'_, PyList>,
    itemsizes: &[usize],
    dtypes: &[Py<PyAny>],
    shapes: &Bound<'_, PyList>,
) -> PyResult<Vec<Source>> {
    if itemsizes.len() != dtypes.len() || itemsizes.len() != shapes.len() {
        return Err(PyValueError::new_err("one itemsize, dtype and shape per field"));
    }
    let mut built = Vec::with_capacity(sources.len());
    for source in sources.iter() {
        let stores: Vec<Bound<'_, Zrecord>> = source.extract()?;
        if stores.len() != itemsizes.len() {
            return Err(PyValueError::new_err("every source needs one store per field"));
        }
        // loaderx's pair is named as its batches are: "data" and "label".
        let names: Vec<String> = match stores.len() {
            2 => vec!["data".into(), "label".into()],
            n => (0..n).map(|i| format!("field{i}")).collect(),
        };
        let mut fields = Vec::with_capacity(stores.len());
        for ((store, &size), name) in stores.iter().zip(itemsizes).zip(names) {
            fields.push((name, store.get().handle(py)?, size));
        }
        built.push(py.detach(|| Source::named(fields)).map_err(|e| to_py(py, e))?);
    }
    Ok(built)
}

/// Datasets of named fields, one source each, with `pads` (field name -> one element's
/// bytes) and `images` (field name -> pipeline) applied to every source.
fn dataset_sources(
    py: Python<'_>,
    datasets: &[PyRef<'_, PyDataset>],
    pads: Option<&Bound<'_, PyDict>>,
    images: &[(String, zrecord::image::crop::Pipeline)],
) -> PyResult<Vec<Source>> {
    let mut built = Vec::with_capacity(datasets.len());
    for ds in datasets {
        let handle = ds.handle(py)?;
        let mut source = py.detach(|| Source::dataset(handle)).map_err(|e| to_py(py, e))?;
        if let Some(pads) = pads {
            for (name, pad) in pads.iter() {
                let name: String = name.extract()?;
                let pad: Vec<u8> = pad.extract()?;
                source = source.padded(&name, pad).map_err(|e| to_py(py, e))?;
            }
        }
        for (name, pipeline) in images {
            source = source.images(name, pipeline.clone()).map_err(|e| to_py(py, e))?;
        }
        built.push(source);
    }
    Ok(built)
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

impl Drop for Pipeline {
    fn drop(&mut self) {
        // Dropped by Python's garbage collector, so attached: join without holding the GIL
        // (workers never need it, but other Python threads should not wait for the join).
        Python::attach(|py| py.detach(|| self.loader.close()));
    }
}

/// A stream that cannot be built, as the ValueError a bad argument raises.
fn stream_error(e: StreamError) -> PyErr {
    PyValueError::new_err(e.to_string())
}
