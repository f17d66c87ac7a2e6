//! A field as Python sees it, a dict of name, kind, dtype, shape and codec, read and
//! written in one file: `_Dataset.fields` and `_DatasetWriter.fields` give it, the writer
//! and `_FieldAdder` take it, so its keys cannot drift apart. What a field may be is the
//! core's rule ([`zrecord::Field`]); this file only converts.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use zrecord::{Codec, Field};

use crate::store::codec_named;

/// Field `f` as the dict `_Dataset.fields` and `_DatasetWriter.fields` list.
pub fn field_dict<'py>(py: Python<'py>, f: &Field) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("name", &f.name)?;
    d.set_item("kind", f.kind.name())?;
    d.set_item("dtype", &f.dtype)?;
    d.set_item("shape", PyTuple::new(py, &f.shape)?)?;
    d.set_item("codec", &f.codec)?;
    Ok(d)
}

/// A field from `_DatasetWriter`'s dict: name, kind, dtype, shape (fixed only), codec.
pub fn field_of(item: &Bound<'_, PyAny>) -> PyResult<Field> {
    let name: String = item.get_item("name")?.extract()?;
    let kind: String = item.get_item("kind")?.extract()?;
    let dtype: String = item.get_item("dtype")?.extract()?;
    let codec: Codec = codec_named(&item.get_item("codec")?.extract::<String>()?)?;
    Ok(match kind.as_str() {
        "fixed" => Field::fixed(&name, &dtype, &item.get_item("shape")?.extract::<Vec<u64>>()?, codec),
        "ragged" => Field::ragged(&name, &dtype, codec),
        "bytes" => Field::bytes(&name, codec),
        "string" => Field::string(&name, codec),
        "image" => Field::image(&name, codec),
        other => {
            return Err(PyValueError::new_err(format!(
                "field kind {other:?} is not fixed, ragged, bytes, string or image"
            )))
        }
    })
}
