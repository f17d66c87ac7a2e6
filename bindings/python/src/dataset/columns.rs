//! Fields added and dropped, mirroring the crate's `dataset/columns.rs` ([`zrecord::FieldAdder`],
//! [`zrecord::drop_field`]): a change of a dataset's fields rather than of its samples, with
//! a class of its own (`_FieldAdder`) that takes columns as the writer does.

use pyo3::prelude::*;

use super::error::at_url;
use super::field_write::{column_of, read_column};
use super::fields::field_of;
use super::options::write_options;
use crate::error;
use crate::pool::call;

/// `Dataset.add_field`'s native half: one field added to every sample of a local dataset
/// or one at a URL (`zrecord::FieldAdder`), its columns written in index order, then
/// committed.
#[pyclass(module = "zrecord", name = "_FieldAdder")]
pub struct PyFieldAdder {
    inner: Option<zrecord::FieldAdder>,
    ragged: bool,
    itemsize: usize,
}

#[pymethods]
impl PyFieldAdder {
    /// `field`: a dict as `_DatasetWriter` takes.
    #[new]
    #[pyo3(signature = (path, field, *, min_savings = None, storage_options = None))]
    fn new(
        py: Python<'_>,
        path: String,
        field: &Bound<'_, PyAny>,
        min_savings: Option<f64>,
        storage_options: Option<std::collections::HashMap<String, String>>,
    ) -> PyResult<Self> {
        let def = field_of(field)?;
        let options = write_options(None, min_savings, None)?;
        let (ragged, itemsize) = (def.is_ragged(), def.itemsize().unwrap_or(1) as usize);
        let opts = crate::remote::options(storage_options);
        let adder = call(py, move || {
            if zrecord::remote::is_url(&path) {
                let remote = zrecord::remote::Remote::open(&path, &opts).map_err(|e| at_url(&path, e))?;
                zrecord::FieldAdder::open_remote(&remote, def, options)
            } else {
                zrecord::FieldAdder::open(path, def, options)
            }
        })?;
        Ok(PyFieldAdder { inner: Some(adder), ragged, itemsize })
    }

    /// Samples the dataset holds (what the field must hold).
    fn __len__(&self, py: Python<'_>) -> PyResult<usize> {
        Ok(self.inner.as_ref().ok_or_else(|| error::closed(py))?.len() as usize)
    }

    /// Stages the next samples (a column as `_DatasetWriter.write` takes one).
    fn write(&mut self, py: Python<'_>, column: &Bound<'_, PyAny>) -> PyResult<u64> {
        let (region, offsets) = read_column(column, 0, self.ragged, self.itemsize)?;
        let col = column_of(&region, &offsets);
        let adder = self.inner.as_mut().ok_or_else(|| error::closed(py))?;
        call(py, move || adder.write(col))
    }

    /// Publishes the field; the adder is done.
    fn commit(&mut self, py: Python<'_>) -> PyResult<()> {
        let adder = self.inner.take().ok_or_else(|| error::closed(py))?;
        call(py, move || adder.commit().map(drop))
    }

    /// Drops what was written; the adder is done. Idempotent.
    fn discard(&mut self, py: Python<'_>) {
        if let Some(a) = self.inner.take() {
            py.detach(move || a.discard());
        }
    }
}

/// `Dataset.drop_field`: removes field `name` from the dataset at `path`, a local folder
/// or a URL.
#[pyfunction]
#[pyo3(name = "_drop_field", signature = (path, name, storage_options = None))]
pub fn drop_field(
    py: Python<'_>,
    path: String,
    name: String,
    storage_options: Option<std::collections::HashMap<String, String>>,
) -> PyResult<()> {
    let opts = crate::remote::options(storage_options);
    call(py, move || {
        if zrecord::remote::is_url(&path) {
            let remote = zrecord::remote::Remote::open(&path, &opts).map_err(|e| at_url(&path, e))?;
            zrecord::dataset::drop_field_remote(&remote, &name).map(drop)
        } else {
            zrecord::drop_field(&path, &name).map(drop)
        }
    })
}
