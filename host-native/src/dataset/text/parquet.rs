//! Parquet files as text input to [`import_text`](super::import_text): the text column's
//! strings, a row per document, and the other columns kept beside them by the JSON Lines
//! rule (string, integer, floating and boolean columns; the others left out and named).
//!
//! Rows are read a row group at a time through the `parquet` crate's record API, the text
//! column and the kept columns only. What a column keeps as is decided by its schema (the
//! first file's, for a directory): every later file must have the text column and each kept
//! column, of the same kind. A null in the text or a kept column fails the write, naming the
//! file, the column and the row (counted from 0 in the file).

use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use parquet::basic::{Compression, ConvertedType, LogicalType, Repetition, Type as Physical};
use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::record::Field as Value;
use parquet::schema::types::Type;
use zrecord_core::error::Error;

use super::{Block, Kept, Kind, Values};
use crate::dataset::manifest_io::io_at;
use crate::dataset::DatasetError;

/// An open Parquet file and its top-level columns.
pub(super) struct ParquetText {
    reader: SerializedFileReader<File>,
    columns: Vec<Arc<Type>>,
}

fn bad(path: &Path, what: String) -> DatasetError {
    DatasetError::at(path, None, Error::InvalidArgument(what))
}

impl ParquetText {
    /// Opens `path` and reads its footer.
    pub(super) fn open(path: &Path) -> Result<ParquetText, DatasetError> {
        let file = File::open(path).map_err(io_at(path, "open"))?;
        let reader = SerializedFileReader::new(file)
            .map_err(|e| bad(path, format!("is not a Parquet file this reader takes: {e}")))?;
        let columns = reader.metadata().file_metadata().schema_descr().root_schema().get_fields().to_vec();
        Ok(ParquetText { reader, columns })
    }

    fn column(&self, name: &str) -> Option<&Arc<Type>> {
        self.columns.iter().find(|c| c.name() == name)
    }

    /// The columns kept beside `text_field` (in the file's order) and the names of those
    /// left out (lists, structs, maps, dates, times, decimals, binary).
    pub(super) fn kept(&self, text_field: &str) -> (Vec<Kept>, Vec<String>) {
        let (mut kept, mut left_out) = (Vec::new(), Vec::new());
        for c in self.columns.iter().filter(|c| c.name() != text_field) {
            match kind_of(c) {
                Some(kind) => kept.push(Kept { name: c.name().to_string(), kind }),
                None => left_out.push(c.name().to_string()),
            }
        }
        (kept, left_out)
    }

    /// Checks that the file has a string column `text_field` and each of `kept`, of its
    /// kind (`first`: the file the kept columns were taken from, for the message).
    pub(super) fn check(&self, path: &Path, text_field: &str, kept: &[Kept], first: &Path) -> Result<(), DatasetError> {
        let Some(text) = self.column(text_field) else {
            let names: Vec<&str> = self.columns.iter().map(|c| c.name()).collect();
            let what = format!(
                "no column {text_field:?} (its columns: {names:?}); --text-field (text_field) names the one holding the text"
            );
            return Err(bad(path, what));
        };
        if kind_of(text) != Some(Kind::String) {
            return Err(bad(path, format!("column {text_field:?} holds {}, not strings", described(text))));
        }
        let read: Vec<&str> = std::iter::once(text_field).chain(kept.iter().map(|k| k.name.as_str())).collect();
        for group in self.reader.metadata().row_groups() {
            for chunk in group.columns() {
                let name = chunk.column_descr().path().parts()[0].as_str();
                let codec = match chunk.compression() {
                    Compression::BROTLI(_) => "brotli",
                    Compression::LZO => "LZO",
                    _ => continue,
                };
                if read.contains(&name) {
                    let what = format!(
                        "column {name:?} is compressed with {codec}, which this reader leaves out; rewrite the file \
                         with snappy, zstd, gzip or lz4 (pyarrow: pq.write_table(table, path, compression=\"zstd\"))"
                    );
                    return Err(bad(path, what));
                }
            }
        }
        for k in kept {
            if self.column(&k.name).and_then(|c| kind_of(c)) != Some(k.kind) {
                let what = format!(
                    "no {} column {:?}, which {} has (--tokens-only keeps none)",
                    k.kind.column_word(),
                    k.name,
                    first.display()
                );
                return Err(bad(path, what));
            }
        }
        Ok(())
    }

    /// Reads every row into `block` (its text, and the kept columns' values), handing the
    /// block to `each_row` after each row (which writes it out when full), and `progress`
    /// the file's compressed bytes read so far after each row group.
    pub(super) fn read(
        &self,
        path: &Path,
        text_field: &str,
        kept: &[Kept],
        block: &mut Block,
        each_row: &mut dyn FnMut(&mut Block) -> Result<(), DatasetError>,
        progress: &mut dyn FnMut(u64),
    ) -> Result<(), DatasetError> {
        let mut wanted = vec![self.column(text_field).cloned().expect("checked")];
        wanted.extend(kept.iter().map(|k| self.column(&k.name).cloned().expect("checked")));
        let projection = Type::group_type_builder("schema")
            .with_fields(wanted)
            .build()
            .map_err(|e| bad(path, format!("projection: {e}")))?;
        let failed = |row: u64, e: parquet::errors::ParquetError| bad(path, format!("row {row}: {e}"));
        let (mut row, mut done) = (0u64, 0u64);
        for g in 0..self.reader.num_row_groups() {
            let group = self.reader.get_row_group(g).map_err(|e| failed(row, e))?;
            done += u64::try_from(group.metadata().compressed_size()).unwrap_or(0);
            for values in group.get_row_iter(Some(projection.clone())).map_err(|e| failed(row, e))? {
                let values = values.map_err(|e| failed(row, e))?;
                let mut columns = values.into_columns().into_iter();
                let at_row = |what: String| bad(path, format!("row {row}: {what}"));
                match columns.next() {
                    Some((_, Value::Str(text))) => {
                        block.bytes += text.len();
                        block.texts.push(text);
                    }
                    Some((_, Value::Null)) => return Err(at_row(format!("column {text_field:?} holds a null"))),
                    other => return Err(at_row(format!("column {text_field:?} read as {other:?}"))),
                }
                for ((k, values), (_, value)) in kept.iter().zip(&mut block.extras).zip(columns) {
                    push(k, value, values).map_err(at_row)?;
                }
                row += 1;
                each_row(block)?;
            }
            progress(done);
        }
        Ok(())
    }
}

/// Adds one row's value of the kept column `k`.
fn push(k: &Kept, value: Value, to: &mut Values) -> Result<(), String> {
    let wrong = |v: &Value| format!("column {:?} holds {v:?}, not {}", k.name, k.kind.column_word());
    match (k.kind, value, to) {
        (_, Value::Null, _) => return Err(format!("column {:?} holds a null (--tokens-only keeps none)", k.name)),
        (Kind::String, Value::Str(text), Values::Ragged { values, offsets }) => {
            values.extend_from_slice(text.as_bytes());
            offsets.push(values.len() as u64);
        }
        (Kind::Integer, v, Values::Fixed(out)) => {
            let n: i64 = match v {
                Value::Byte(x) => x.into(),
                Value::Short(x) => x.into(),
                Value::Int(x) => x.into(),
                Value::Long(x) => x,
                Value::UByte(x) => x.into(),
                Value::UShort(x) => x.into(),
                Value::UInt(x) => x.into(),
                Value::ULong(x) => {
                    i64::try_from(x).map_err(|_| format!("column {:?} holds {x}, past int64", k.name))?
                }
                other => return Err(wrong(&other)),
            };
            out.extend_from_slice(&n.to_le_bytes());
        }
        (Kind::Number, v, Values::Fixed(out)) => {
            let x: f64 = match v {
                Value::Float16(x) => x.into(),
                Value::Float(x) => x.into(),
                Value::Double(x) => x,
                other => return Err(wrong(&other)),
            };
            out.extend_from_slice(&x.to_le_bytes());
        }
        (Kind::Boolean, Value::Bool(b), Values::Fixed(out)) => out.push(u8::from(b)),
        (_, other, _) => return Err(wrong(&other)),
    }
    Ok(())
}

/// What a top-level column keeps as, by its schema: None for a column left out (repeated,
/// a group, or a primitive that is not text, a plain integer, a float or a boolean).
fn kind_of(column: &Type) -> Option<Kind> {
    let Type::PrimitiveType { basic_info, physical_type, .. } = column else { return None };
    if basic_info.has_repetition() && basic_info.repetition() == Repetition::REPEATED {
        return None;
    }
    let logical = basic_info.logical_type_ref();
    let converted = basic_info.converted_type();
    match physical_type {
        Physical::BYTE_ARRAY if matches!(logical, Some(LogicalType::String)) || converted == ConvertedType::UTF8 => {
            Some(Kind::String)
        }
        Physical::INT32 | Physical::INT64
            if matches!(logical, None | Some(LogicalType::Integer { .. }))
                && matches!(
                    converted,
                    ConvertedType::NONE
                        | ConvertedType::INT_8
                        | ConvertedType::INT_16
                        | ConvertedType::INT_32
                        | ConvertedType::INT_64
                        | ConvertedType::UINT_8
                        | ConvertedType::UINT_16
                        | ConvertedType::UINT_32
                        | ConvertedType::UINT_64
                ) =>
        {
            Some(Kind::Integer)
        }
        Physical::FLOAT | Physical::DOUBLE => Some(Kind::Number),
        Physical::FIXED_LEN_BYTE_ARRAY if matches!(logical, Some(LogicalType::Float16)) => Some(Kind::Number),
        Physical::BOOLEAN => Some(Kind::Boolean),
        _ => None,
    }
}

/// A column's type in words, for a message.
fn described(column: &Type) -> String {
    match column {
        Type::PrimitiveType { basic_info, physical_type, .. } => match basic_info.logical_type_ref() {
            Some(logical) => format!("{logical:?} ({physical_type})"),
            None => format!("{physical_type}"),
        },
        Type::GroupType { .. } => "a group (a list, struct or map)".into(),
    }
}
