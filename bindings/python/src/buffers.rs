//! Python arguments → checked byte regions and index vectors.
//!
//! A store writes records straight into the caller's memory and reads appends straight
//! out of it, with the GIL released. Before handing such memory to Rust as a slice, this
//! module checks everything that would otherwise corrupt memory or crash: the region must be
//! one C-contiguous run of bytes, writable when written, and must not hold Python object
//! pointers (raw record bytes written over `PyObject*`s would crash the interpreter later).
//!
//! Index, offset and length arguments are small next to the records they describe, so they
//! are always copied into a `Vec`. That keeps them from aliasing a destination buffer (a
//! caller may legally pass views of one array as both) and lets the call run without the
//! GIL on memory no Python thread can touch.

use numpy::npyffi::{_PyArray_GET_ITEM_DATA, flags};
use numpy::{PyArrayDescrMethods, PyArrayDyn, PyArrayMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::buffer::PyUntypedBuffer;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyModule;

use crate::error;

/// A byte region of a Python object, held (and so kept alive and un-resizable) while in use.
pub struct Region<'py> {
    _owner: Owner<'py>,
    ptr: *mut u8,
    len: usize,
}

enum Owner<'py> {
    // A numpy array cannot be resized while we hold a reference to it (numpy's resize checks
    // the reference count), and its memory lives as long as the array.
    Array(#[allow(dead_code)] Bound<'py, PyUntypedArray>),
    // An exported buffer pins its memory until released (bytearray refuses to resize).
    Buffer(#[allow(dead_code)] PyUntypedBuffer),
}

impl Region<'_> {
    /// The region for reading.
    pub fn bytes(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: `ptr..ptr + len` is one contiguous allocation owned by `_owner`, which this
        // struct keeps alive and which cannot be resized or freed while we hold it (see
        // `Owner`). Python threads may still write to it concurrently while the GIL is
        // released; that is the same contract numpy itself offers for GIL-free calls, and
        // the bytes are only copied or compressed, never trusted as invariants.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// The region for writing; only for regions built by [`writable`].
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        if self.len == 0 {
            return &mut [];
        }
        // SAFETY: as in `bytes`, plus: `writable` checked the object allows writes, and
        // `&mut self` makes this the only slice handed out from this region. Index and offset
        // arguments are copied before the call (module docs), so no other Rust slice aliases.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

fn numpy(py: Python<'_>) -> PyResult<&Bound<'_, PyModule>> {
    static NUMPY: PyOnceLock<Py<PyModule>> = PyOnceLock::new();
    Ok(NUMPY.get_or_try_init(py, || PyModule::import(py, "numpy").map(Bound::unbind))?.bind(py))
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "?".into())
}

fn region<'py>(obj: &Bound<'py, PyAny>, name: &str, write: bool) -> PyResult<Region<'py>> {
    if let Ok(arr) = obj.cast::<PyUntypedArray>() {
        let dtype = arr.dtype();
        // 'O' is object, 'T' numpy 2's StringDType: both store pointers, not values.
        if dtype.has_object() || matches!(dtype.kind(), b'O' | b'T') {
            return Err(PyTypeError::new_err(format!(
                "{name} has dtype {dtype}, whose elements are Python objects; zrecord needs plain bytes"
            )));
        }
        if !arr.is_c_contiguous() {
            return Err(PyValueError::new_err(format!("{name} must be C-contiguous")));
        }
        // SAFETY: `arr` is a live ndarray (checked by the cast), so its fields are readable.
        let (data, array_flags) = unsafe {
            let fields = _PyArray_GET_ITEM_DATA(arr.as_array_ptr());
            ((*fields).data.cast::<u8>(), (*fields).flags)
        };
        if write && array_flags & flags::NPY_ARRAY_WRITEABLE == 0 {
            return Err(PyValueError::new_err(format!("{name} is read-only")));
        }
        let len = arr.len().checked_mul(dtype.itemsize()).ok_or_else(|| PyValueError::new_err("array too large"))?;
        return Ok(Region { _owner: Owner::Array(arr.clone()), ptr: data, len });
    }
    let buf = PyUntypedBuffer::get(obj).map_err(|_| {
        PyTypeError::new_err(format!("{name} must be a numpy array or a buffer, not {}", type_name(obj)))
    })?;
    if !buf.is_c_contiguous() {
        return Err(PyValueError::new_err(format!("{name} must be C-contiguous")));
    }
    if write && buf.readonly() {
        return Err(PyValueError::new_err(format!("{name} is read-only")));
    }
    let (ptr, len) = (buf.buf_ptr().cast::<u8>(), buf.len_bytes());
    Ok(Region { _owner: Owner::Buffer(buf), ptr, len })
}

/// The bytes of `obj` (a numpy array or any buffer) for a store to write into.
pub fn writable<'py>(obj: &Bound<'py, PyAny>, name: &str) -> PyResult<Region<'py>> {
    region(obj, name, true)
}

/// The bytes of `obj` for a store to read from.
pub fn readable<'py>(obj: &Bound<'py, PyAny>, name: &str) -> PyResult<Region<'py>> {
    region(obj, name, false)
}

/// Copies an integer array-like into a `Vec<u64>`, calling `negative` for a value below 0.
/// Most indices, offsets or lengths one call accepts: 2^26 (512 MiB of u64). A larger batch
/// is almost surely a bug (a broadcast view, a wrong shape), and copying it would take
/// gigabytes before the store could refuse it.
pub const MAX_BATCH: usize = 1 << 26;

fn unsigned(obj: &Bound<'_, PyAny>, name: &str, negative: &dyn Fn(i64) -> PyErr) -> PyResult<Vec<u64>> {
    let py = obj.py();
    let arr = match obj.cast::<PyUntypedArray>() {
        Ok(a) => a.clone(),
        Err(_) => numpy(py)?.call_method1("asarray", (obj,))?.cast_into::<PyUntypedArray>()?,
    };
    if arr.len() > MAX_BATCH {
        return Err(PyValueError::new_err(format!(
            "{name} holds {} items; one call takes at most {MAX_BATCH} (split the batch)",
            arr.len()
        )));
    }
    macro_rules! try_typed {
        ($($t:ty),*) => {$(
            if let Ok(typed) = arr.cast::<PyArrayDyn<$t>>() {
                let view = typed.try_readonly().map_err(|e| PyValueError::new_err(format!("{name}: {e}")))?;
                let mut out = zeroed::<u64>(0).map_err(|e| error::to_py(py, e))?;
                out.try_reserve_exact(arr.len()).map_err(|_| error::to_py(py, zrecord::Error::OutOfMemory))?;
                for &v in view.as_array().iter() {
                    #[allow(unused_comparisons)]
                    if v < 0 {
                        return Err(negative(v as i64));
                    }
                    out.push(v as u64);
                }
                return Ok(out);
            }
        )*};
    }
    let dtype = arr.dtype();
    match dtype.kind() {
        b'u' | b'i' => {
            try_typed!(u64, i64, u32, i32, u16, i16, u8, i8);
            // Not in native byte order: let numpy convert, then take the native path.
            let native = if dtype.kind() == b'u' { "u8" } else { "i8" };
            let converted = arr.call_method1("astype", (native,))?;
            unsigned(&converted, name, negative)
        }
        _ if arr.is_empty() => Ok(Vec::new()),
        b'b' => Err(PyTypeError::new_err(format!(
            "{name} is a boolean mask; pass the indices it selects (np.flatnonzero(mask))"
        ))),
        _ => Err(PyTypeError::new_err(format!("{name} must hold integers, got dtype {dtype}"))),
    }
}

/// Record indices: any integer array-like (scalar, list, ndarray of any shape, flattened).
/// A negative index is `ZrecordError` code -3, as an index past the end is.
pub fn indices(obj: &Bound<'_, PyAny>) -> PyResult<Vec<u64>> {
    let py = obj.py();
    unsigned(obj, "idxs", &|v| {
        error::zrecord_error(
            py,
            error::INDEX_OUT_OF_RANGE,
            format!("index {v} out of range: record indices run from 0 to len - 1"),
        )
    })
}

/// Byte offsets: non-negative integers.
pub fn offsets(obj: &Bound<'_, PyAny>, name: &str) -> PyResult<Vec<u64>> {
    unsigned(obj, name, &|v| PyValueError::new_err(format!("{name} holds a negative value {v}")))
}

/// Record lengths: integers in `0..=u32::MAX`.
pub fn lengths(obj: &Bound<'_, PyAny>, name: &str) -> PyResult<Vec<u32>> {
    offsets(obj, name)?
        .into_iter()
        .map(|v| u32::try_from(v).map_err(|_| PyValueError::new_err(format!("{name} holds {v}, over 2^32 - 1"))))
        .collect()
}

/// A non-negative size argument (`n`, `item_len`, `stride`), as a `ValueError` if negative.
pub fn size(v: i64, name: &str) -> PyResult<usize> {
    usize::try_from(v).map_err(|_| PyValueError::new_err(format!("{name} must be >= 0, got {v}")))
}

/// A zeroed vector of `n` items, or `Error::OutOfMemory` (code -1, a `MemoryError` in
/// Python) where `vec!` would abort the interpreter. Sizes here come from callers
/// (`batch_size`, index counts), so they may be absurd.
pub fn zeroed<T: Clone + Default>(n: usize) -> Result<Vec<T>, zrecord::Error> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| zrecord::Error::OutOfMemory)?;
    v.resize(n, T::default());
    Ok(v)
}
