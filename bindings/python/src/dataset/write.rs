//! `zrecord._DatasetWriter` has a file of its own, mirroring the crate's `dataset/write.rs`,
//! so that the reading `_Dataset` and the writer can each be read without the other. Its
//! methods only call: the fields, columns and options they take are read in `fields.rs`,
//! `field_write.rs` and `options.rs`, and every rule of a write is the crate's
//! [`DatasetWriter`].

use std::path::PathBuf;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyList;
use zrecord::{Column, DatasetWriter, Field, WriteOptions};

use super::error::to_py;
use super::field_write::{column_of, read_columns};
use super::fields::{field_dict, field_of};
use super::options::{wait_for_lock, write_mode, write_options};
use crate::error;
use crate::pool::call;

/// Adds samples to a dataset (internal: `zrecord.Dataset.write` drives it).
#[pyclass(module = "zrecord", name = "_DatasetWriter")]
pub struct PyDatasetWriter {
    inner: Option<DatasetWriter>,
    ragged: Vec<bool>,
    itemsizes: Vec<usize>,
    /// Samples left out for an empty ragged field so far (kept after the commit).
    skipped: u64,
}

#[pymethods]
impl PyDatasetWriter {
    /// `fields`: a list of dicts with name, kind ("fixed", "ragged", "bytes", "string" or "image"),
    /// dtype (numpy's `dtype.str`; "|u1" for bytes and string), shape (fixed only) and
    /// codec.
    #[new]
    #[pyo3(signature = (path, fields, *, shard_records = None, min_savings = None, layout = None, skip_empty = false, mode = "append", lock_wait = 0.0))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        path: PathBuf,
        fields: &Bound<'_, PyList>,
        shard_records: Option<u64>,
        min_savings: Option<f64>,
        layout: Option<&str>,
        skip_empty: bool,
        mode: &str,
        lock_wait: f64,
    ) -> PyResult<Self> {
        let defs = fields.iter().map(|item| field_of(&item)).collect::<PyResult<Vec<_>>>()?;
        let (mode, lock_wait) = (write_mode(mode)?, wait_for_lock(lock_wait)?);
        let options =
            WriteOptions { skip_empty, mode, lock_wait, ..write_options(shard_records, min_savings, layout)? };
        let writer = call(py, move || DatasetWriter::open(path, defs, options))?;
        let ragged = writer.fields().iter().map(Field::is_ragged).collect();
        let itemsizes = writer.fields().iter().map(|f| f.itemsize().unwrap_or(1) as usize).collect();
        Ok(PyDatasetWriter { inner: Some(writer), ragged, itemsizes, skipped: 0 })
    }

    /// The dataset's fields, as `_Dataset.fields` gives them (an existing dataset's codecs).
    #[getter]
    fn fields<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let w = self.writer()?;
        let items = w.fields().iter().map(|f| field_dict(py, f)).collect::<PyResult<Vec<_>>>()?;
        PyList::new(py, items)
    }

    /// Samples the dataset will hold once committed.
    fn __len__(&self) -> PyResult<usize> {
        Ok(self.writer()?.len() as usize)
    }

    /// Stages one block: per field, a C-contiguous array of samples (fixed), or a
    /// `(values, offsets)` pair (ragged: values 1-D C-contiguous in the field's dtype,
    /// offsets `n + 1` element offsets). Returns the number of samples.
    fn write(&mut self, py: Python<'_>, columns: &Bound<'_, PyList>) -> PyResult<u64> {
        let regions = read_columns(columns, &self.ragged, &self.itemsizes)?;
        let cols: Vec<Column<'_>> = regions.iter().map(|(r, o)| column_of(r, o)).collect();
        let writer = self.inner.as_mut().ok_or_else(|| error::closed(py))?;
        let written = call(py, || writer.write(&cols))?;
        self.skipped = writer.skipped();
        Ok(written)
    }

    /// Samples left out so far for an empty ragged field (`skip_empty=True`).
    #[getter]
    fn skipped(&self) -> u64 {
        self.skipped
    }

    /// The dataset card the commit writes (JSON text of an object; replaces the old card).
    fn set_metadata(&mut self, py: Python<'_>, json: &str) -> PyResult<()> {
        let writer = self.inner.as_mut().ok_or_else(|| error::closed(py))?;
        writer.set_metadata(json).map_err(|e| to_py(py, e))
    }

    /// Publishes everything written; the writer is done.
    fn commit(&mut self, py: Python<'_>) -> PyResult<()> {
        let writer = self.inner.take().ok_or_else(|| error::closed(py))?;
        call(py, move || writer.commit().map(drop))
    }

    /// Drops everything written and the new shards; the writer is done. Idempotent.
    fn discard(&mut self, py: Python<'_>) {
        if let Some(w) = self.inner.take() {
            py.detach(move || w.discard());
        }
    }
}

impl PyDatasetWriter {
    fn writer(&self) -> PyResult<&DatasetWriter> {
        self.inner.as_ref().ok_or_else(|| PyValueError::new_err("the writer was committed or discarded"))
    }
}
