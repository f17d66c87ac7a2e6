//! `Dataset.delete` of a dataset of named fields, mirroring the crate's `dataset/delete.rs`
//! (and, for a URL, the delete of `dataset/remote_edit.rs`): one of the dataset's changes,
//! each in a file of its own as in the crate, so that a change to one is read alone.

use pyo3::prelude::*;

use super::error::at_url;
use crate::buffers;
use crate::pool::call;

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
