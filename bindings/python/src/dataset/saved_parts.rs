//! Parts written by separate processes and kept at the destination until one commits them
//! (`zrecord.write_part`, `zrecord.commit_parts`), mirroring the crate's
//! `dataset/saved_parts.rs`: apart from `parts.rs` because its parts outlive the process
//! that wrote them, and the crate keeps them apart for the same reason.

use std::path::PathBuf;

use pyo3::prelude::*;

use super::error::at_url;
use crate::pool::call;

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
