//! Batch arrays whose memory goes back to a [`BufferPool`]: the one batch buffer pool of the
//! package, used by the DataLoader's batches and by `Dataset.__getitems__` alike.
//!
//! A batch's buffer becomes the memory of its numpy array without a copy; the array's base
//! object is a [`BatchBuffer`], which gives the buffer back to its pool once the array and
//! every view of it (a reshape, a slice, a memoryview, a `torch.from_numpy` tensor) are gone.
//! So a batch a caller holds is never written again, and a loop that drops each batch
//! before the next reuses the same few buffers instead of mapping, faulting in and zeroing
//! fresh memory every step.

use std::sync::Arc;

use numpy::ndarray::ArrayView1;
use numpy::PyArray1;
use pyo3::prelude::*;
use zrecord::BufferPool;

/// Pooled batches start on a boundary of this many bytes: malloc's large blocks start 16
/// bytes past a page, which makes copying page-aligned records into them stall on 4K
/// aliasing.
pub const ALIGN: usize = 4096;

/// `Dataset.__getitems__` batches smaller than this are plain numpy arrays, not pooled:
/// cheap to make, they would crowd the pool's few slots out of the large batches it is for.
pub const POOL_MIN_BYTES: usize = 256 << 10;

/// Hands `buf` to numpy as an array of `dtype` shaped `shape`, without copying it; `buf`
/// goes back to `pool` when the array is gone.
pub fn pooled_array<'py>(
    py: Python<'py>,
    buf: Vec<u8>,
    pool: &Arc<BufferPool>,
    dtype: &Bound<'py, PyAny>,
    shape: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    let len = buf.len();
    array_of(py, BatchBuffer { buf, start: 0, len, pool: pool.clone() }, dtype, shape)
}

/// A buffer from `pool` holding `len` bytes that start on an [`ALIGN`] boundary: fill
/// `buf[start..start + len]`, then hand it to [`aligned_array`].
pub fn take_aligned(pool: &BufferPool, len: usize) -> Result<(Vec<u8>, usize), zrecord::Error> {
    let mut buf = pool.take(len + ALIGN - 1)?.0;
    let start = buf.as_mut_ptr().align_offset(ALIGN).min(ALIGN - 1);
    Ok((buf, start))
}

/// [`pooled_array`] over `buf[start..start + len]` (from [`take_aligned`]).
pub fn aligned_array<'py>(
    py: Python<'py>,
    (buf, start): (Vec<u8>, usize),
    len: usize,
    pool: &Arc<BufferPool>,
    dtype: &Bound<'py, PyAny>,
    shape: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    array_of(py, BatchBuffer { buf, start, len, pool: pool.clone() }, dtype, shape)
}

fn array_of<'py>(
    py: Python<'py>,
    owner: BatchBuffer,
    dtype: &Bound<'py, PyAny>,
    shape: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    assert!(owner.start + owner.len <= owner.buf.len(), "batch range outside its buffer");
    let owner = Bound::new(py, owner)?;
    let this = owner.get();
    let bytes: &[u8] = &this.buf[this.start..this.start + this.len];
    let view = ArrayView1::from(bytes);
    // SAFETY: the array views `owner.buf[start..start + len]`, which `owner` (the array's
    // base object, kept alive by numpy for as long as the array or any view of it lives)
    // owns and never changes: the class is frozen, so the Vec is neither reallocated nor
    // written through it, and its memory is only handed back (in `Drop`) once `owner`
    // itself is freed.
    let array = unsafe { PyArray1::borrow_from_array(&view, owner.clone().into_any()) };
    array.call_method1("view", (dtype,))?.call_method1("reshape", (shape,))
}

/// The memory of one batch array, as the base object of its numpy array; it goes back to
/// its pool once the last array viewing it is freed.
#[pyclass(module = "zrecord", frozen)]
struct BatchBuffer {
    buf: Vec<u8>,
    /// Where the array's bytes start in `buf`, and how many there are.
    start: usize,
    len: usize,
    pool: Arc<BufferPool>,
}

impl Drop for BatchBuffer {
    fn drop(&mut self) {
        self.pool.give(std::mem::take(&mut self.buf));
    }
}
