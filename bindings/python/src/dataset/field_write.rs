//! A write's columns are read from Python objects apart from the classes that write them,
//! because `_DatasetWriter` and `_FieldAdder` read theirs the same way. This mirrors the
//! crate's `dataset/field_write.rs`, whose [`Column`] it builds and which checks the
//! columns against their field: here only the Python objects are taken apart.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};
use zrecord::Column;

use crate::buffers;

/// Column `f`'s memory: a C-contiguous array of samples (fixed), or a `(values, offsets)`
/// pair (ragged, bytes, string: element offsets, made byte offsets here).
pub fn read_column<'py>(
    column: &Bound<'py, PyAny>,
    f: usize,
    ragged: bool,
    item: usize,
) -> PyResult<(buffers::Region<'py>, Option<Vec<u64>>)> {
    if !ragged {
        return Ok((buffers::readable(column, "samples")?, None));
    }
    let pair = column
        .cast::<PyTuple>()
        .map_err(|_| PyTypeError::new_err(format!("column {f} is ragged: pass a (values, offsets) pair")))?;
    if pair.len() != 2 {
        return Err(PyTypeError::new_err(format!("column {f} is ragged: pass a (values, offsets) pair")));
    }
    let values = buffers::readable(&pair.get_item(0)?, "values")?;
    let elements = buffers::offsets(&pair.get_item(1)?, "offsets")?;
    let bytes = elements
        .iter()
        .map(|&o| o.checked_mul(item as u64).ok_or_else(|| PyValueError::new_err("offset overflows")))
        .collect::<PyResult<Vec<u64>>>()?;
    Ok((values, Some(bytes)))
}

/// The [`Column`] over what [`read_column`] read.
pub fn column_of<'a>(region: &'a buffers::Region<'_>, offsets: &'a Option<Vec<u64>>) -> Column<'a> {
    match offsets {
        Some(o) => Column::Ragged { values: region.bytes(), offsets: o },
        None => Column::Fixed(region.bytes()),
    }
}

/// Every column of a `_DatasetWriter.write` block, in field order: column `f` is ragged as
/// `ragged[f]` says, its elements `itemsizes[f]` bytes each.
pub fn read_columns<'py>(
    columns: &Bound<'py, PyList>,
    ragged: &[bool],
    itemsizes: &[usize],
) -> PyResult<Vec<(buffers::Region<'py>, Option<Vec<u64>>)>> {
    let mut regions = Vec::with_capacity(columns.len());
    for (f, column) in columns.iter().enumerate() {
        let ragged = *ragged.get(f).unwrap_or(&false);
        regions.push(read_column(&column, f, ragged, itemsizes.get(f).copied().unwrap_or(1))?);
    }
    Ok(regions)
}
