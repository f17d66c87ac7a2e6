//! Progress reports from long store calls (convert, export, verify, compact) to Python.
//!
//! Those calls run with the GIL released and call back `progress(done, total)` from the
//! thread doing the work. Each report that reaches Python takes the GIL for one call of the
//! Python reporter (a tqdm bar's update, usually), and no more often than every
//! [`INTERVAL`], plus the first and last report: a convert of millions of records costs a
//! few dozen GIL round trips, not millions.
//!
//! Deadlock: the working thread holds no lock a Python thread could wait on while holding
//! the GIL. Every binding releases the GIL before taking a store's locks (`store_call`), and
//! the handle slot's mutex is never held across a call, so taking the GIL here only waits
//! for Python code to reach a switch point.
//!
//! A reporter that raises is not called again; its exception is raised once the store call
//! has finished (the work itself is not interrupted: a half-done convert is not rolled back
//! by a broken progress bar).

use std::time::{Duration, Instant};

use pyo3::prelude::*;

/// Least time between two reports that reach Python.
pub const INTERVAL: Duration = Duration::from_millis(100);

/// The reporter of one call, if Python gave one.
pub struct Progress {
    reporter: Option<Py<PyAny>>,
    last: Option<Instant>,
    failed: Option<PyErr>,
}

impl Progress {
    /// Wraps an optional Python callable `reporter(done, total)`.
    pub fn new(reporter: Option<Py<PyAny>>) -> Self {
        Progress { reporter, last: None, failed: None }
    }

    /// Reports `done` of `total`, throttled (module docs). Called without the GIL.
    pub fn report(&mut self, done: u64, total: u64) {
        let Some(reporter) = &self.reporter else { return };
        if self.failed.is_some() {
            return;
        }
        let now = Instant::now();
        let last_one = done >= total;
        if !last_one && self.last.is_some_and(|t| now.duration_since(t) < INTERVAL) {
            return;
        }
        self.last = Some(now);
        if let Err(e) = Python::attach(|py| reporter.call1(py, (done, total)).map(drop)) {
            self.failed = Some(e);
        }
    }

    /// The reporter's exception, if it raised.
    pub fn finish(self) -> PyResult<()> {
        self.failed.map_or(Ok(()), Err)
    }
}
