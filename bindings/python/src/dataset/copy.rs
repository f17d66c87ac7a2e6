//! `zrecord.copy`, mirroring the crate's `dataset/copy.rs`: a copy that stays consistent
//! while writers run is the crate's; this file only passes the paths and the progress.

use std::path::PathBuf;

use pyo3::prelude::*;

use crate::pool::call;

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
