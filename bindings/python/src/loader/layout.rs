//! How a batch becomes what `_Pipeline.next()` returns. The loader hands out plain
//! buffers; which numpy dtype and shape each has, and under which key it goes, is only
//! Python's business, and depends on what the pipeline reads (loaderx's pair, named fields,
//! packed rows, a fetch). It is worked out once per pipeline here, from the loader built,
//! apart from the arguments that asked for it (`args.rs`).

use std::sync::Arc;

use numpy::PyArray1;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString, PyTuple};
use zrecord::{BufferPool, Loader, LoaderBatch, RaggedField};

use crate::batch::pooled_array;
use crate::dataset::PyDataset;
use crate::error;

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
pub(super) struct Layout {
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
    pub(super) fn fetched(loader: &Loader) -> Layout {
        Layout { buffers: loader.buffers(), views: Vec::new(), mixture: false, named: None, packed: None }
    }

    /// loaderx's form: one view per field, of `dtypes` and `shapes` (checked one per field).
    pub(super) fn stores(
        py: Python<'_>,
        loader: &Loader,
        dtypes: Vec<Py<PyAny>>,
        shapes: &Bound<'_, PyList>,
    ) -> PyResult<Layout> {
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
    pub(super) fn named(
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
    pub(super) fn packed(
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
    pub(super) fn object<'py>(&self, py: Python<'py>, batch: LoaderBatch) -> PyResult<Bound<'py, PyAny>> {
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
