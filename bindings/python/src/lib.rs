//! # zrecord._zrecord
//!
//! The native half of the `zrecord` Python package: pyo3 classes over the `zrecord` crate.
//! The Python half (`python/zrecord/`) keeps what loaderx 0.5.4 kept in Python — the
//! Dataset's `schema.json` handling and indexing sugar — and the exception hierarchy.
//!
//! Module map, mirroring the Rust crates:
//! - [`store`]: `Zrecord`, one open store (zrecord's `Zrecord`).
//! - [`dataset`]: `_Dataset`, `_DatasetWriter` and `_FieldAdder`, named fields over shards,
//!   and the dataset's changes (zrecord's `dataset`, file for file).
//! - [`sampler`]: `Sampler`, the endless index generator (zrecord-core's `sampler`).
//! - [`loader`]: `_Pipeline`, the DataLoader's threads (the `zrecord` crate's `Loader`), for
//!   zrecord datasets and, through a fetch callback, for any other `__getitems__` dataset.
//! - [`error`]: zrecord's `Error` → the Python exception of its stable code.
//! - [`buffers`]: turning Python arguments into checked byte regions and index vectors.
//! - [`tools`]: `inspect`, `verify`, `convert`, `export` (zrecord-core's `tools`).
//! - [`progress`]: progress reports from GIL-free calls to a Python callable.
//! - [`pool`]: which rayon pool a store call runs on, so that forked children do not hang.
//!
//! Every call that touches a store releases the GIL, and every one is wrapped so that a
//! Rust panic surfaces as a `ZrecordError`, never as pyo3's `PanicException`.

use pyo3::prelude::*;

mod batch;
mod buffers;
mod dataset;
mod error;
mod loader;
mod pool;
mod progress;
mod remote;
mod sampler;
mod store;
mod text;
mod tools;
mod vision;

/// The native module. `zrecord/__init__.py` re-exports what users should see.
#[pymodule]
fn _zrecord(m: &Bound<'_, PyModule>) -> PyResult<()> {
    pool::remember_parent();
    m.add("MAX_RECORD_LEN", zrecord::MAX_RECORD_LEN)?;
    m.add("MAX_RECORDS", zrecord::MAX_RECORDS)?;
    m.add("DEFAULT_MIN_SAVINGS", zrecord::DEFAULT_MIN_SAVINGS)?;
    // The codec table (name -> on-disk tag), from the core's one list of codecs.
    let codecs = pyo3::types::PyDict::new(m.py());
    for c in zrecord::Codec::ALL {
        codecs.set_item(c.name(), c.tag())?;
    }
    m.add("CODECS", codecs)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    error::export_tables(m)?;
    m.add_class::<store::Zrecord>()?;
    m.add_class::<sampler::Sampler>()?;
    m.add_class::<dataset::PyDataset>()?;
    m.add_class::<dataset::write::PyDatasetWriter>()?;
    m.add_class::<dataset::columns::PyFieldAdder>()?;
    m.add_function(wrap_pyfunction!(zr_main, m)?)?;
    m.add_function(wrap_pyfunction!(text::tokenize_files, m)?)?;
    m.add_class::<text::PyTextWriter>()?;
    m.add_function(wrap_pyfunction!(vision::decode_image, m)?)?;
    m.add_function(wrap_pyfunction!(vision::render_image, m)?)?;
    m.add_function(wrap_pyfunction!(vision::convert_images, m)?)?;
    m.add_function(wrap_pyfunction!(dataset::columns::drop_field, m)?)?;
    m.add_function(wrap_pyfunction!(dataset::delete::delete_samples, m)?)?;
    m.add_function(wrap_pyfunction!(dataset::compact::compact_shards, m)?)?;
    m.add_function(wrap_pyfunction!(dataset::copy::copy_dataset, m)?)?;
    m.add_function(wrap_pyfunction!(dataset::concat::concat, m)?)?;
    m.add_function(wrap_pyfunction!(dataset::open::open_dataset_store, m)?)?;
    m.add_class::<loader::Pipeline>()?;
    m.add_function(wrap_pyfunction!(loader::check_mixture_weights, m)?)?;
    m.add_function(wrap_pyfunction!(tools::inspect, m)?)?;
    m.add_function(wrap_pyfunction!(tools::verify, m)?)?;
    m.add_function(wrap_pyfunction!(tools::convert, m)?)?;
    m.add_function(wrap_pyfunction!(tools::export, m)?)?;
    m.add_function(wrap_pyfunction!(tools::stats, m)?)?;
    m.add_function(wrap_pyfunction!(tools::find_datasets, m)?)?;
    m.add_function(wrap_pyfunction!(remote::push, m)?)?;
    m.add_function(wrap_pyfunction!(remote::pull, m)?)?;
    m.add_function(wrap_pyfunction!(dataset::parts::part_dir, m)?)?;
    m.add_function(wrap_pyfunction!(dataset::parts::finish_part, m)?)?;
    m.add_function(wrap_pyfunction!(dataset::parts::write_tag, m)?)?;
    m.add_function(wrap_pyfunction!(dataset::layout::set_layout, m)?)?;
    m.add_function(wrap_pyfunction!(dataset::parts::commit_parts, m)?)?;
    m.add_function(wrap_pyfunction!(dataset::saved_parts::save_part, m)?)?;
    m.add_function(wrap_pyfunction!(dataset::saved_parts::commit_saved, m)?)?;
    m.add_function(wrap_pyfunction!(remote::is_url, m)?)?;
    m.add_function(wrap_pyfunction!(remote::write_remote, m)?)?;
    m.add_function(wrap_pyfunction!(remote::remote_listed, m)?)?;
    m.add_function(wrap_pyfunction!(remote::traffic_total, m)?)?;
    Ok(())
}

/// `zr ARGS...` in this process (the wheel's `zr` console script, `zrecord._cli`): the same
/// command line as the Rust binary ([`zrecord_cli::run`]), its exit status returned. Runs
/// without the GIL; SIGINT and SIGTERM are the command's from then on.
#[pyfunction]
#[pyo3(name = "_zr_main")]
fn zr_main(py: Python<'_>, args: Vec<std::ffi::OsString>) -> i32 {
    py.detach(|| zrecord_cli::run(args))
}
