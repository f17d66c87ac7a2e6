//! `zrecord.Sampler`: the endless index generator (zrecord-core's `sampler`).
//!
//! `zrecord/sampler.py` subclasses this to add the `Sampler.Mode` constants loaderx has.

use std::sync::Mutex;

use numpy::PyArray1;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use zrecord::Mode;

use crate::buffers::zeroed;
use crate::error;

/// An endless generator of index batches over `0..length`.
///
/// `Sampler(length, batch_size, mode, seed=42)`: mode 0 (`Sampler.Mode.SEQUENTIAL`) slides
/// a window over the index space treated as a circle; mode 1 (`Sampler.Mode.IID`) draws
/// uniformly with replacement from a stream fixed by `seed`, the same on every platform;
/// mode 2 (`Sampler.Mode.SHUFFLE`) visits every index once per epoch in an order fixed by
/// `(seed, epoch)`, dropping the `length % batch_size` that would not fill a last batch.
/// `next()` (or iteration) returns a fresh uint64 array of `batch_size` indices; the stream
/// never ends.
#[pyclass(module = "zrecord", name = "Sampler", frozen, subclass)]
pub struct Sampler {
    inner: Mutex<zrecord::Sampler>,
}

/// A mode number from Python, or a `ValueError` naming the three there are (the rule is
/// the loader's, [`zrecord::loader::mode_of`], so that both say the same).
pub fn mode_from(mode: i64) -> PyResult<Mode> {
    zrecord::loader::mode_of(mode).map_err(|e| PyValueError::new_err(e.to_string()))
}

impl Sampler {
    /// A core sampler from Python arguments, with Python errors.
    pub fn build(py: Python<'_>, length: i64, batch_size: i64, mode: i64, seed: u64) -> PyResult<zrecord::Sampler> {
        let length = u64::try_from(length).map_err(|_| PyValueError::new_err("length must be >= 1"))?;
        let batch_size = usize::try_from(batch_size).map_err(|_| PyValueError::new_err("batch_size must be >= 1"))?;
        zrecord::Sampler::new(length, batch_size, mode_from(mode)?, seed).map_err(|e| error::to_py(py, e))
    }
}

#[pymethods]
impl Sampler {
    #[new]
    #[pyo3(signature = (length, batch_size, mode, seed = 42))]
    fn new(py: Python<'_>, length: i64, batch_size: i64, mode: i64, seed: u64) -> PyResult<Self> {
        Ok(Sampler { inner: Mutex::new(Self::build(py, length, batch_size, mode, seed)?) })
    }

    /// Size of the index space.
    #[getter]
    fn length(&self) -> u64 {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).length()
    }

    /// Indices per batch.
    #[getter]
    fn batch_size(&self) -> usize {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).batch_size()
    }

    /// The drawing mode: 0 sequential, 1 IID, 2 shuffle.
    #[getter]
    fn mode(&self) -> u8 {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).mode() as u8
    }

    /// The next batch: a fresh uint64 array of `batch_size` indices.
    fn next<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyArray1<u64>>> {
        let mut sampler = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let mut batch = zeroed::<u64>(sampler.batch_size()).map_err(|e| error::to_py(py, e))?;
        sampler.fill(&mut batch);
        // The vector becomes the array's memory: no copy.
        Ok(PyArray1::from_vec(py, batch))
    }

    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyArray1<u64>>> {
        self.next(py)
    }
}
