//! `_Pipeline(...)`'s Python arguments as the host's [`LoaderSpec`] parts. The rules of
//! those arguments are the host's (`host-native/src/loader/spec.rs`), so that they are
//! written once; what is left here is only what needs Python: reading dicts and lists,
//! taking stores and datasets out of their Python objects, and the exceptions of a value
//! of the wrong type or a key that is missing.
//!
//! [`LoaderSpec`]: zrecord::loader::LoaderSpec

use std::path::PathBuf;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyList};
use zrecord::image::crop::Pipeline;
use zrecord::loader::{IndexDirArg, PackArgs, Reads};

use crate::dataset::PyDataset;
use crate::store::Zrecord;

/// `images` (field name -> pipeline spec) as the pipelines they describe.
pub(super) fn images(images: Option<&Bound<'_, PyDict>>) -> PyResult<Vec<(String, Pipeline)>> {
    let images = images
        .map(|d| {
            d.iter()
                .map(|(name, spec)| Ok((name.extract::<String>()?, crate::vision::pipeline_of(&spec)?)))
                .collect::<PyResult<Vec<_>>>()
        })
        .transpose()?;
    Ok(images.unwrap_or_default())
}

/// The loaderx form: one list of stores per source, one store per field, each field's
/// `itemsizes`, `dtypes` and `shapes` shared by every source.
pub(super) fn stores(
    py: Python<'_>,
    sources: &Bound<'_, PyList>,
    itemsizes: &[usize],
    dtypes: &[Py<PyAny>],
    shapes: &Bound<'_, PyList>,
) -> PyResult<Reads> {
    // The dtypes and shapes are Python's alone (they shape the arrays, `layout.rs`): the
    // host sees only the itemsizes.
    if itemsizes.len() != dtypes.len() || itemsizes.len() != shapes.len() {
        return Err(PyValueError::new_err("one itemsize, dtype and shape per field"));
    }
    let mut stores = Vec::with_capacity(sources.len());
    for source in sources.iter() {
        let source: Vec<Bound<'_, Zrecord>> = source.extract()?;
        stores.push(source.iter().map(|store| store.get().handle(py)).collect::<PyResult<Vec<_>>>()?);
    }
    Ok(Reads::Stores { sources: stores, itemsizes: itemsizes.to_vec() })
}

/// Datasets of named fields, with `pads` (field name -> one element's bytes) and `images`.
pub(super) fn datasets(
    py: Python<'_>,
    datasets: &[PyRef<'_, PyDataset>],
    pads: Option<&Bound<'_, PyDict>>,
    images: Vec<(String, Pipeline)>,
) -> PyResult<Reads> {
    let handles = datasets.iter().map(|ds| ds.handle(py)).collect::<PyResult<Vec<_>>>()?;
    let mut padded = Vec::new();
    for (name, pad) in pads.iter().flat_map(|pads| pads.iter()) {
        padded.push((name.extract::<String>()?, pad.extract::<Vec<u8>>()?));
    }
    Ok(Reads::Datasets { datasets: handles, pads: padded, images })
}

/// `pack` (field, seq_len, mode, bos, eos, pad, window; row_order, index_dir and
/// keep_order if given) as the host's packing arguments.
pub(super) fn pack(pack: &Bound<'_, PyDict>) -> PyResult<PackArgs> {
    let get = |key: &str| -> PyResult<Bound<'_, PyAny>> {
        pack.get_item(key)?.ok_or_else(|| PyValueError::new_err(format!("pack needs {key:?}")))
    };
    // `None` and a missing key are the same: the default.
    let given = |key: &str| -> PyResult<Option<Bound<'_, PyAny>>> { Ok(pack.get_item(key)?.filter(|v| !v.is_none())) };
    Ok(PackArgs {
        mode: get("mode")?.extract()?,
        field: get("field")?.extract()?,
        seq_len: get("seq_len")?.extract()?,
        bos: get("bos")?.extract()?,
        eos: get("eos")?.extract()?,
        pad: get("pad")?.extract()?,
        window: get("window")?.extract()?,
        row_order: given("row_order")?.map(|v| v.extract()).transpose()?,
        index_dir: match given("index_dir")? {
            None => IndexDirArg::Default,
            Some(v) if v.is_instance_of::<PyBool>() => IndexDirArg::Flag(v.extract()?),
            Some(v) => IndexDirArg::In(v.extract::<PathBuf>()?),
        },
        keep_order: given("keep_order")?.map(|v| v.extract()).transpose()?,
    })
}
