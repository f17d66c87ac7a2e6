//! The `zr` tools for Python (zrecord-core's `tools`): inspect, verify, stats, convert a
//! `.npy` into a dataset, export a dataset to `.npy`, and the datasets under a folder or
//! prefix.
//!
//! Each function opens what it is given itself (read-only where it only reads): a store
//! directory, a dataset of named fields, or a pushed dataset or store at a URL with
//! `storage_options` ([`Target`]); it runs the `zrecord` crate's tool with the GIL released
//! and returns plain dicts; `zrecord/tools.py` turns them into the documented dataclasses
//! and owns the user-facing parts (progress bars, leaving nothing behind on failure).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use zrecord::Schema;

use crate::dataset::report::store_sums_into;
use crate::pool::{call, store_call};
use crate::progress::Progress;

/// What a tool was pointed at.
enum Target {
    /// One store: a local store directory, or a pushed single store.
    Store(Arc<zrecord::Zrecord>),
    /// A dataset of named fields, local or pushed.
    Dataset(Box<zrecord::Dataset>),
}

/// Opens `path` read-only for a tool: a URL (with `storage_options` over the environment's)
/// as a pushed dataset or store, a local directory holding `dataset.json` as a dataset of
/// named fields, anything else as one store. `verify` is when reads check checksums.
fn open_target(
    py: Python<'_>,
    path: &str,
    storage_options: Option<HashMap<String, String>>,
    verify: zrecord::Verify,
) -> PyResult<Target> {
    let url = zrecord::remote::is_url(path);
    if !url && storage_options.is_some() {
        return Err(crate::remote::options_on_local_path(path));
    }
    let path = path.to_owned();
    let local_dataset = !url && std::path::Path::new(&path).join(zrecord_core::dataset::MANIFEST_FILE).is_file();
    if !url && !local_dataset {
        let opts = zrecord::OpenOptions { create: false, read_only: true, verify, ..Default::default() };
        let store = store_call(py, move || zrecord::Zrecord::open_with(path, opts))?;
        return Ok(Target::Store(Arc::new(store)));
    }
    let ds = call(py, move || match url {
        true => zrecord::Dataset::open_remote(&path, &crate::remote::options(storage_options), verify),
        false => zrecord::Dataset::open_with(&path, zrecord::DatasetOptions { read_only: Some(true), verify }),
    })?;
    Ok(match ds.manifest() {
        Some(_) => Target::Dataset(Box::new(ds)),
        None => Target::Store(call(py, || ds.store(0, 0).cloned())?),
    })
}

/// The parts of a dataset's report that are not per store.
fn dataset_dict<'py>(py: Python<'py>, ds: &zrecord::Dataset) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("path", ds.path().to_string_lossy())?;
    d.set_item("samples", ds.len())?;
    d.set_item("shards", ds.shard_count())?;
    d.set_item("fields", ds.fields().iter().map(|f| f.name.clone()).collect::<Vec<_>>())?;
    d.set_item("metadata", ds.metadata_json())?;
    Ok(d)
}

fn schema_dict<'py>(py: Python<'py>, s: &Schema) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("format", &s.format)?;
    d.set_item("version", s.version)?;
    d.set_item("dtype", &s.dtype)?;
    d.set_item("shape", s.shape.clone())?;
    d.set_item("codec", &s.codec)?;
    Ok(d)
}

fn chunk_bytes_arg(v: i64) -> PyResult<usize> {
    usize::try_from(v)
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| PyValueError::new_err(format!("chunk_bytes must be >= 1, got {v}")))
}

fn inspection_dict<'py>(py: Python<'py>, i: &zrecord::Inspection) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("version", i.version)?;
    d.set_item("layout", &i.layout)?;
    d.set_item("records", i.records)?;
    d.set_item("tail_chunk", i.tail_chunk)?;
    d.set_item("tail_offset", i.tail_offset)?;
    d.set_item("raw_records", i.raw_records)?;
    d.set_item("flate_records", i.flate_records)?;
    d.set_item("zstd_records", i.zstd_records)?;
    d.set_item("bad_entries", i.bad_entries)?;
    d.set_item("live_bytes", i.live_bytes)?;
    d.set_item("logical_bytes", i.logical_bytes)?;
    d.set_item("chunk_bytes", i.chunk_bytes)?;
    d.set_item("reclaimable", i.reclaimable)?;
    d.set_item("checksums", i.checksums)?;
    d.set_item("unchecked", i.unchecked)?;
    let chunks = PyList::empty(py);
    for c in &i.chunks {
        let cd = PyDict::new(py);
        cd.set_item("id", c.id)?;
        cd.set_item("records", c.records)?;
        cd.set_item("live_bytes", c.live_bytes)?;
        cd.set_item("used_bytes", c.used_bytes)?;
        cd.set_item("file_bytes", c.file_bytes)?;
        chunks.append(cd)?;
    }
    d.set_item("chunks", chunks)?;
    d.set_item("problems", &i.problems)?;
    match &i.schema {
        Some(s) => d.set_item("schema", schema_dict(py, s)?)?,
        None => d.set_item("schema", py.None())?,
    }
    Ok(d)
}

/// Header, codec mix, chunk use, sizes and schema of the store at `path`, or of every
/// store of the dataset there (read-only). Returns `("store", report)` or `("dataset",
/// report)`, the dataset's report holding `stores`: `{shard, field, inspection}` each.
#[pyfunction]
#[pyo3(signature = (path, storage_options = None))]
pub fn inspect<'py>(
    py: Python<'py>,
    path: &str,
    storage_options: Option<HashMap<String, String>>,
) -> PyResult<(&'static str, Bound<'py, PyDict>)> {
    match open_target(py, path, storage_options, zrecord::Verify::Auto)? {
        Target::Store(store) => {
            let i = store_call(py, move || store.inspect())?;
            Ok(("store", inspection_dict(py, &i)?))
        }
        Target::Dataset(ds) => {
            let d = dataset_dict(py, &ds)?;
            let reports = call(py, || ds.inspect_stores())?;
            let stores = PyList::empty(py);
            for r in &reports {
                let sd = PyDict::new(py);
                sd.set_item("shard", &r.shard)?;
                sd.set_item("field", &r.field)?;
                sd.set_item("inspection", inspection_dict(py, &r.report)?)?;
                stores.append(sd)?;
            }
            d.set_item("stores", stores)?;
            Ok(("dataset", d))
        }
    }
}

/// `zr stats` of the store or dataset at `path` (read-only): the store's
/// `{records, live_bytes, chunk_bytes, reclaimable[, unchecked]}`, or a dataset's sums with
/// `samples`, `shards` and `fields`.
#[pyfunction]
#[pyo3(signature = (path, storage_options = None))]
pub fn stats<'py>(
    py: Python<'py>,
    path: &str,
    storage_options: Option<HashMap<String, String>>,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    match open_target(py, path, storage_options, zrecord::Verify::Auto)? {
        Target::Store(store) => {
            let sums = store.has_checksums();
            let s = store_call(py, move || store.stats())?;
            crate::store::stats_into(&d, &s, sums)?;
        }
        Target::Dataset(ds) => {
            let s = call(py, || ds.stats())?;
            d.set_item("samples", s.samples)?;
            d.set_item("shards", s.shards)?;
            d.set_item("fields", s.fields)?;
            store_sums_into(&d, &s)?;
        }
    }
    Ok(d)
}

fn verification_dict<'py>(
    py: Python<'py>,
    v: &zrecord::Verification,
    sealed: Option<u32>,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("checked", v.checked)?;
    d.set_item("checksummed", v.checksummed)?;
    d.set_item("unchecked", v.unchecked)?;
    d.set_item("sealed", sealed)?;
    d.set_item("bad_count", v.bad_count)?;
    let bad = PyList::empty(py);
    for b in &v.bad {
        let bd = PyDict::new(py);
        bd.set_item("index", b.index)?;
        bd.set_item("error", &b.error)?;
        bad.append(bd)?;
    }
    d.set_item("bad", bad)?;
    d.set_item("problems", &v.problems)?;
    d.set_item("cut_off", v.cut_off)?;
    Ok(d)
}

/// Checks every checksum and decodes every record of the store at `path`, or of every
/// store of the dataset there (read-only), and lists those that fail: `("store", report)`
/// or `("dataset", report)` as [`inspect`] returns them. With `seal`, first checksums a
/// local store's unchecked records (opening it writable) and reports how many in `sealed`.
#[pyfunction]
#[pyo3(signature = (path, progress = None, seal = false, storage_options = None))]
pub fn verify<'py>(
    py: Python<'py>,
    path: &str,
    progress: Option<Py<PyAny>>,
    seal: bool,
    storage_options: Option<HashMap<String, String>>,
) -> PyResult<(&'static str, Bound<'py, PyDict>)> {
    let mut reporter = Progress::new(progress);
    let bar = &mut reporter;
    if seal {
        let local = !zrecord::remote::is_url(path) && storage_options.is_none();
        if !local || std::path::Path::new(path).join(zrecord_core::dataset::MANIFEST_FILE).is_file() {
            return Err(PyValueError::new_err(format!(
                "seal=True checksums one local store, opened writable; {path} is a dataset of named fields or a \
                 pushed dataset: seal its stores where they were written, before pushing"
            )));
        }
        let path = path.to_owned();
        let (v, sealed) = store_call(py, move || {
            let opts = zrecord::OpenOptions { create: false, ..Default::default() };
            let store = zrecord::Zrecord::open_with(path, opts)?;
            let s = store.seal(&mut |_, _| {})?;
            Ok((store.verify(&mut |done, total| bar.report(done, total))?, s.sealed))
        })?;
        reporter.finish()?;
        return Ok(("store", verification_dict(py, &v, Some(sealed))?));
    }
    match open_target(py, path, storage_options, zrecord::Verify::Auto)? {
        Target::Store(store) => {
            let v = store_call(py, move || store.verify(&mut |done, total| bar.report(done, total)))?;
            reporter.finish()?;
            Ok(("store", verification_dict(py, &v, None)?))
        }
        Target::Dataset(ds) => {
            let reports = call(py, || ds.verify_stores(&mut |done, total| bar.report(done, total)))?;
            reporter.finish()?;
            let d = dataset_dict(py, &ds)?;
            let stores = PyList::empty(py);
            for r in &reports {
                let sd = PyDict::new(py);
                sd.set_item("shard", &r.shard)?;
                sd.set_item("field", &r.field)?;
                sd.set_item("verification", verification_dict(py, &r.report, None)?)?;
                stores.append(sd)?;
            }
            d.set_item("stores", stores)?;
            Ok(("dataset", d))
        }
    }
}

/// Appends every axis-0 slice of the `.npy` at `npy` to the dataset at `path` (created if
/// missing), writing or checking `schema.json` as `Dataset.write` does.
#[pyfunction]
#[pyo3(signature = (npy, path, codec, chunk_bytes, progress = None, min_savings = zrecord::DEFAULT_MIN_SAVINGS))]
pub fn convert<'py>(
    py: Python<'py>,
    npy: PathBuf,
    path: PathBuf,
    codec: &str,
    chunk_bytes: i64,
    progress: Option<Py<PyAny>>,
    min_savings: f64,
) -> PyResult<Bound<'py, PyDict>> {
    let codec = crate::store::codec_named(codec)?;
    let policy = crate::store::policy(codec, min_savings)?;
    let chunk_bytes = chunk_bytes_arg(chunk_bytes)?;
    let mut reporter = Progress::new(progress);
    let bar = &mut reporter;
    let c = store_call(py, move || {
        let store = zrecord::Zrecord::open_with(path, zrecord::OpenOptions { codec, ..Default::default() })?;
        store.convert_npy_with(&npy, policy, chunk_bytes, &mut |done, total| bar.report(done, total))
    })?;
    reporter.finish()?;
    let d = PyDict::new(py);
    d.set_item("appended", c.appended)?;
    d.set_item("first_index", c.first_index)?;
    d.set_item("schema", schema_dict(py, &c.schema)?)?;
    Ok(d)
}

/// Writes the dataset at `path` (opened read-only; a URL with `storage_options`) to the
/// `.npy` file `npy` (one store with a `schema.json`), or a dataset of named fields to the
/// `.npz` file `npy` (`zr export DATASET OUT.npz`), replacing it. Returns the number of
/// samples written.
#[pyfunction]
#[pyo3(signature = (path, npy, chunk_bytes, progress = None, verify = "auto", storage_options = None))]
pub fn export(
    py: Python<'_>,
    path: &str,
    npy: PathBuf,
    chunk_bytes: i64,
    progress: Option<Py<PyAny>>,
    verify: &str,
    storage_options: Option<HashMap<String, String>>,
) -> PyResult<u64> {
    let chunk_bytes = chunk_bytes_arg(chunk_bytes)?;
    let verify = crate::store::verify_named(verify)?;
    let target = open_target(py, path, storage_options, verify)?;
    let mut reporter = Progress::new(progress);
    let bar = &mut reporter;
    let rows = match target {
        Target::Store(store) => {
            store_call(py, move || store.export_npy(&npy, chunk_bytes, &mut |done, total| bar.report(done, total)))?
        }
        Target::Dataset(ds) => call(py, move || {
            zrecord::dataset::export_npy(&ds, &npy, zrecord::dataset::ExportTo::Npz, chunk_bytes, &mut |d, t| {
                bar.report(d, t)
            })
        })?,
    };
    reporter.finish()?;
    Ok(rows)
}

/// Every dataset or store at `path` or below it: local directories, or the URLs of pushed
/// ones under a prefix (one listing request per prefix searched), sorted.
#[pyfunction]
#[pyo3(name = "find_datasets", signature = (path, storage_options = None))]
pub fn find_datasets(
    py: Python<'_>,
    path: &str,
    storage_options: Option<HashMap<String, String>>,
) -> PyResult<Vec<String>> {
    if zrecord::remote::is_url(path) {
        let (url, opts) = (path.to_owned(), crate::remote::options(storage_options));
        return store_call(py, move || {
            let remote = zrecord::remote::Remote::open(&url, &opts)?;
            Ok(zrecord::dataset::find_remote(&remote)?)
        });
    }
    if storage_options.is_some() {
        return Err(crate::remote::options_on_local_path(path));
    }
    let dir = PathBuf::from(path);
    let found = store_call(py, move || zrecord::dataset::find_local(&dir))?;
    Ok(found.into_iter().map(|p| p.to_string_lossy().into_owned()).collect())
}
