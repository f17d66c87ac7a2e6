//! `zrecord._Dataset` and `zrecord._DatasetWriter`: the `zrecord` crate's [`zrecord::Dataset`]
//! and [`zrecord::DatasetWriter`] (named fixed and ragged fields over shards).
//!
//! Nothing about fields, shards or manifests is decided here: this file converts numpy
//! arguments into byte slices and the crate's answers into numpy arrays, with the GIL
//! released around every store call. `zrecord/dataset.py` adds numpy indexing on top.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use numpy::PyArray1;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};
use zrecord::{Codec, Column, DatasetOptions, DatasetWriter, Field, OpenOptions, WriteMode, WriteOptions};

use crate::buffers::{self, indices};
use crate::pool::call;
use crate::store::{codec_named, verify_named, Zrecord};

pub mod error;
pub mod report;

use error::{at_url, to_py};

fn field_dict<'py>(py: Python<'py>, f: &Field) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("name", &f.name)?;
    d.set_item("kind", f.kind.name())?;
    d.set_item("dtype", &f.dtype)?;
    d.set_item("shape", PyTuple::new(py, &f.shape)?)?;
    d.set_item("codec", &f.codec)?;
    Ok(d)
}

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
        let verify = verify_named(verify)?;
        let options = DatasetOptions { read_only, verify };
        let url = path.to_str().filter(|p| zrecord::remote::is_url(p)).map(str::to_owned);
        let ds = match url {
            Some(url) => {
                let opts = crate::remote::options(storage_options);
                let remote = zrecord::dataset::RemoteOptions { verify, cache_bytes, cache_dir };
                call(py, move || zrecord::Dataset::open_remote_with(&url, &opts, remote))?
            }
            None if storage_options.is_some() => return Err(crate::remote::options_on_local_path(path.display())),
            None if cache_bytes.is_some() || cache_dir.is_some() => {
                return Err(PyValueError::new_err(
                    "cache_bytes and cache_dir apply to a dataset read from an object store (a URL)",
                ))
            }
            None => call(py, move || zrecord::Dataset::open_with(path, options))?,
        };
        if warn {
            for store in ds.opened_stores().filter(|s| s.checksums_lost()) {
                crate::error::warn_checksums_lost(py, store.path(), 2)?;
            }
        }
        Ok(PyDataset { inner: Mutex::new(Some(Arc::new(ds))) })
    }

    /// Every store's usage summed (`Dataset.stats()`), with a store's `stats()` keys.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let ds = self.handle(py)?;
        let s = call(py, move || ds.stats())?;
        let d = PyDict::new(py);
        report::store_sums_into(&d, &s)?;
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

fn check_field(ds: &zrecord::Dataset, field: usize) -> PyResult<()> {
    if field >= ds.fields().len() {
        return Err(PyValueError::new_err(format!("field {field} of {}", ds.fields().len())));
    }
    Ok(())
}

/// Opens the existing single store of a loaderx dataset at `path` for `zrecord.Dataset`:
/// writable where allowed, read-only where the system refuses (or as `read_only` says).
#[pyfunction]
#[pyo3(signature = (path, codec, *, read_only = None, verify = "auto"))]
pub fn open_dataset_store(
    py: Python<'_>,
    path: PathBuf,
    codec: &str,
    read_only: Option<bool>,
    verify: &str,
) -> PyResult<Zrecord> {
    let codec = codec_named(codec)?;
    let options = OpenOptions { create: false, codec, verify: verify_named(verify)?, ..OpenOptions::default() };
    let (store, read_only) =
        crate::pool::store_call(py, move || zrecord::dataset::open_store(&path, options, read_only))?;
    Ok(Zrecord::from_handle(Arc::new(store), read_only))
}

/// Adds samples to a dataset (internal: `zrecord.Dataset.write` drives it).
#[pyclass(module = "zrecord", name = "_DatasetWriter")]
pub struct PyDatasetWriter {
    inner: Option<DatasetWriter>,
    ragged: Vec<bool>,
    itemsizes: Vec<usize>,
    /// Samples left out for an empty ragged field so far (kept after the commit).
    skipped: u64,
}

#[pymethods]
impl PyDatasetWriter {
    /// `fields`: a list of dicts with name, kind ("fixed", "ragged", "bytes", "string" or "image"),
    /// dtype (numpy's `dtype.str`; "|u1" for bytes and string), shape (fixed only) and
    /// codec.
    #[new]
    #[pyo3(signature = (path, fields, *, shard_records = None, min_savings = None, layout = None, skip_empty = false, mode = "append", lock_wait = 0.0))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        path: PathBuf,
        fields: &Bound<'_, PyList>,
        shard_records: Option<u64>,
        min_savings: Option<f64>,
        layout: Option<&str>,
        skip_empty: bool,
        mode: &str,
        lock_wait: f64,
    ) -> PyResult<Self> {
        let defs = fields.iter().map(|item| field_of(&item)).collect::<PyResult<Vec<_>>>()?;
        let mode = WriteMode::from_name(mode).ok_or_else(|| {
            PyValueError::new_err(format!("mode must be \"create\", \"append\" or \"overwrite\", not {mode:?}"))
        })?;
        let lock_wait = std::time::Duration::try_from_secs_f64(lock_wait)
            .map_err(|_| PyValueError::new_err(format!("timeout must be a number of seconds >= 0, got {lock_wait}")))?;
        let options =
            WriteOptions { skip_empty, mode, lock_wait, ..write_options(shard_records, min_savings, layout)? };
        let writer = call(py, move || DatasetWriter::open(path, defs, options))?;
        let ragged = writer.fields().iter().map(Field::is_ragged).collect();
        let itemsizes = writer.fields().iter().map(|f| f.itemsize().unwrap_or(1) as usize).collect();
        Ok(PyDatasetWriter { inner: Some(writer), ragged, itemsizes, skipped: 0 })
    }

    /// The dataset's fields, as `_Dataset.fields` gives them (an existing dataset's codecs).
    #[getter]
    fn fields<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let w = self.writer()?;
        let items = w.fields().iter().map(|f| field_dict(py, f)).collect::<PyResult<Vec<_>>>()?;
        PyList::new(py, items)
    }

    /// Samples the dataset will hold once committed.
    fn __len__(&self) -> PyResult<usize> {
        Ok(self.writer()?.len() as usize)
    }

    /// Stages one block: per field, a C-contiguous array of samples (fixed), or a
    /// `(values, offsets)` pair (ragged: values 1-D C-contiguous in the field's dtype,
    /// offsets `n + 1` element offsets). Returns the number of samples.
    fn write(&mut self, py: Python<'_>, columns: &Bound<'_, PyList>) -> PyResult<u64> {
        let mut regions = Vec::with_capacity(columns.len());
        for (f, column) in columns.iter().enumerate() {
            let ragged = *self.ragged.get(f).unwrap_or(&false);
            regions.push(read_column(&column, f, ragged, self.itemsizes.get(f).copied().unwrap_or(1))?);
        }
        let cols: Vec<Column<'_>> = regions.iter().map(|(r, o)| column_of(r, o)).collect();
        let writer = self.inner.as_mut().ok_or_else(|| crate::error::closed(py))?;
        let written = call(py, || writer.write(&cols))?;
        self.skipped = writer.skipped();
        Ok(written)
    }

    /// Samples left out so far for an empty ragged field (`skip_empty=True`).
    #[getter]
    fn skipped(&self) -> u64 {
        self.skipped
    }

    /// The dataset card the commit writes (JSON text of an object; replaces the old card).
    fn set_metadata(&mut self, py: Python<'_>, json: &str) -> PyResult<()> {
        let writer = self.inner.as_mut().ok_or_else(|| crate::error::closed(py))?;
        writer.set_metadata(json).map_err(|e| to_py(py, e))
    }

    /// Publishes everything written; the writer is done.
    fn commit(&mut self, py: Python<'_>) -> PyResult<()> {
        let writer = self.inner.take().ok_or_else(|| crate::error::closed(py))?;
        call(py, move || writer.commit().map(drop))
    }

    /// Drops everything written and the new shards; the writer is done. Idempotent.
    fn discard(&mut self, py: Python<'_>) {
        if let Some(w) = self.inner.take() {
            py.detach(move || w.discard());
        }
    }
}

impl PyDatasetWriter {
    fn writer(&self) -> PyResult<&DatasetWriter> {
        self.inner.as_ref().ok_or_else(|| PyValueError::new_err("the writer was committed or discarded"))
    }
}

/// A fresh tag for the shards of a write that appends to a dataset in an object store.
#[pyfunction]
#[pyo3(name = "_write_tag")]
pub fn write_tag() -> String {
    zrecord::dataset::write_tag()
}

/// The folder, inside a local destination, that task `task` writes its part into.
#[pyfunction]
#[pyo3(name = "_part_dir")]
pub fn part_dir(task: u64) -> String {
    zrecord::dataset::part_dir(task)
}

/// `zrecord.set_layout`: the store or dataset at `path` made `layout` ("dense" or
/// "sparse"); returns (stores visited, stores changed).
#[pyfunction]
#[pyo3(name = "_set_layout", signature = (path, layout, progress = None))]
pub fn set_layout(
    py: Python<'_>,
    path: PathBuf,
    layout: &str,
    progress: Option<Py<PyAny>>,
) -> PyResult<(usize, usize)> {
    let Some(layout) = zrecord::FileLayout::from_name(layout) else {
        return Err(pyo3::exceptions::PyValueError::new_err(format!(
            "layout must be \"dense\" or \"sparse\", not {layout:?}"
        )));
    };
    let mut reporter = crate::progress::Progress::new(progress);
    let bar = &mut reporter;
    let done = call(py, move || zrecord::dataset::set_layout(&path, layout, &mut |d, t| bar.report(d, t)))?;
    reporter.finish()?;
    Ok((done.stores, done.changed))
}

/// `zrecord.ray`'s write task: finishes task `task`'s part, the dataset it wrote at
/// `local` (uploading its shards when `dest` is a URL); returns the part as JSON.
#[pyfunction]
#[pyo3(name = "_finish_part", signature = (local, dest, task, storage_options = None, tag = String::new()))]
pub fn finish_part(
    py: Python<'_>,
    local: PathBuf,
    dest: String,
    task: u64,
    storage_options: Option<std::collections::HashMap<String, String>>,
    tag: String,
) -> PyResult<String> {
    let opts = crate::remote::options(storage_options);
    call(py, move || {
        let remote = if zrecord::remote::is_url(&dest) {
            Some(zrecord::remote::Remote::open(&dest, &opts).map_err(|e| at_url(&dest, e))?)
        } else {
            None
        };
        Ok(zrecord::dataset::finish_part(&local, remote.as_ref(), task, &tag)?.to_json())
    })
}

/// `zrecord.ray`'s commit, on the driver: every task's part (JSON) into the dataset at
/// `dest`, at once; in an object store, added to the dataset there only with `append`.
/// Returns the number of samples committed.
#[pyfunction]
#[pyo3(name = "_commit_parts", signature = (dest, parts, storage_options = None, append = false))]
pub fn commit_parts(
    py: Python<'_>,
    dest: String,
    parts: Vec<String>,
    storage_options: Option<std::collections::HashMap<String, String>>,
    append: bool,
) -> PyResult<u64> {
    let opts = crate::remote::options(storage_options);
    call(py, move || {
        let parts = parts.iter().map(|p| zrecord::dataset::Part::from_json(p)).collect::<Result<Vec<_>, _>>()?;
        let added: u64 = parts.iter().map(|p| p.len()).sum();
        if zrecord::remote::is_url(&dest) {
            let remote = zrecord::remote::Remote::open(&dest, &opts).map_err(|e| at_url(&dest, e))?;
            zrecord::dataset::commit_remote(&remote, &parts, append)
        } else {
            zrecord::dataset::commit_local(std::path::Path::new(&dest), &parts, WriteOptions::default())?;
            Ok(added)
        }
    })
}

/// `zrecord.write_part` into an object store: the part dataset at `local` (committed)
/// uploaded as task `task`'s part of the dataset at `dest` and kept there for
/// `commit_parts`; returns the part's samples.
#[pyfunction]
#[pyo3(name = "_save_part", signature = (local, dest, task, storage_options = None))]
pub fn save_part(
    py: Python<'_>,
    local: PathBuf,
    dest: String,
    task: u64,
    storage_options: Option<std::collections::HashMap<String, String>>,
) -> PyResult<u64> {
    let opts = crate::remote::options(storage_options);
    call(py, move || {
        let remote = zrecord::remote::Remote::open(&dest, &opts).map_err(|e| at_url(&dest, e))?;
        Ok(zrecord::dataset::save_part(&local, &remote, task)?.len())
    })
}

/// `zrecord.commit_parts`: every part left at `dest` (local or a URL) committed as one
/// dataset; with `expected`, exactly those tasks' parts. Returns (tasks committed, samples
/// committed, tasks an earlier commit had committed already).
#[pyfunction]
#[pyo3(name = "_commit_saved", signature = (dest, expected = None, storage_options = None, append = false))]
pub fn commit_saved(
    py: Python<'_>,
    dest: String,
    expected: Option<Vec<u64>>,
    storage_options: Option<std::collections::HashMap<String, String>>,
    append: bool,
) -> PyResult<(Vec<u64>, u64, Vec<u64>)> {
    let opts = crate::remote::options(storage_options);
    if !opts.is_empty() && !zrecord::remote::is_url(&dest) {
        return Err(crate::remote::options_on_local_path(&dest));
    }
    call(py, move || {
        let done = if zrecord::remote::is_url(&dest) {
            let remote = zrecord::remote::Remote::open(&dest, &opts).map_err(|e| at_url(&dest, e))?;
            zrecord::dataset::commit_saved(zrecord::dataset::PartsAt::Remote(&remote), expected.as_deref(), append)?
        } else {
            let path = std::path::Path::new(&dest);
            zrecord::dataset::commit_saved(zrecord::dataset::PartsAt::Local(path), expected.as_deref(), append)?
        };
        Ok((done.tasks, done.samples, done.earlier))
    })
}

/// A field from `_DatasetWriter`'s dict: name, kind, dtype, shape (fixed only), codec.
fn field_of(item: &Bound<'_, PyAny>) -> PyResult<Field> {
    let name: String = item.get_item("name")?.extract()?;
    let kind: String = item.get_item("kind")?.extract()?;
    let dtype: String = item.get_item("dtype")?.extract()?;
    let codec: Codec = codec_named(&item.get_item("codec")?.extract::<String>()?)?;
    Ok(match kind.as_str() {
        "fixed" => Field::fixed(&name, &dtype, &item.get_item("shape")?.extract::<Vec<u64>>()?, codec),
        "ragged" => Field::ragged(&name, &dtype, codec),
        "bytes" => Field::bytes(&name, codec),
        "string" => Field::string(&name, codec),
        "image" => Field::image(&name, codec),
        other => {
            return Err(PyValueError::new_err(format!(
                "field kind {other:?} is not fixed, ragged, bytes, string or image"
            )))
        }
    })
}

fn write_options(shard_records: Option<u64>, min_savings: Option<f64>, layout: Option<&str>) -> PyResult<WriteOptions> {
    let mut options = WriteOptions::default();
    if let Some(n) = shard_records {
        options.shard_records = n;
    }
    if let Some(m) = min_savings {
        options.min_savings = m;
    }
    if let Some(name) = layout {
        options.layout = zrecord::FileLayout::from_name(name)
            .ok_or_else(|| PyValueError::new_err(format!("layout must be \"dense\" or \"sparse\", not {name:?}")))?;
    }
    Ok(options)
}

/// Column `f`'s memory: a C-contiguous array of samples (fixed), or a `(values, offsets)`
/// pair (ragged, bytes, string: element offsets, made byte offsets here).
fn read_column<'py>(
    column: &Bound<'py, PyAny>,
    f: usize,
    ragged: bool,
    item: usize,
) -> PyResult<(buffers::Region<'py>, Option<Vec<u64>>)> {
    if !ragged {
        return Ok((buffers::readable(column, "samples")?, None));
    }
    let pair = column
        .cast::<PyTuple>()
        .map_err(|_| PyTypeError::new_err(format!("column {f} is ragged: pass a (values, offsets) pair")))?;
    if pair.len() != 2 {
        return Err(PyTypeError::new_err(format!("column {f} is ragged: pass a (values, offsets) pair")));
    }
    let values = buffers::readable(&pair.get_item(0)?, "values")?;
    let elements = buffers::offsets(&pair.get_item(1)?, "offsets")?;
    let bytes = elements
        .iter()
        .map(|&o| o.checked_mul(item as u64).ok_or_else(|| PyValueError::new_err("offset overflows")))
        .collect::<PyResult<Vec<u64>>>()?;
    Ok((values, Some(bytes)))
}

fn column_of<'a>(region: &'a buffers::Region<'_>, offsets: &'a Option<Vec<u64>>) -> Column<'a> {
    match offsets {
        Some(o) => Column::Ragged { values: region.bytes(), offsets: o },
        None => Column::Fixed(region.bytes()),
    }
}

/// `Dataset.add_field`'s native half: one field added to every sample of a local dataset
/// or one at a URL (`zrecord::FieldAdder`), its columns written in index order, then
/// committed.
#[pyclass(module = "zrecord", name = "_FieldAdder")]
pub struct PyFieldAdder {
    inner: Option<zrecord::FieldAdder>,
    ragged: bool,
    itemsize: usize,
}

#[pymethods]
impl PyFieldAdder {
    /// `field`: a dict as `_DatasetWriter` takes.
    #[new]
    #[pyo3(signature = (path, field, *, min_savings = None, storage_options = None))]
    fn new(
        py: Python<'_>,
        path: String,
        field: &Bound<'_, PyAny>,
        min_savings: Option<f64>,
        storage_options: Option<std::collections::HashMap<String, String>>,
    ) -> PyResult<Self> {
        let def = field_of(field)?;
        let options = write_options(None, min_savings, None)?;
        let (ragged, itemsize) = (def.is_ragged(), def.itemsize().unwrap_or(1) as usize);
        let opts = crate::remote::options(storage_options);
        let adder = call(py, move || {
            if zrecord::remote::is_url(&path) {
                let remote = zrecord::remote::Remote::open(&path, &opts).map_err(|e| at_url(&path, e))?;
                zrecord::FieldAdder::open_remote(&remote, def, options)
            } else {
                zrecord::FieldAdder::open(path, def, options)
            }
        })?;
        Ok(PyFieldAdder { inner: Some(adder), ragged, itemsize })
    }

    /// Samples the dataset holds (what the field must hold).
    fn __len__(&self, py: Python<'_>) -> PyResult<usize> {
        Ok(self.inner.as_ref().ok_or_else(|| crate::error::closed(py))?.len() as usize)
    }

    /// Stages the next samples (a column as `_DatasetWriter.write` takes one).
    fn write(&mut self, py: Python<'_>, column: &Bound<'_, PyAny>) -> PyResult<u64> {
        let (region, offsets) = read_column(column, 0, self.ragged, self.itemsize)?;
        let col = column_of(&region, &offsets);
        let adder = self.inner.as_mut().ok_or_else(|| crate::error::closed(py))?;
        call(py, move || adder.write(col))
    }

    /// Publishes the field; the adder is done.
    fn commit(&mut self, py: Python<'_>) -> PyResult<()> {
        let adder = self.inner.take().ok_or_else(|| crate::error::closed(py))?;
        call(py, move || adder.commit().map(drop))
    }

    /// Drops what was written; the adder is done. Idempotent.
    fn discard(&mut self, py: Python<'_>) {
        if let Some(a) = self.inner.take() {
            py.detach(move || a.discard());
        }
    }
}

/// `Dataset.delete` of a dataset of named fields: samples `indices` removed from the
/// dataset at `path`, a local folder (`zrecord::dataset::delete_samples`) or a URL
/// (`zrecord::dataset::delete_remote`); returns (samples deleted, shards copied, samples
/// left).
#[pyfunction]
#[pyo3(name = "_delete_samples", signature = (path, indices, progress = None, storage_options = None))]
pub fn delete_samples(
    py: Python<'_>,
    path: String,
    indices: &Bound<'_, PyAny>,
    progress: Option<Py<PyAny>>,
    storage_options: Option<std::collections::HashMap<String, String>>,
) -> PyResult<(u64, usize, u64)> {
    let indices = buffers::offsets(indices, "indices")?;
    let opts = crate::remote::options(storage_options);
    let mut reporter = crate::progress::Progress::new(progress);
    let bar = &mut reporter;
    let done = call(py, move || {
        let mut report = |d, t| bar.report(d, t);
        if zrecord::remote::is_url(&path) {
            let remote = zrecord::remote::Remote::open(&path, &opts).map_err(|e| at_url(&path, e))?;
            zrecord::dataset::delete_remote(&remote, &indices, &mut report)
        } else {
            zrecord::dataset::delete_samples(&path, &indices, &mut report)
        }
    })?;
    reporter.finish()?;
    Ok((done.samples, done.shards, done.remaining))
}

/// `Dataset.compact` of a dataset of named fields: neighbouring small shards of the local
/// dataset at `path` merged into shards of at most `target_rows` samples
/// (`zrecord::dataset::compact_shards`); returns (shards before, shards after, samples
/// copied, bytes copied).
#[pyfunction]
#[pyo3(name = "_compact_shards", signature = (path, target_rows = None, progress = None))]
pub fn compact_shards(
    py: Python<'_>,
    path: String,
    target_rows: Option<u64>,
    progress: Option<Py<PyAny>>,
) -> PyResult<(usize, usize, u64, u64)> {
    let target_rows = target_rows.unwrap_or(zrecord_core::dataset::DEFAULT_COMPACT_ROWS);
    if zrecord::remote::is_url(&path) {
        return Err(PyValueError::new_err(format!(
            "{path}: compacting a dataset in an object store is not supported yet; pull it, compact it and push it"
        )));
    }
    let mut reporter = crate::progress::Progress::new(progress);
    let bar = &mut reporter;
    let done = call(py, move || zrecord::dataset::compact_shards(&path, target_rows, &mut |d, t| bar.report(d, t)))?;
    reporter.finish()?;
    Ok((done.shards_before, done.shards_after, done.samples_copied, done.bytes_copied))
}

/// `zrecord.copy` of a local dataset to a new local directory as one consistent state
/// (`zrecord::dataset::copy_dataset`); returns (samples, shards, files, bytes, restarts).
#[pyfunction]
#[pyo3(name = "_copy_dataset", signature = (src, dst, progress = None))]
pub fn copy_dataset(
    py: Python<'_>,
    src: PathBuf,
    dst: PathBuf,
    progress: Option<Py<PyAny>>,
) -> PyResult<(u64, usize, u64, u64, usize)> {
    let mut reporter = crate::progress::Progress::new(progress);
    let bar = &mut reporter;
    let done = call(py, move || zrecord::dataset::copy_dataset(&src, &dst, &mut |d, t| bar.report(d, t)))?;
    reporter.finish()?;
    Ok((done.samples, done.shards, done.files, done.bytes, done.restarts))
}

/// `zrecord.concat`: the dataset `out` made of the datasets `sources`, in order, all
/// local folders or all URLs (in one bucket, with `storage_options`); returns (samples,
/// shards, files linked, files or objects copied).
#[pyfunction]
#[pyo3(name = "_concat", signature = (sources, out, storage_options = None))]
pub fn concat(
    py: Python<'_>,
    sources: Vec<String>,
    out: String,
    storage_options: Option<std::collections::HashMap<String, String>>,
) -> PyResult<(u64, usize, u64, u64)> {
    let is_url = zrecord::remote::is_url;
    let urls = sources.iter().filter(|s| is_url(s)).count() + usize::from(is_url(&out));
    if urls == 0 && storage_options.is_some() {
        return Err(crate::remote::options_on_local_path(&out));
    }
    if urls != 0 && urls != sources.len() + 1 {
        return Err(PyValueError::new_err(
            "concat takes local datasets into a local folder, or datasets in an object store into a prefix of \
             the same bucket: pull or push to bring them together",
        ));
    }
    let opts = crate::remote::options(storage_options);
    let done = call(py, move || {
        if urls == 0 {
            let sources: Vec<PathBuf> = sources.into_iter().map(PathBuf::from).collect();
            return zrecord::dataset::concat(&sources, std::path::Path::new(&out));
        }
        let open = |url: &str| zrecord::remote::Remote::open(url, &opts).map_err(|e| at_url(url, e));
        let remotes = sources.iter().map(|s| open(s)).collect::<Result<Vec<_>, _>>()?;
        zrecord::dataset::concat_remote(&remotes, &open(&out)?)
    })?;
    Ok((done.samples, done.shards, done.linked, done.copied))
}

/// `Dataset.drop_field`: removes field `name` from the dataset at `path`, a local folder
/// or a URL.
#[pyfunction]
#[pyo3(name = "_drop_field", signature = (path, name, storage_options = None))]
pub fn drop_field(
    py: Python<'_>,
    path: String,
    name: String,
    storage_options: Option<std::collections::HashMap<String, String>>,
) -> PyResult<()> {
    let opts = crate::remote::options(storage_options);
    call(py, move || {
        if zrecord::remote::is_url(&path) {
            let remote = zrecord::remote::Remote::open(&path, &opts).map_err(|e| at_url(&path, e))?;
            zrecord::dataset::drop_field_remote(&remote, &name).map(drop)
        } else {
            zrecord::drop_field(&path, &name).map(drop)
        }
    })
}
