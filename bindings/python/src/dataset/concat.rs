//! `zrecord.concat`, mirroring the crate's `dataset/concat.rs`: which sources go together
//! (all local, or all in one object store) is checked here only to say so in Python's
//! terms before anything is opened; the concatenation is the crate's.

use std::path::PathBuf;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use super::error::at_url;
use crate::pool::call;

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
