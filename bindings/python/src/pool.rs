//! Which thread pool a store call runs on, and running it there with the GIL released.
//!
//! The `zrecord` crate spreads gathers and appends over rayon's global pool. A process that
//! forks after that pool started (PyTorch's and multiprocessing's `fork` workers do) leaves
//! the child with a pool whose threads do not exist: the first parallel gather in the child
//! would wait forever. So a call made in any process other than the one that imported the
//! module runs inside a pool of that process's own, built on first use (tokenizers solves
//! the same problem by turning its pool off in forked children).
//!
//! [`store_call`] is the one way the bindings reach a store, and [`call`] a dataset: each
//! releases the GIL, picks the pool, and turns a panic into a `ZrecordError` instead of
//! pyo3's `PanicException`.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Mutex, OnceLock};

use pyo3::prelude::*;
use zrecord::DatasetError;

use crate::dataset::error::to_py;
use crate::error;

static PARENT_PID: OnceLock<u32> = OnceLock::new();

/// The pool of a forked child, tagged with the child's pid (a grandchild builds its own).
static CHILD_POOL: Mutex<Option<(u32, &'static rayon::ThreadPool)>> = Mutex::new(None);

/// Records the importing process; called once from module init.
pub fn remember_parent() {
    PARENT_PID.get_or_init(std::process::id);
}

/// True in a process forked from the one that imported the module.
pub fn is_forked() -> bool {
    PARENT_PID.get().is_some_and(|&p| p != std::process::id())
}

fn child_pool(pid: u32) -> Option<&'static rayon::ThreadPool> {
    let mut slot = CHILD_POOL.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((owner, pool)) = *slot {
        if owner == pid {
            return Some(pool);
        }
    }
    // Leaked on purpose: a pool inherited from a parent has no threads in this process, so
    // it must never be dropped here (dropping signals threads that do not exist).
    let pool = rayon::ThreadPoolBuilder::new().thread_name(|i| format!("zrecord-{i}")).build().ok()?;
    let pool: &'static rayon::ThreadPool = Box::leak(Box::new(pool));
    *slot = Some((pid, pool));
    Some(pool)
}

/// The pool a loader's gathers run on: this process's own in a forked child, else rayon's
/// global pool (`None`). A `zrecord::LoaderOptions::pool`, asked once per batch.
pub fn loader_pool() -> Option<&'static rayon::ThreadPool> {
    if is_forked() {
        child_pool(std::process::id())
    } else {
        None
    }
}

/// Runs `f` on this process's pool (the global one unless the process was forked).
pub fn on_pool<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    if is_forked() {
        if let Some(pool) = child_pool(std::process::id()) {
            return pool.install(f);
        }
        // This process cannot start threads at all; the global pool is all there is left.
    }
    f()
}

/// Runs a store operation with the GIL released, on the right pool, with panics caught.
pub fn store_call<T: Send>(py: Python<'_>, f: impl FnOnce() -> Result<T, zrecord::Error> + Send) -> PyResult<T> {
    match py.detach(|| catch_unwind(AssertUnwindSafe(|| on_pool(f)))) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(error::to_py(py, e)),
        Err(payload) => Err(error::panicked(py, payload)),
    }
}

/// Runs a dataset call without the GIL, on the loader's rayon pool in forked children.
pub(crate) fn call<T: Send>(py: Python<'_>, f: impl FnOnce() -> Result<T, DatasetError> + Send) -> PyResult<T> {
    match py.detach(|| std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| on_pool(f)))) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(to_py(py, e)),
        Err(payload) => Err(error::panicked(py, payload)),
    }
}

/// [`store_call`] for reads of the store at `path`: a record that fails its checksum or
/// decode is raised with `path`, `field` (None: a store alone has no field name) and
/// `record` attributes and the store named in the message, as a dataset's reads raise it.
pub fn read_call<T: Send>(
    py: Python<'_>,
    path: std::path::PathBuf,
    f: impl FnOnce() -> Result<T, zrecord::Error> + Send,
) -> PyResult<T> {
    match py.detach(|| catch_unwind(AssertUnwindSafe(|| on_pool(f)))) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e @ (zrecord::Error::Checksum { .. } | zrecord::Error::Decode { .. }))) => {
            Err(to_py(py, zrecord::DatasetError { path, field: None, source: e, metadata: false }))
        }
        Ok(Err(e)) => Err(error::to_py(py, e)),
        Err(payload) => Err(error::panicked(py, payload)),
    }
}
