//! The Dataset `schema.json`: the one piece of metadata above the store, naming the
//! per-sample dtype and shape. Written byte for byte as loaderx 0.5.4 writes it (Python's
//! `json.dumps(schema, indent=2)` plus a newline), so either side can append to a dataset
//! the other created.

use alloc::string::String;
use alloc::vec::Vec;

use serde::{Deserialize, Serialize};

use crate::error::FormatError;

/// File name inside the store directory.
pub const SCHEMA_FILE: &str = "schema.json";
/// The most bytes a `schema.json` may have (1 MiB): one sample's dtype and shape take a few
/// hundred, and a larger file is refused before it is read (`docs/format.md`, "schema.json").
pub const MAX_SCHEMA_LEN: u64 = 1 << 20;
/// The `format` value of a dataset schema.
pub const FORMAT: &str = "loaderx-zrecord";

/// A dataset schema. Field order is the serialised order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Schema {
    /// Always [`FORMAT`].
    pub format: String,
    /// Schema version, 1.
    pub version: u32,
    /// NumPy `dtype.str` of a sample's elements, e.g. `|u1` or `<f4`.
    pub dtype: String,
    /// Shape of one sample (empty for scalars).
    pub shape: Vec<u64>,
    /// Default codec name for appends, `flate` or `raw`.
    pub codec: String,
}

impl Schema {
    /// A version-1 schema.
    pub fn new(dtype: &str, shape: &[u64], codec: crate::Codec) -> Self {
        Schema {
            format: FORMAT.into(),
            version: 1,
            dtype: dtype.into(),
            shape: shape.to_vec(),
            codec: codec.name().into(),
        }
    }

    /// The file's bytes, identical to loaderx's.
    pub fn to_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).expect("a schema always serialises");
        s.push('\n');
        s
    }

    /// Parses and checks a schema file.
    pub fn from_json(bytes: &[u8]) -> Result<Self, FormatError> {
        let v: serde_json::Value =
            serde_json::from_slice(bytes).map_err(|e| FormatError::Container(alloc::format!("schema.json: {e}")))?;
        if v.get("format").and_then(|f| f.as_str()) != Some(FORMAT) {
            return Err(FormatError::Container(alloc::format!("schema.json is not a {FORMAT} schema")));
        }
        let s: Schema =
            serde_json::from_value(v).map_err(|e| FormatError::Container(alloc::format!("schema.json: {e}")))?;
        crate::dtype::itemsize(&s.dtype)?;
        if crate::Codec::from_name(&s.codec).is_none() {
            return Err(FormatError::Container(alloc::format!("schema.json names unknown codec {:?}", s.codec)));
        }
        Ok(s)
    }

    /// Bytes per sample.
    pub fn sample_len(&self) -> Result<u64, FormatError> {
        let item = crate::dtype::itemsize(&self.dtype)?;
        self.shape
            .iter()
            .try_fold(item, |acc, &d| acc.checked_mul(d))
            .ok_or_else(|| FormatError::Container("schema.json sample size overflows".into()))
    }

    /// True if samples of `dtype` and `shape` may be appended to this dataset (loaderx
    /// compares exactly these two fields).
    pub fn accepts(&self, dtype: &str, shape: &[u64]) -> bool {
        self.dtype == dtype && self.shape == shape
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_match_loaderx() {
        // Captured from loaderx 0.5.4's Dataset.write of a (5, 100) uint8 array.
        let expected = "{\n  \"format\": \"loaderx-zrecord\",\n  \"version\": 1,\n  \"dtype\": \"|u1\",\n  \"shape\": [\n    100\n  ],\n  \"codec\": \"flate\"\n}\n";
        let s = Schema::new("|u1", &[100], crate::Codec::Flate);
        assert_eq!(s.to_json(), expected);
        assert_eq!(Schema::from_json(expected.as_bytes()).unwrap(), s);
        let scalar = Schema::new("<i8", &[], crate::Codec::Raw).to_json();
        assert!(scalar.contains("\"shape\": [],"), "{scalar}");
    }

    #[test]
    fn rejects_foreign_schema() {
        assert!(Schema::from_json(b"{\"format\": \"other\"}").is_err());
        assert!(Schema::from_json(b"not json").is_err());
        let bad_codec = Schema { codec: "lz4".into(), ..Schema::new("|u1", &[1], crate::Codec::Raw) };
        assert!(Schema::from_json(bad_codec.to_json().as_bytes()).is_err());
        let zstd = Schema::new("|u1", &[1], crate::Codec::Zstd);
        assert_eq!(Schema::from_json(zstd.to_json().as_bytes()).unwrap().codec, "zstd");
    }
}
