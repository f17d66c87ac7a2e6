//! `zrecord.set_layout`, mirroring the crate's `dataset/layout.rs`: a dataset's stores made
//! dense or sparse, with a progress bar; the layouts' rules are the crate's.

use std::path::PathBuf;

use pyo3::prelude::*;

use crate::pool::call;

/// `zrecord.set_layout`: the store or dataset at `path` made `layout` ("dense" or
/// "sparse"); returns (stores visited, stores changed).
#[pyfunction]
#[pyo3(name = "_set_layout", signature = (path, layout, progress = None))]
pub fn set_layout(
    py: Python<'_>,
    path: PathBuf,
    layout: &str,
    progress: Option<Py<PyAny>>,
) -> PyResult<(usize, usize)> {
    let Some(layout) = zrecord::FileLayout::from_name(layout) else {
        return Err(pyo3::exceptions::PyValueError::new_err(format!(
            "layout must be \"dense\" or \"sparse\", not {layout:?}"
        )));
    };
    let mut reporter = crate::progress::Progress::new(progress);
    let bar = &mut reporter;
    let done = call(py, move || zrecord::dataset::set_layout(&path, layout, &mut |d, t| bar.report(d, t)))?;
    reporter.finish()?;
    Ok((done.stores, done.changed))
}
