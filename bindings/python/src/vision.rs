//! Image pipelines from Python (`zrecord.vision`): the dict each pipeline object hands over
//! ([`pipeline_of`]); `_decode_image`, one image decoded as the loader decodes it;
//! `_render_image`, one sample's output of a pipeline, as a loader's batch holds it; and
//! `_convert_images`, an ImageFolder tree or WebDataset shards into a dataset (the work is
//! `host-native/src/dataset/images.rs`, as for `zr convert --images`).

use numpy::{PyArray1, PyArrayMethods};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use zrecord::image::crop::{field_key, Dtype, Geometry, Key, Layout, Pipeline};
use zrecord::image::{render, DEFAULT_MAX_PIXELS};

use crate::error;

/// A pipeline from `zrecord.vision`'s `_spec()` dict: `geometry` ("random_resized_crop",
/// "center_crop" or "resize"), `size` (h, w), `scale`, `ratio`, `crop_ratio`, `flip`,
/// `dtype` ("uint8" or "float32"), `layout` ("HWC" or "CHW"), `mean`, `std`, `max_pixels`.
pub fn pipeline_of(spec: &Bound<'_, PyAny>) -> PyResult<Pipeline> {
    let spec = spec.cast::<PyDict>().map_err(|_| PyValueError::new_err("an image pipeline is a dict"))?;
    let get = |key: &str| -> PyResult<Bound<'_, PyAny>> {
        spec.get_item(key)?.ok_or_else(|| PyValueError::new_err(format!("an image pipeline without {key:?}")))
    };
    let (height, width): (u32, u32) = get("size")?.extract()?;
    let geometry = match get("geometry")?.extract::<String>()?.as_str() {
        "random_resized_crop" => {
            Geometry::RandomResizedCrop { scale: get("scale")?.extract()?, ratio: get("ratio")?.extract()? }
        }
        "center_crop" => Geometry::CenterCrop { ratio: get("crop_ratio")?.extract()? },
        "resize" => Geometry::Resize,
        other => return Err(PyValueError::new_err(format!("an image geometry {other:?}"))),
    };
    let dtype = match get("dtype")?.extract::<String>()?.as_str() {
        "uint8" => Dtype::U8,
        "float32" => Dtype::F32,
        other => {
            return Err(PyValueError::new_err(format!("image dtype must be \"uint8\" or \"float32\", not {other:?}")))
        }
    };
    let layout = match get("layout")?.extract::<String>()?.as_str() {
        "HWC" => Layout::Hwc,
        "CHW" => Layout::Chw,
        other => return Err(PyValueError::new_err(format!("image layout must be \"HWC\" or \"CHW\", not {other:?}"))),
    };
    let pipeline = Pipeline {
        geometry,
        height,
        width,
        flip: get("flip")?.extract()?,
        dtype,
        layout,
        mean: get("mean")?.extract()?,
        std: get("std")?.extract()?,
        max_pixels: get("max_pixels")?.extract::<Option<u64>>()?.unwrap_or(DEFAULT_MAX_PIXELS),
    };
    pipeline.check().map_err(|what| PyValueError::new_err(format!("an image pipeline with {what}")))?;
    Ok(pipeline)
}

/// `zrecord.vision.decode`: the RGB pixels of one encoded image, `(h, w, 3)` uint8, as the
/// loader's pipelines decode it; a value that is not an image raises `DecodeError`.
#[pyfunction]
#[pyo3(name = "_decode_image", signature = (data, max_pixels = None))]
pub fn decode_image<'py>(py: Python<'py>, data: &[u8], max_pixels: Option<u64>) -> PyResult<Bound<'py, PyAny>> {
    let decoded = py
        .detach(|| render::decode(data, max_pixels.unwrap_or(DEFAULT_MAX_PIXELS)))
        .map_err(|e| error::zrecord_error(py, error::DECODE, e.to_string()))?;
    let (h, w) = (decoded.height as usize, decoded.width as usize);
    PyArray1::from_vec(py, decoded.pixels).reshape([h, w, 3]).map(Bound::into_any)
}

/// `zrecord.vision.render`: `pipeline`'s output of one encoded image, keyed as a loader
/// keys the sample `index` of `source` in global batch `step` of field `field` with `seed`.
#[pyfunction]
#[pyo3(name = "_render_image", signature = (data, spec, seed, step, index, source, field))]
#[allow(clippy::too_many_arguments)]
pub fn render_image<'py>(
    py: Python<'py>,
    data: &[u8],
    spec: &Bound<'py, PyAny>,
    seed: u64,
    step: u64,
    index: u64,
    source: u32,
    field: &str,
) -> PyResult<Bound<'py, PyAny>> {
    let pipeline = pipeline_of(spec)?;
    let key = Key { seed, step, source, index, field: field_key(field) };
    let mut out = vec![0u8; pipeline.sample_bytes()];
    py.detach(|| render::render(data, &pipeline, &key, &mut out, &mut render::Scratch::default()))
        .map_err(|e| error::zrecord_error(py, error::DECODE, e.to_string()))?;
    let shape = pipeline.shape().map(|d| d as usize);
    match pipeline.dtype {
        Dtype::U8 => PyArray1::from_vec(py, out).reshape(shape).map(Bound::into_any),
        Dtype::F32 => {
            let values: Vec<f32> =
                out.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().expect("4 bytes"))).collect();
            PyArray1::from_vec(py, values).reshape(shape).map(Bound::into_any)
        }
    }
}

/// `zrecord.vision.convert`: the ImageFolder tree or WebDataset shards `input` into the
/// dataset `output`; returns the samples added.
#[pyfunction]
#[pyo3(name = "_convert_images", signature = (input, output, shard_records = None, progress = None))]
pub fn convert_images(
    py: Python<'_>,
    input: std::path::PathBuf,
    output: std::path::PathBuf,
    shard_records: Option<u64>,
    progress: Option<Py<PyAny>>,
) -> PyResult<u64> {
    use zrecord::dataset::{import_image_folder, import_webdataset, webdataset_shards, ImportOptions};
    let mut options = ImportOptions::default();
    if let Some(n) = shard_records {
        options.write.shard_records = n;
    }
    let mut reporter = crate::progress::Progress::new(progress);
    let bar = &mut reporter;
    let done = crate::pool::call(py, move || match webdataset_shards(&input)? {
        Some(tars) => import_webdataset(&tars, &output, &options, &mut |d, t| bar.report(d, t)),
        None => import_image_folder(&input, &output, &options, &mut |d, t| bar.report(d, t)),
    })?;
    reporter.finish()?;
    Ok(done.samples)
}
