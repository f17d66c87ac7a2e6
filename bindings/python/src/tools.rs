//! The `zr` tools for Python (zrecord-core's `tools`): inspect, verify, convert a `.npy`
//! into a dataset, export a dataset to `.npy`.
//!
//! Each function opens the store itself (read-only where it only reads), runs the core's
//! tool with the GIL released, and returns plain dicts; `zrecord/tools.py` turns them into
//! the documented dataclasses and owns the user-facing parts (progress bars, leaving
//! nothing behind on failure).

use std::path::PathBuf;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use zrecord::Schema;

use crate::pool::store_call;
use crate::progress::Progress;

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

/// Header, codec mix, chunk use, sizes and schema of the store at `path` (read-only).
#[pyfunction]
pub fn inspect(py: Python<'_>, path: PathBuf) -> PyResult<Bound<'_, PyDict>> {
    let i = store_call(py, move || zrecord::Zrecord::open_read_only(path)?.inspect())?;
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

/// Checks every checksum and decodes every record of the store at `path` (read-only), and
/// lists those that fail. With `seal`, first checksums the unchecked records (opening the
/// store writable) and reports how many in `sealed`.
#[pyfunction]
#[pyo3(signature = (path, progress = None, seal = false))]
pub fn verify(py: Python<'_>, path: PathBuf, progress: Option<Py<PyAny>>, seal: bool) -> PyResult<Bound<'_, PyDict>> {
    let mut reporter = Progress::new(progress);
    let bar = &mut reporter;
    let (v, sealed) = store_call(py, move || {
        let (store, sealed) = if seal {
            let opts = zrecord::OpenOptions { create: false, ..Default::default() };
            let store = zrecord::Zrecord::open_with(path, opts)?;
            let s = store.seal(&mut |_, _| {})?;
            (store, Some(s.sealed))
        } else {
            (zrecord::Zrecord::open_read_only(path)?, None)
        };
        Ok((store.verify(&mut |done, total| bar.report(done, total))?, sealed))
    })?;
    reporter.finish()?;
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

/// Writes the dataset at `path` (opened read-only) to the `.npy` file `npy`, replacing it.
/// Returns the number of samples written.
#[pyfunction]
#[pyo3(signature = (path, npy, chunk_bytes, progress = None, verify = "auto"))]
pub fn export(
    py: Python<'_>,
    path: PathBuf,
    npy: PathBuf,
    chunk_bytes: i64,
    progress: Option<Py<PyAny>>,
    verify: &str,
) -> PyResult<u64> {
    let chunk_bytes = chunk_bytes_arg(chunk_bytes)?;
    let verify = crate::store::verify_named(verify)?;
    let mut reporter = Progress::new(progress);
    let bar = &mut reporter;
    let rows = store_call(py, move || {
        let opts = zrecord::OpenOptions { create: false, read_only: true, verify, ..Default::default() };
        let store = zrecord::Zrecord::open_with(path, opts)?;
        store.export_npy(&npy, chunk_bytes, &mut |done, total| bar.report(done, total))
    })?;
    reporter.finish()?;
    Ok(rows)
}
