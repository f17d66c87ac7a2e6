//! The NumPy `.npy` container (format versions 1.0, 2.0 and 3.0), for `convert` and
//! `export`: parsing a header from its bytes and writing one exactly as `numpy.save` does.
//! Only plain (non-structured, non-object) dtypes are supported, since a record is a
//! fixed-size run of bytes per sample.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use zrecord_core::dtype::itemsize;
use zrecord_core::error::FormatError;

const MAGIC: &[u8; 6] = b"\x93NUMPY";

/// A parsed `.npy` header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NpyHeader {
    /// NumPy's `dtype.str`, e.g. `<f4` or `|u1`.
    pub descr: String,
    /// True for column-major data.
    pub fortran_order: bool,
    /// The array's shape.
    pub shape: Vec<u64>,
    /// Bytes before the array data.
    pub data_offset: u64,
}

fn bad(msg: impl Into<String>) -> FormatError {
    FormatError::Container(msg.into())
}

/// Length of the fixed prefix to read before [`parse_header`] can tell the full header size.
pub const PREFIX_LEN: usize = 12;

/// Total header length given its first [`PREFIX_LEN`] bytes.
pub fn header_len(prefix: &[u8]) -> Result<u64, FormatError> {
    if prefix.len() < PREFIX_LEN || &prefix[..6] != MAGIC {
        return Err(bad("not a .npy file (bad magic)"));
    }
    match prefix[6] {
        1 => Ok(10 + u64::from(u16::from_le_bytes([prefix[8], prefix[9]]))),
        2 | 3 => Ok(12 + u64::from(u32::from_le_bytes([prefix[8], prefix[9], prefix[10], prefix[11]]))),
        v => Err(bad(format!(".npy format version {v} is not supported"))),
    }
}

/// Parses a whole `.npy` header (magic through the newline).
pub fn parse_header(bytes: &[u8]) -> Result<NpyHeader, FormatError> {
    let total = header_len(bytes)? as usize;
    if bytes.len() < total {
        return Err(bad(".npy header is truncated"));
    }
    let start = if bytes[6] == 1 { 10 } else { 12 };
    let dict = core::str::from_utf8(&bytes[start..total]).map_err(|_| bad(".npy header is not text"))?;
    let descr = dict_value(dict, "descr")?;
    let descr = descr
        .strip_prefix('\'')
        .and_then(|d| d.strip_suffix('\''))
        .ok_or_else(|| bad(format!("unsupported .npy dtype {descr} (structured dtypes are not supported)")))?;
    itemsize(descr)?;
    let fortran_order = match dict_value(dict, "fortran_order")? {
        "True" => true,
        "False" => false,
        other => return Err(bad(format!("bad fortran_order {other}"))),
    };
    let shape_text = dict_value(dict, "shape")?;
    let inner = shape_text
        .strip_prefix('(')
        .and_then(|s| s.strip_suffix(')'))
        .ok_or_else(|| bad(format!("bad shape {shape_text}")))?;
    let shape = inner
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<u64>().map_err(|_| bad(format!("bad shape {shape_text}"))))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(NpyHeader { descr: descr.into(), fortran_order, shape, data_offset: total as u64 })
}

/// The text of `key`'s value in a Python dict literal of plain values and one tuple.
fn dict_value<'a>(dict: &'a str, key: &str) -> Result<&'a str, FormatError> {
    let pat = format!("'{key}':");
    let at = dict.find(&pat).ok_or_else(|| bad(format!(".npy header has no {key}")))?;
    let rest = dict[at + pat.len()..].trim_start();
    let end = if rest.starts_with('(') {
        rest.find(')').map(|i| i + 1)
    } else if let Some(quoted) = rest.strip_prefix('\'') {
        quoted.find('\'').map(|i| i + 2)
    } else {
        rest.find([',', '}'])
    }
    .ok_or_else(|| bad(format!(".npy header has a malformed {key}")))?;
    Ok(rest[..end].trim())
}

/// A `.npy` header exactly as `numpy.save` writes it: version 1.0 (2.0 if it must), the dict
/// padded with spaces so the data starts on a 64-byte boundary.
pub fn write_header(descr: &str, shape: &[u64]) -> Vec<u8> {
    let dims: Vec<String> = shape.iter().map(|d| format!("{d}")).collect();
    let shape_text = match dims.len() {
        1 => format!("({},)", dims[0]),
        _ => format!("({})", dims.join(", ")),
    };
    let dict = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape_text}, }}");
    let mut out = Vec::new();
    for (version, prefix) in [(1u8, 10usize), (2, 12)] {
        let unpadded = prefix + dict.len() + 1;
        let padded = unpadded.div_ceil(64) * 64;
        let hlen = padded - prefix;
        if version == 1 && hlen > usize::from(u16::MAX) {
            continue;
        }
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&[version, 0]);
        if version == 1 {
            out.extend_from_slice(&(hlen as u16).to_le_bytes());
        } else {
            out.extend_from_slice(&(hlen as u32).to_le_bytes());
        }
        out.extend_from_slice(dict.as_bytes());
        out.resize(padded - 1, b' ');
        out.push(b'\n');
        break;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    #[test]
    fn numpy_header_bytes() {
        // What numpy 1.x/2.x writes for np.save(f, np.zeros((5, 100), np.uint8)).
        let h = write_header("|u1", &[5, 100]);
        assert_eq!(h.len(), 128);
        let text = core::str::from_utf8(&h[10..]).unwrap();
        assert!(text.starts_with("{'descr': '|u1', 'fortran_order': False, 'shape': (5, 100), }"));
        assert!(text.ends_with(" \n"));
        let p = parse_header(&h).unwrap();
        assert_eq!(p, NpyHeader { descr: "|u1".into(), fortran_order: false, shape: vec![5, 100], data_offset: 128 });
        assert_eq!(parse_header(&write_header("<f4", &[7])).unwrap().shape, vec![7]);
        assert_eq!(parse_header(&write_header("<f4", &[])).unwrap().shape, Vec::<u64>::new());
    }

    #[test]
    fn rejects_garbage() {
        assert!(parse_header(b"not numpy at all").is_err());
        let mut h = write_header("|u1", &[5]);
        h[6] = 9;
        assert!(parse_header(&h).is_err());
        let structured =
            b"\x93NUMPY\x01\x00\x40\x00{'descr': [('a', '<i4')], 'fortran_order': False, 'shape': (3,), }          \n";
        assert!(parse_header(structured).is_err());
    }
}
