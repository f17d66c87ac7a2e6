//! `zrecord._Dataset`, and below it `zrecord._DatasetWriter`, `zrecord._FieldAdder` and the
//! dataset's changes: the `zrecord` crate's [`zrecord::Dataset`], [`zrecord::DatasetWriter`]
//! and the rest of its `dataset` module (named fixed and ragged fields over shards).
//!
//! Nothing about fields, shards or manifests is decided here: these files convert numpy
//! arguments into byte slices and the crate's answers into numpy arrays, with the GIL
//! released around every store call. `zrecord/dataset.py` adds numpy indexing on top.
//!
//! The files mirror the crate's `dataset/` ones, so a binding is found beside what it adapts:
//! this one `_Dataset`, the reader (the crate's `dataset/mod.rs`); `dataset/open.rs` opening
//! one; `dataset/error.rs` [`zrecord::DatasetError`] as a Python exception;
//! `dataset/report.rs` its usage as a dict; `dataset/fields.rs` a field as a dict, both ways;
//! `dataset/field_write.rs` a write's columns; `dataset/options.rs` the write options; then
//! the changes: `dataset/write.rs` `_DatasetWriter`, `dataset/parts.rs` and
//! `dataset/saved_parts.rs` a dataset written in parts, `dataset/columns.rs` `_FieldAdder`
//! and fields dropped, `dataset/delete.rs`, `dataset/compact.rs`, `dataset/copy.rs`,
//! `dataset/concat.rs` and `dataset/layout.rs`. No file imports one that imports it.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use numpy::PyArray1;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use crate::buffers::{self, indices};
use crate::pool::call;
use crate::store::Zrecord;

pub mod columns;
pub mod compact;
pub mod concat;
pub mod copy;
pub mod delete;
pub mod error;
pub mod field_write;
pub mod fields;
pub mod layout;
pub mod open;
pub mod options;
pub mod parts;
pub mod report;
pub mod saved_parts;
pub mod write;

use fields::field_dict;
use report::store_sums_into;

/// An open dataset (internal: `zrecord.Dataset` wraps it).
#[pyclass(module = "zrecord", name = "_Dataset", frozen)]
pub struct PyDataset {
    pub inner: Mutex<Option<Arc<zrecord::Dataset>>>,
}

impl PyDataset {
    pub fn handle(&self, py: Python<'_>) -> PyResult<Arc<zrecord::Dataset>> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).clone().ok_or_else(|| crate::error::closed(py))
    }
}

#[pymethods]
impl PyDataset {
    /// `read_only`: None (writable where allowed), True or False; `verify`: "auto",
    /// "always" or "never".
    /// With `warn`, a `ChecksumsLostWarning` for each store that kept checksums but lost its
    /// `checksums.zrc`, pointing at the caller's caller (`zrecord.Dataset(...)`'s line).
    /// A URL (`s3://`, `gs://`, `az://`, `https://`) opens a pushed dataset, read-only, with
    /// `storage_options` (object_store's keys) over the environment's.
    #[new]
    #[pyo3(signature = (path, *, read_only = None, verify = "auto", warn = true, storage_options = None,
                        cache_bytes = None, cache_dir = None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        path: PathBuf,
        read_only: Option<bool>,
        verify: &str,
        warn: bool,
        storage_options: Option<std::collections::HashMap<String, String>>,
        cache_bytes: Option<u64>,
        cache_dir: Option<PathBuf>,
    ) -> PyResult<Self> {
        let ds = open::open(py, path, read_only, verify, warn, storage_options, cache_bytes, cache_dir)?;
        Ok(PyDataset { inner: Mutex::new(Some(Arc::new(ds))) })
    }

    /// Every store's usage summed (`Dataset.stats()`), with a store's `stats()` keys.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let ds = self.handle(py)?;
        let s = call(py, move || ds.stats())?;
        let d = PyDict::new(py);
        store_sums_into(&d, &s)?;
        Ok(d)
    }

    /// What reads from an object store cost so far (a dict), or None for a local dataset.
    fn remote_stats<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        self.handle(py)?.remote_stats().map(|c| crate::remote::counts_dict(py, c)).transpose()
    }

    /// Starts every field's records of samples `idxs` on their way ([`zrecord::Dataset::will_read`]):
    /// before a batch's fields are gathered one by one, so that an object store gets all of
    /// the batch's requests at once (one round trip, not one per field and shard).
    fn will_read(&self, py: Python<'_>, idxs: &Bound<'_, PyAny>) -> PyResult<()> {
        let ds = self.handle(py)?;
        let idxs = indices(idxs)?;
        py.detach(move || ds.will_read(&idxs));
        Ok(())
    }

    /// Removes the read schedule a loader gave the remote cache (it falls back to
    /// oldest-first): the benchmark's baseline.
    fn _clear_read_plan(&self, py: Python<'_>) -> PyResult<()> {
        if let Some(cache) = self.handle(py)?.cache() {
            cache.set_plan(None);
        }
        Ok(())
    }

    /// True when the dataset was opened from an object store.
    #[getter]
    fn is_remote(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.handle(py)?.remote_stats().is_some())
    }

    /// The dataset card as JSON text, or None.
    #[getter]
    fn metadata_json(&self, py: Python<'_>) -> PyResult<Option<String>> {
        Ok(self.handle(py)?.metadata_json())
    }

    /// True for a dataset with a manifest (named fields, shards); False for one loaderx store.
    #[getter]
    fn has_manifest(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.handle(py)?.manifest().is_some())
    }

    #[getter]
    fn read_only(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.handle(py)?.is_read_only())
    }

    /// A list of dicts: name, kind ("fixed", "ragged", "bytes", "string" or "image"), dtype, shape,
    /// codec.
    #[getter]
    fn fields<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let ds = self.handle(py)?;
        let items = ds.fields().iter().map(|f| field_dict(py, f)).collect::<PyResult<Vec<_>>>()?;
        PyList::new(py, items)
    }

    fn __len__(&self, py: Python<'_>) -> PyResult<usize> {
        // At most 2^62 samples: a usize on every 64-bit host this builds for.
        Ok(self.handle(py)?.len() as usize)
    }

    /// Splits by reference (`zrecord.split`): one read-only dataset per fraction, sharing
    /// these stores ([`zrecord::Dataset::split`]).
    fn split(&self, py: Python<'_>, fractions: Vec<f64>, seed: u64) -> PyResult<Vec<PyDataset>> {
        let ds = self.handle(py)?;
        let parts = call(py, move || ds.split(&fractions, seed))?;
        Ok(parts.into_iter().map(|d| PyDataset { inner: Mutex::new(Some(Arc::new(d))) }).collect())
    }

    /// True for a split of a dataset.
    #[getter]
    fn is_split(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.handle(py)?.is_split())
    }

    #[getter]
    fn shards(&self, py: Python<'_>) -> PyResult<usize> {
        Ok(self.handle(py)?.shard_count())
    }

    /// Where each shard starts in the index space, and the end: `shards + 1` numbers.
    #[getter]
    fn shard_bounds(&self, py: Python<'_>) -> PyResult<Vec<u64>> {
        let ds = self.handle(py)?;
        Ok((0..ds.shard_count()).map(|s| ds.shard_start(s)).chain([ds.len()]).collect())
    }

    /// The dataset's identity as a stream sees it: `(length, generation)`.
    #[getter]
    fn id(&self, py: Python<'_>) -> PyResult<(u64, u64)> {
        let ds = self.handle(py)?;
        let id = call(py, move || ds.id())?;
        Ok((id.length, id.generation))
    }

    /// Decodes fixed field `field` of samples `idxs` into `dst` (C-contiguous, at least
    /// `len(idxs)` samples).
    fn gather(&self, py: Python<'_>, field: usize, idxs: &Bound<'_, PyAny>, dst: &Bound<'_, PyAny>) -> PyResult<()> {
        let ds = self.handle(py)?;
        check_field(&ds, field)?;
        let idxs = indices(idxs)?;
        let mut region = buffers::writable(dst, "dst")?;
        let dst = region.bytes_mut();
        call(py, move || ds.gather_fixed(field, &idxs, dst, None, true))
    }

    /// Field `field` of samples `idxs` as `(values, offsets)`: one uint8 array of every
    /// sample's bytes back to back, and `len(idxs) + 1` int64 byte offsets.
    fn gather_ragged<'py>(
        &self,
        py: Python<'py>,
        field: usize,
        idxs: &Bound<'py, PyAny>,
    ) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyAny>)> {
        let ds = self.handle(py)?;
        check_field(&ds, field)?;
        let idxs = indices(idxs)?;
        let (values, offsets) = call(py, move || ds.gather_ragged(field, &idxs))?;
        let numpy = py.import("numpy")?;
        let offsets = PyArray1::from_vec(py, offsets).call_method1("view", (numpy.getattr("int64")?,))?;
        Ok((PyArray1::from_vec(py, values).into_any(), offsets))
    }

    /// The store of field `field` in shard `shard`, as a read handle.
    fn store(&self, py: Python<'_>, shard: usize, field: usize) -> PyResult<Zrecord> {
        let ds = self.handle(py)?;
        check_field(&ds, field)?;
        if shard >= ds.shard_count() {
            return Err(PyValueError::new_err(format!("shard {shard} of {}", ds.shard_count())));
        }
        let store = call(py, || ds.store(shard, field).cloned())?;
        Ok(Zrecord::from_handle(store, true))
    }

    /// Every store's path, shard by shard, field by field.
    fn store_paths(&self, py: Python<'_>) -> PyResult<Vec<PathBuf>> {
        let ds = self.handle(py)?;
        Ok(call(py, || ds.stores())?.into_iter().map(|s| s.path().to_path_buf()).collect())
    }

    fn close(&self) {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).take();
    }
}

/// `Ok` if `field` is a field of `ds`, else the `ValueError` saying how many there are.
fn check_field(ds: &zrecord::Dataset, field: usize) -> PyResult<()> {
    if field >= ds.fields().len() {
        return Err(PyValueError::new_err(format!("field {field} of {}", ds.fields().len())));
    }
    Ok(())
}
