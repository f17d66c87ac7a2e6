//! A dataset error becomes a Python exception in one place, below everything that raises
//! one: the dataset classes, the pool's calls (`pool.rs`), the loader and the text import
//! all reach it without importing each other. It mirrors the crate's `dataset/error.rs`
//! ([`zrecord::DatasetError`]).

use std::path::PathBuf;

use pyo3::prelude::*;
use zrecord::DatasetError;

use crate::error;

/// A dataset error as the exception of its code, with `path` and `field` attributes.
pub fn to_py(py: Python<'_>, e: DatasetError) -> PyErr {
    let path = e.path.display().to_string();
    let field = e.field.clone();
    let record = e.record();
    let message = e.to_string();
    let err = if e.metadata && matches!(e.source, zrecord::Error::Format(_)) {
        error::metadata_error(py, message)
    } else {
        error::to_py_with_message(py, e.source, message)
    };
    let value = err.value(py);
    // ValueError (invalid argument) instances take attributes as well.
    let _ = value.setattr("path", path);
    let _ = value.setattr("field", field);
    let _ = value.setattr("record", record);
    err
}

/// A failure to open the location `url`, as a dataset error naming it.
pub fn at_url(url: &str, e: zrecord::IoError) -> DatasetError {
    DatasetError { path: PathBuf::from(url), field: None, source: zrecord::Error::Io(e), metadata: false }
}
