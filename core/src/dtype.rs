//! Element types, as `schema.json` and `dataset.json` name them: NumPy's `dtype.str`
//! (`<f4`, `|u1`, `|S10`). A record is a fixed-size run of bytes per sample, so all the
//! format needs of a dtype is its item size; byte order and meaning are the reader's.

use alloc::format;
use alloc::string::String;

use crate::error::FormatError;

fn bad(msg: impl Into<String>) -> FormatError {
    FormatError::Container(msg.into())
}

/// Bytes per element of a NumPy dtype string such as `<f4`, `|S10` or `<U5`.
pub fn itemsize(descr: &str) -> Result<u64, FormatError> {
    let body = descr.strip_prefix(['<', '>', '|', '=']).unwrap_or(descr);
    let mut chars = body.chars();
    let kind = chars.next().ok_or_else(|| bad("empty dtype"))?;
    let rest = chars.as_str();
    let digits: &str = rest.split('[').next().unwrap_or("");
    let n: u64 = digits.parse().map_err(|_| bad(format!("unsupported dtype {descr:?}")))?;
    match kind {
        'b' | 'i' | 'u' | 'f' | 'c' | 'S' | 'V' | 'M' | 'm' => Ok(n),
        'U' => Ok(n * 4),
        _ => Err(bad(format!("unsupported dtype {descr:?}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn itemsizes() {
        for (d, n) in [("|u1", 1), ("<f4", 4), ("<c16", 16), ("|S10", 10), ("<U5", 20), ("<M8[ns]", 8), ("|b1", 1)] {
            assert_eq!(itemsize(d).unwrap(), n, "{d}");
        }
        assert!(itemsize("|O").is_err());
        assert!(itemsize("").is_err());
    }
}
