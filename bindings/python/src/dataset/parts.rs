//! A dataset written in parts by many workers (`zrecord.ray`) and committed once, mirroring
//! the crate's `dataset/parts.rs` ([`zrecord::dataset::Part`]): what a part holds and how
//! parts are committed are the crate's; this file passes them as JSON text.

use std::path::PathBuf;

use pyo3::prelude::*;
use zrecord::WriteOptions;

use super::error::at_url;
use crate::pool::call;

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
