//! zrecord's [`Error`] as Python exceptions.
//!
//! The classes live in `zrecord/errors.py` (a hierarchy under `ZrecordError(RuntimeError)`
//! carrying the stable numeric `code`); this module looks them up once and raises the one
//! matching an error's code. The codes come from the core's table
//! (`zrecord_core::error::ERROR_KINDS`), which the module also exports as `ERROR_KINDS` and
//! `BOUNDARY_ERROR_KINDS` so that `tests/test_errors.py` can hold `errors.py` to it. Codes
//! -1 ..= -8 are loaderx 0.5.4's; -9 is a lock conflict (including use after close), -100 a
//! bug caught here. Invalid arguments (-10) are a `ValueError`, as Python users expect.

use std::any::Any;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyModule, PyTuple};
use zrecord::{Error, IoErrorKind};
use zrecord_core::error::{ErrorKind, BOUNDARY_ERROR_KINDS, ERROR_KINDS};

/// Code of a lock conflict (also the code of `StoreClosedError`).
pub const LOCKED: i32 = ErrorKind::LOCKED.code;
/// Code of an invalid argument; raised as `ValueError`.
pub const INVALID_ARGUMENT: i32 = ErrorKind::INVALID_ARGUMENT.code;
/// Code of a Rust panic caught at the boundary: a bug in zrecord, reported, not a crash.
pub const INTERNAL: i32 = ErrorKind::INTERNAL.code;
/// Code of a record that does not decode (a damaged record, an image that is not one).
pub const DECODE: i32 = ErrorKind::DECODE.code;
/// Code of an out-of-range index (loaderx's -3).
pub const INDEX_OUT_OF_RANGE: i32 = ErrorKind::INDEX_OUT_OF_RANGE.code;

/// Adds `ERROR_KINDS` and `BOUNDARY_ERROR_KINDS` to the module: tuples of
/// `(code, name, python_class, message)`, in the core's order.
pub fn export_tables(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    for (attr, kinds) in [("ERROR_KINDS", ERROR_KINDS), ("BOUNDARY_ERROR_KINDS", BOUNDARY_ERROR_KINDS)] {
        let rows = kinds.iter().map(|k| (k.code, k.name, k.python, k.message));
        m.add(attr, PyTuple::new(py, rows)?)?;
    }
    Ok(())
}

static ERRORS: PyOnceLock<Py<PyModule>> = PyOnceLock::new();

/// The exception for `code`, with `message`, as `zrecord.errors.error_for` builds it.
pub fn zrecord_error(py: Python<'_>, code: i32, message: String) -> PyErr {
    if code == INVALID_ARGUMENT {
        return PyValueError::new_err(message);
    }
    from_errors_module(py, "error_for", (code, message))
}

/// A dataset's metadata file (`schema.json`, `dataset.json`) that is not valid: a
/// `FormatError` that is also the `ValueError` loaderx raised there.
pub fn metadata_error(py: Python<'_>, message: String) -> PyErr {
    from_errors_module(py, "metadata_error", (message,))
}

/// Warns (`zrecord.errors.ChecksumsLostWarning`) that the store at `path` kept checksums
/// but its `checksums.zrc` is gone: its records read unchecked. `stacklevel` as Python's
/// `warnings.warn` counts it from the frame that called into the extension.
pub fn warn_checksums_lost(py: Python<'_>, path: &std::path::Path, stacklevel: i32) -> PyResult<()> {
    let module = ERRORS.get_or_try_init(py, || PyModule::import(py, "zrecord.errors").map(Bound::unbind))?;
    let category = module.bind(py).getattr("ChecksumsLostWarning")?;
    let message = std::ffi::CString::new(format!(
        "{}: checksums.zrc is missing or unusable, but this store kept checksums: its records are read \
         unchecked; restore the file, or zrecord.verify(path, seal=True) to checksum them as they are now",
        path.display()
    ))
    .unwrap_or_default();
    PyErr::warn(py, &category, &message, stacklevel)
}

/// Calls `zrecord.errors.<factory>(*args)` and returns the exception it builds.
fn from_errors_module<'py, A>(py: Python<'py>, factory: &str, args: A) -> PyErr
where
    A: pyo3::call::PyCallArgs<'py>,
{
    let build = || -> PyResult<PyErr> {
        let module = ERRORS.get_or_try_init(py, || PyModule::import(py, "zrecord.errors").map(Bound::unbind))?;
        let exc = module.bind(py).call_method1(factory, args)?;
        Ok(PyErr::from_value(exc))
    };
    // Only a broken installation fails to build the exception; raising why beats hiding it.
    build().unwrap_or_else(|e| e)
}

/// The Python exception for a store error. A file error (a `StoreIOError`, also an
/// `OSError`) gets the `errno` Python users test for, when its kind has one.
pub fn to_py(py: Python<'_>, e: Error) -> PyErr {
    let message = e.to_string();
    to_py_with_message(py, e, message)
}

/// [`to_py`] with another message (one that adds where the error happened).
pub fn to_py_with_message(py: Python<'_>, e: Error, message: String) -> PyErr {
    let errno = match &e {
        Error::Io(io) => match io.kind {
            IoErrorKind::NotFound => Some("ENOENT"),
            IoErrorKind::PermissionDenied => Some("EACCES"),
            IoErrorKind::StorageFull => Some("ENOSPC"),
            _ => None,
        },
        _ => None,
    };
    let err = zrecord_error(py, e.code(), message);
    if let Some(name) = errno {
        // Only `errno` is set: with `strerror` also set, str() would become "[Errno N] ...".
        let set = || -> PyResult<()> {
            let value = PyModule::import(py, "errno")?.getattr(name)?;
            err.value(py).setattr("errno", value)
        };
        if let Err(why) = set() {
            return why;
        }
    }
    err
}

/// The error for a Rust panic caught at the boundary.
pub fn panicked(py: Python<'_>, payload: Box<dyn Any + Send>) -> PyErr {
    let what = payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".to_owned());
    zrecord_error(py, INTERNAL, format!("internal error (please report): {what}"))
}

/// The error for a store used after `close()`.
pub fn closed(py: Python<'_>) -> PyErr {
    from_errors_module(py, "StoreClosedError", ("store is closed",))
}
