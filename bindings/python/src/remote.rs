//! Object storage for Python: `zrecord.push`, `zrecord.pull` and a pushed dataset's read
//! counts. Opening a
//! pushed dataset is `_Dataset(url, storage_options=...)` ([`crate::dataset`]); every rule
//! is the `zrecord` crate's ([`zrecord::remote`]).

use std::collections::HashMap;
use std::path::PathBuf;

use pyo3::prelude::*;
use pyo3::types::PyDict;
use zrecord::remote::{push::pull as pull_from, push::push as push_to, Remote, RemoteCounts};

use crate::error;
use crate::progress::Progress;

/// `storage_options` as object_store's key/value pairs.
pub fn options(storage_options: Option<HashMap<String, String>>) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = storage_options.unwrap_or_default().into_iter().collect();
    v.sort();
    v
}

/// The error for `storage_options` given with the local path `path`: they configure an
/// object store client, and a local path has none.
pub fn options_on_local_path(path: impl std::fmt::Display) -> PyErr {
    pyo3::exceptions::PyValueError::new_err(format!(
        "storage_options apply to a URL (s3://, gs://, az://, https://), not to the local path {path}"
    ))
}

/// The counts as a dict.
pub fn counts_dict<'py>(py: Python<'py>, c: RemoteCounts) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("requests", c.requests)?;
    d.set_item("bytes", c.bytes)?;
    d.set_item("retries", c.retries)?;
    d.set_item("hits", c.hits)?;
    d.set_item("disk_hits", c.disk_hits)?;
    d.set_item("disk_bytes", c.disk_bytes)?;
    d.set_item("most_in_flight", c.most_in_flight)?;
    d.set_item("stalls", c.stalls)?;
    Ok(d)
}

/// What every process that read through the cache directory `dir` fetched, summed, with
/// `processes`: how many ([`zrecord::remote::traffic`]).
#[pyfunction]
#[pyo3(name = "_traffic_total")]
pub fn traffic_total(py: Python<'_>, dir: PathBuf) -> PyResult<Bound<'_, PyDict>> {
    let (counts, processes) =
        zrecord::remote::traffic::total(&dir).map_err(|e| error::to_py(py, zrecord::Error::Io(e)))?;
    let d = counts_dict(py, counts)?;
    d.del_item("most_in_flight")?;
    d.set_item("processes", processes)?;
    Ok(d)
}

/// True when `path` names an object store location (`s3://`, `gs://`, `az://`,
/// `https://`, ...), by the native host's own rule.
#[pyfunction]
#[pyo3(name = "_is_url")]
pub fn is_url(path: &str) -> bool {
    zrecord::remote::is_url(path)
}

/// True when a dataset or store is pushed at `url` (its listing `remote.json` is there).
#[pyfunction]
#[pyo3(name = "_remote_listed", signature = (url, storage_options = None))]
pub fn remote_listed(py: Python<'_>, url: String, storage_options: Option<HashMap<String, String>>) -> PyResult<bool> {
    let opts = options(storage_options);
    py.detach(move || {
        let remote = Remote::open(&url, &opts)?;
        Ok(zrecord::remote::push::read_listing(&remote)?.is_some())
    })
    .map_err(|e| error::to_py(py, zrecord::Error::Io(e)))
}

/// Pushes the dataset or store at `local` to `url`; returns what it did.
#[pyfunction]
#[pyo3(name = "_push", signature = (local, url, storage_options = None, progress = None))]
pub fn push<'py>(
    py: Python<'py>,
    local: PathBuf,
    url: String,
    storage_options: Option<HashMap<String, String>>,
    progress: Option<Py<PyAny>>,
) -> PyResult<Bound<'py, PyDict>> {
    let opts = options(storage_options);
    let mut reporter = Progress::new(progress);
    let bar = &mut reporter;
    let done = py
        .detach(move || {
            let remote = Remote::open(&url, &opts)?;
            push_to(&local, &remote, &mut |d, t| bar.report(d, t))
        })
        .map_err(|e| error::to_py(py, zrecord::Error::Io(e)))?;
    reporter.finish()?;
    let d = PyDict::new(py);
    d.set_item("kind", done.kind)?;
    d.set_item("files", done.files)?;
    d.set_item("uploaded", done.uploaded)?;
    d.set_item("bytes", done.bytes)?;
    d.set_item("stored", done.stored)?;
    d.set_item("apparent", done.apparent)?;
    Ok(d)
}

/// Pulls the dataset or store pushed to `url` into the existing empty directory `local`;
/// returns the number of files.
#[pyfunction]
#[pyo3(name = "_pull", signature = (url, local, storage_options = None, progress = None))]
pub fn pull(
    py: Python<'_>,
    url: String,
    local: PathBuf,
    storage_options: Option<HashMap<String, String>>,
    progress: Option<Py<PyAny>>,
) -> PyResult<u64> {
    let opts = options(storage_options);
    let mut reporter = Progress::new(progress);
    let bar = &mut reporter;
    let files = py
        .detach(move || {
            let remote = Remote::open(&url, &opts)?;
            pull_from(&remote, &local, &mut |d, t| bar.report(d, t))
        })
        .map_err(|e| error::to_py(py, zrecord::Error::Io(e)))?;
    reporter.finish()?;
    Ok(files)
}

/// `Dataset.write(url, ...)`'s upload: the committed local dataset at `local` written into
/// the object store at `dest` by `mode` ("create", "append" or "overwrite"; the host's
/// [`zrecord::dataset::write_remote`]). Returns the number of samples written.
#[pyfunction]
#[pyo3(name = "_write_remote", signature = (local, dest, mode, storage_options = None))]
pub fn write_remote(
    py: Python<'_>,
    local: std::path::PathBuf,
    dest: String,
    mode: &str,
    storage_options: Option<HashMap<String, String>>,
) -> PyResult<u64> {
    let Some(mode) = zrecord::dataset::WriteMode::from_name(mode) else {
        return Err(pyo3::exceptions::PyValueError::new_err(format!(
            "mode must be \"create\", \"append\" or \"overwrite\", not {mode:?}"
        )));
    };
    let opts = options(storage_options);
    crate::pool::call(py, move || {
        let remote = zrecord::remote::Remote::open(&dest, &opts).map_err(|e| zrecord::DatasetError {
            path: std::path::PathBuf::from(&dest),
            field: None,
            source: zrecord::Error::Io(e),
            metadata: false,
        })?;
        zrecord::dataset::write_remote(&local, &remote, mode)
    })
}
