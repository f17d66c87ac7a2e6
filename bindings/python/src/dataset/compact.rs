//! `Dataset.compact` of a dataset of named fields, mirroring the crate's
//! `dataset/compact.rs`: one of the dataset's changes, each in a file of its own as in the
//! crate, so that a change to one is read alone.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::pool::call;

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
