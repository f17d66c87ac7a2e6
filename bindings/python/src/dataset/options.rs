//! The write options are read from Python's keyword arguments in one file, mirroring the
//! crate's `dataset/options.rs`, so that `_DatasetWriter` and `_FieldAdder` read the ones
//! they share (`min_savings`) the same way and the writer's constructor only calls. The
//! defaults and the limits are the crate's ([`WriteOptions`]).

use std::time::Duration;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use zrecord::{WriteMode, WriteOptions};

/// The options `shard_records`, `min_savings` and `layout` ("dense" or "sparse") set, the
/// crate's defaults for the rest.
pub fn write_options(
    shard_records: Option<u64>,
    min_savings: Option<f64>,
    layout: Option<&str>,
) -> PyResult<WriteOptions> {
    let mut options = WriteOptions::default();
    if let Some(n) = shard_records {
        options.shard_records = n;
    }
    if let Some(m) = min_savings {
        options.min_savings = m;
    }
    if let Some(name) = layout {
        options.layout = zrecord::FileLayout::from_name(name)
            .ok_or_else(|| PyValueError::new_err(format!("layout must be \"dense\" or \"sparse\", not {name:?}")))?;
    }
    Ok(options)
}

/// The write mode `mode` names: "create", "append" or "overwrite".
pub fn write_mode(mode: &str) -> PyResult<WriteMode> {
    WriteMode::from_name(mode).ok_or_else(|| {
        PyValueError::new_err(format!("mode must be \"create\", \"append\" or \"overwrite\", not {mode:?}"))
    })
}

/// How long a write waits for another writer's lock: `lock_wait` seconds.
pub fn wait_for_lock(lock_wait: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(lock_wait)
        .map_err(|_| PyValueError::new_err(format!("timeout must be a number of seconds >= 0, got {lock_wait}")))
}
