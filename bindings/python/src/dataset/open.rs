//! Opening a dataset for `zrecord.Dataset`, mirroring the crate's `dataset/open.rs`: which
//! keyword arguments go with a URL and which with a local path is decided before the
//! crate opens anything, and `_Dataset`'s constructor only calls this.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use zrecord::{DatasetOptions, OpenOptions};

use crate::pool::call;
use crate::store::{codec_named, verify_named, Zrecord};

/// The dataset `_Dataset(path, ...)` opens; the arguments are its constructor's.
#[allow(clippy::too_many_arguments)]
pub fn open(
    py: Python<'_>,
    path: PathBuf,
    read_only: Option<bool>,
    verify: &str,
    warn: bool,
    storage_options: Option<HashMap<String, String>>,
    cache_bytes: Option<u64>,
    cache_dir: Option<PathBuf>,
) -> PyResult<zrecord::Dataset> {
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
    Ok(ds)
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
