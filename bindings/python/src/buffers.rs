//! Python arguments → checked byte regions and index vectors.
//!
//! A store writes records straight into the caller's memory and reads appends straight
//! out of it, with the GIL released. Before handing such memory to Rust as a slice, this
//! module checks everything that would otherwise corrupt memory or crash: the region must be
//! one C-contiguous run of bytes, writable when written, and must not hold Python object
//! pointers (raw record bytes written over `PyObject*`s would crash the interpreter later).
//!
//! While a call runs without the GIL, other Python threads run too. What they could do to
//! the region, and what this module does about each:
//!
//! - **Free or move it.** The region's object is held, so it cannot be freed. numpy can
//!   still move an array's memory under its views: `base.resize(n, refcheck=False)` ignores
//!   the reference count and buffer exports. It does refuse an array that has a weak
//!   reference, so the array that owns the memory (found through `.base` and
//!   `memoryview.obj`) carries one for as long as the region lives ([`pin_owner`]). When
//!   the memory belongs to another exporter (the `mmap` under an `np.memmap`, a bytearray),
//!   the region holds a buffer export of it: bytearray refuses to resize and mmap to close
//!   while one exists (`np.memmap` itself holds none, so `m._mmap.close()` would otherwise
//!   unmap the pages mid-call). `ndarray.__setstate__` replaces an array's memory with no
//!   check at all, under numpy's own views as much as under ours, and an object that owns
//!   memory without exporting a buffer can do what it likes with it; calling either on
//!   memory in use is outside what numpy, and this module, make safe.
//! - **Use it in another zrecord call.** Two gathers into the same bytes at once would be
//!   two `&mut [u8]` over one memory, as would a gather into an array another thread is
//!   appending from. Every region claims its byte range in a process-wide table ([`claim`]):
//!   a written range may overlap no other claimed range, a read range only other read
//!   ranges. A call whose region conflicts fails at once with `BufferError`, before
//!   anything is read or written; regions that only sit side by side (two halves of one
//!   array) do not conflict.
//! - **Read or write it with plain Python or numpy code.** Nothing can stop that, as nothing
//!   stops it for numpy's own GIL-free loops: the bytes a racing writer sees, or leaves, are
//!   unspecified. Memory stays safe because the store never trusts the region's content:
//!   appended bytes are only copied or compressed, and a gather's decoder bounds every
//!   back-reference by the position it has written, not by the bytes it reads back.
//!
//! Index, offset and length arguments are small next to the records they describe, so they
//! are always copied into a `Vec`. That keeps them from aliasing a destination buffer (a
//! caller may legally pass views of one array as both) and lets the call run without the
//! GIL on memory no Python thread can touch.

use std::sync::Mutex;

use numpy::npyffi::{_PyArray_GET_ITEM_DATA, flags};
use numpy::{PyArrayDescrMethods, PyArrayDyn, PyArrayMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::buffer::PyUntypedBuffer;
use pyo3::exceptions::{PyBufferError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyMemoryView, PyModule, PyWeakrefReference};

use crate::error;

/// A byte region of a Python object, held, pinned and claimed while in use (module docs).
pub struct Region<'py> {
    // Field order is drop order: the claim is released before the pins let go.
    _claim: Option<Claim>,
    _pin: Option<Pin<'py>>,
    _owner: Owner<'py>,
    ptr: *mut u8,
    len: usize,
}

enum Owner<'py> {
    // The array object keeps its memory alive; `_pin` keeps it from being moved.
    Array(#[allow(dead_code)] Bound<'py, PyUntypedArray>),
    // An exported buffer pins its memory until released (bytearray and mmap refuse to
    // resize or close while exported); `_pin` covers a numpy array behind it.
    Buffer(#[allow(dead_code)] PyUntypedBuffer),
}

impl Region<'_> {
    /// The region for reading.
    pub fn bytes(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: `ptr..ptr + len` is one contiguous allocation that stays valid and in
        // place while `self` lives: `_owner` keeps it alive, `_pin` keeps numpy from
        // reallocating it, and an exporter's buffer contract covers the rest (module docs).
        // `_claim` guarantees no zrecord call in this process writes to any of these bytes
        // while the slice exists. Plain Python code may still write them concurrently; the
        // bytes are only copied or compressed, never trusted, so such a race changes what
        // is stored, not memory safety.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// The region for writing; only for regions built by [`writable`].
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        if self.len == 0 {
            return &mut [];
        }
        debug_assert!(self._claim.as_ref().is_some_and(|c| c.write));
        // SAFETY: as in `bytes`, plus: `writable` checked the object allows writes, and its
        // write claim means no other zrecord call in this process reads or writes any of
        // these bytes until the region drops; `&mut self` makes this the only slice handed
        // out from it, and index/offset arguments are copies (module docs). Python code
        // racing on the same bytes leaves them unspecified, as it would for numpy; the
        // decoder never trusts what it reads back from `dst`.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

/// What keeps the memory behind a region in place (module docs).
enum Pin<'py> {
    /// numpy refuses to resize an array with a weak reference.
    Array(#[allow(dead_code)] Bound<'py, PyWeakrefReference>),
    /// Exporters refuse to resize or close while a buffer is exported.
    Export(#[allow(dead_code)] PyUntypedBuffer),
}

/// One claimed byte range of the process-wide table; released on drop.
struct Claim {
    id: u64,
    write: bool,
}

struct Claimed {
    id: u64,
    /// The process that claimed it: after `fork()` a child inherits the table but not the
    /// parent's calls in flight, so entries of another pid are stale and ignored.
    pid: u32,
    start: usize,
    end: usize,
    write: bool,
}

/// Claims in flight; a handful at most, held only while a call runs.
static CLAIMS: Mutex<(u64, Vec<Claimed>)> = Mutex::new((0, Vec::new()));

fn claims() -> std::sync::MutexGuard<'static, (u64, Vec<Claimed>)> {
    // Only ever pushed to or removed from whole, so a poisoned table is still consistent.
    CLAIMS.lock().unwrap_or_else(|p| p.into_inner())
}

/// Claims `ptr..ptr + len` for reading or writing, or fails with `BufferError`.
fn claim(ptr: *mut u8, len: usize, write: bool, name: &str) -> PyResult<Option<Claim>> {
    if len == 0 {
        return Ok(None);
    }
    let (start, end) = (ptr as usize, (ptr as usize).saturating_add(len));
    let pid = std::process::id();
    let mut table = claims();
    table.1.retain(|c| c.pid == pid);
    if let Some(other) = table.1.iter().find(|c| c.start < end && start < c.end && (write || c.write)) {
        let (mine, theirs) =
            (if write { "written" } else { "read" }, if other.write { "writing into" } else { "reading" });
        return Err(PyBufferError::new_err(format!(
            "{name} shares memory with a buffer another zrecord call is {theirs} right now (another thread?); \
             a region {mine} by one call must not overlap one written by another"
        )));
    }
    table.0 += 1;
    let id = table.0;
    table.1.push(Claimed { id, pid, start, end, write });
    Ok(Some(Claim { id, write }))
}

impl Drop for Claim {
    fn drop(&mut self) {
        claims().1.retain(|c| c.id != self.id);
    }
}

/// Pins the memory behind `obj` for the duration of a call: a weak reference to the numpy
/// array that owns it (`ndarray.resize` refuses an array with one, even with
/// `refcheck=False`), or a buffer export of the object at the end of the `ndarray.base` /
/// `memoryview.obj` chain when that is not an array. `None` when the owner neither is an
/// array nor exports a buffer.
fn pin_owner<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Option<Pin<'py>>> {
    let mut cur = obj.clone();
    // A chain longer than this is not something numpy builds; stop rather than loop.
    for _ in 0..256 {
        let next = if cur.cast::<PyUntypedArray>().is_ok() {
            let base = cur.getattr("base")?;
            if base.is_none() {
                return PyWeakrefReference::new(&cur)
                    .map(|w| Some(Pin::Array(w)))
                    .map_err(|e| PyTypeError::new_err(format!("cannot pin the array's memory for the call ({e})")));
            }
            base
        } else if let Ok(view) = cur.cast::<PyMemoryView>() {
            view.getattr("obj")?
        } else {
            return Ok(PyUntypedBuffer::get(&cur).ok().map(Pin::Export));
        };
        cur = next;
    }
    Err(PyValueError::new_err("buffer's base chain is too deep to follow"))
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
        let pin = pin_owner(obj)?;
        let claim = claim(data, len, write, name)?;
        return Ok(Region { _claim: claim, _pin: pin, _owner: Owner::Array(arr.clone()), ptr: data, len });
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
    let pin = pin_owner(obj)?;
    let claim = claim(ptr, len, write, name)?;
    Ok(Region { _claim: claim, _pin: pin, _owner: Owner::Buffer(buf), ptr, len })
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
