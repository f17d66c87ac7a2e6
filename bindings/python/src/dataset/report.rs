//! A dataset's report in Python's terms, in the file that mirrors the crate's
//! `dataset/report.rs`: both `_Dataset.stats()` and the `zrecord.stats` tool (`tools.rs`)
//! give a dataset's usage with the same keys, so the keys are written once, below both,
//! and the dataset classes need nothing from the tools.

use pyo3::prelude::*;
use pyo3::types::PyDict;

/// A dataset's stores' usage summed, with the keys of a store's `stats()`: what
/// `Dataset.stats()` returns, and `zrecord.stats` beside the dataset's counts.
pub(crate) fn store_sums_into(d: &Bound<'_, PyDict>, s: &zrecord::dataset::DatasetStats) -> PyResult<()> {
    d.set_item("records", s.records)?;
    d.set_item("live_bytes", s.live_bytes)?;
    d.set_item("chunk_bytes", s.chunk_bytes)?;
    d.set_item("reclaimable", s.reclaimable)?;
    d.set_item("unchecked", s.unchecked)?;
    Ok(())
}
