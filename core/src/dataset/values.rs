//! The records of bytes and string fields ([`super::FieldKind::Bytes`],
//! [`super::FieldKind::String`]): each value followed by one stop byte, [`STOP_BYTE`].
//!
//! A store refuses empty records (loaderx 0.5.4 does, and a zero-length table entry means
//! "no record"), yet an empty caption or an empty blob is an ordinary value. The stop byte
//! makes every record at least one byte long and costs one byte a sample; reading strips it
//! again, so callers only ever see the values. A string field's values are UTF-8, checked
//! when written ([`records`]) and when read ([`strip`]): bytes that passed their checksum
//! may still have been written by another program. `docs/format.md` ("Bytes and string
//! fields") has the rule.

use alloc::vec::Vec;

use crate::error::DecodeError;

/// The byte that ends every record of a bytes or string field. Other values are reserved.
pub const STOP_BYTE: u8 = 0;

/// The longest value a bytes or string sample may hold: a sample's limit less its stop byte
/// (a value over a record's length spans several records: [`super::long`]).
pub const MAX_VALUE_LEN: u64 = super::long::MAX_SAMPLE_LEN - 1;

/// Why one value cannot be written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ValueError {
    /// Sample `sample` (counted from the block's first) is `len` bytes, over [`MAX_VALUE_LEN`].
    TooLong {
        /// The sample within the block.
        sample: usize,
        /// Its length.
        len: u64,
    },
    /// Sample `sample` of a string field is not UTF-8: its first bad byte is at `at`.
    NotUtf8 {
        /// The sample within the block.
        sample: usize,
        /// Byte offset of the first invalid sequence within the value.
        at: usize,
    },
    /// Offset `at` is below the one before it, or past the values.
    BadOffsets {
        /// The offset's position in the offsets.
        at: usize,
    },
}

/// Checks samples `from..to` of a column of values (`offsets` in bytes, n + 1 of them):
/// offsets in order and within the values, every value at most [`MAX_VALUE_LEN`] bytes and,
/// with `text`, UTF-8. Returns the bytes their records take (values and stop bytes).
pub fn check(values: &[u8], offsets: &[u64], from: usize, to: usize, text: bool) -> Result<u64, ValueError> {
    let bounds = offsets.get(from..=to).ok_or(ValueError::BadOffsets { at: offsets.len() })?;
    let mut size = 0u64;
    for (k, w) in bounds.windows(2).enumerate() {
        if w[1] < w[0] || w[1] > values.len() as u64 {
            return Err(ValueError::BadOffsets { at: from + k + 1 });
        }
        let len = w[1] - w[0];
        if len > MAX_VALUE_LEN {
            return Err(ValueError::TooLong { sample: from + k, len });
        }
        if text {
            if let Err(e) = core::str::from_utf8(&values[w[0] as usize..w[1] as usize]) {
                return Err(ValueError::NotUtf8 { sample: from + k, at: e.valid_up_to() });
            }
        }
        size += len + 1;
    }
    Ok(size)
}

/// Records of a bytes or string field, as [`crate::Store`]'s variable-length stage takes
/// them: their bytes back to back, and each record's start and length there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Records {
    /// Every value followed by the stop byte.
    pub bytes: Vec<u8>,
    /// Where each record starts in `bytes`.
    pub starts: Vec<u64>,
    /// Each record's length (its value's and one).
    pub lens: Vec<u32>,
}

/// The records of samples `from..to` of a column of values, after [`check`].
pub fn records(values: &[u8], offsets: &[u64], from: usize, to: usize, text: bool) -> Result<Records, ValueError> {
    let size = check(values, offsets, from, to, text)?;
    let mut out = Records {
        bytes: Vec::with_capacity(size as usize),
        starts: Vec::with_capacity(to - from),
        lens: Vec::with_capacity(to - from),
    };
    for w in offsets[from..=to].windows(2) {
        let value = &values[w[0] as usize..w[1] as usize];
        out.starts.push(out.bytes.len() as u64);
        out.lens.push(value.len() as u32 + 1);
        out.bytes.extend_from_slice(value);
        out.bytes.push(STOP_BYTE);
    }
    Ok(out)
}

/// Strips the stop byte of each record in `buf`, in place: record `k` is
/// `buf[offsets[k]..offsets[k + 1]]` on the way in, its value on the way out (the values
/// then lie back to back from 0, and `offsets` says where). Returns the values' total
/// length; `buf` past it is left as it was. With `text`, every value must be UTF-8.
///
/// A record that is empty, ends in another byte, or (with `text`) is not UTF-8 is
/// `Err((k, why))`; `buf` and `offsets` are then partly rewritten.
pub fn strip(buf: &mut [u8], offsets: &mut [u64], text: bool) -> Result<usize, (usize, DecodeError)> {
    let mut to = 0usize;
    let Some(&first) = offsets.first() else { return Ok(0) };
    let mut start = first as usize;
    offsets[0] = 0;
    for (k, offset) in offsets.iter_mut().enumerate().skip(1) {
        let end = *offset as usize;
        let record = buf.get(start..end).ok_or((k - 1, DecodeError::EmptyRecord))?;
        match record.last() {
            None => return Err((k - 1, DecodeError::EmptyRecord)),
            Some(&STOP_BYTE) => {}
            Some(&found) => return Err((k - 1, DecodeError::NoStopByte { found })),
        }
        let len = record.len() - 1;
        if text {
            if let Err(e) = core::str::from_utf8(&record[..len]) {
                return Err((k - 1, DecodeError::NotUtf8 { at: e.valid_up_to() as u32 }));
            }
        }
        buf.copy_within(start..start + len, to);
        to += len;
        *offset = to as u64;
        start = end;
    }
    Ok(to)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MAX_RECORD_LEN;
    use alloc::vec;

    #[test]
    fn records_carry_a_stop_byte_and_strip_gives_the_values_back() {
        let values = "héllo".as_bytes().iter().chain(b"xyz").copied().collect::<Vec<u8>>();
        // "", "héllo", "", "xyz"
        let offsets = [0u64, 0, 6, 6, 9];
        let Records { bytes: buf, starts, lens } = records(&values, &offsets, 0, 4, true).unwrap();
        assert_eq!(buf, b"\0h\xc3\xa9llo\0\0xyz\0");
        assert_eq!(starts, vec![0, 1, 8, 9]);
        assert_eq!(lens, vec![1, 7, 1, 4]);
        let mut at: Vec<u64> = starts.clone();
        at.push(buf.len() as u64);
        let mut out = buf.clone();
        let n = strip(&mut out, &mut at, true).unwrap();
        assert_eq!(&out[..n], &values[..]);
        assert_eq!(at, offsets);
        // A part of the column.
        let Records { bytes: part, lens, .. } = records(&values, &offsets, 1, 3, false).unwrap();
        assert_eq!((part.as_slice(), lens), (&b"h\xc3\xa9llo\0\0"[..], vec![7, 1]));
    }

    #[test]
    fn refuses_what_is_not_a_value() {
        let bad = [0xffu8, b'a'];
        assert_eq!(records(&bad, &[0, 2], 0, 1, true), Err(ValueError::NotUtf8 { sample: 0, at: 0 }));
        assert!(records(&bad, &[0, 2], 0, 1, false).is_ok());
        assert_eq!(records(&bad, &[0, 3], 0, 1, false), Err(ValueError::BadOffsets { at: 1 }));
        assert_eq!(records(&bad, &[2, 1], 0, 1, false), Err(ValueError::BadOffsets { at: 1 }));
        // A value over a record's length is one record here; the writer splits it.
        let big = vec![b'a'; MAX_RECORD_LEN as usize + 1];
        let Records { bytes: fits, lens, .. } = records(&big, &[0, 1, big.len() as u64], 0, 2, false).unwrap();
        assert_eq!((fits.len(), lens[1]), (big.len() + 2, MAX_RECORD_LEN + 1));
        let e = check(&big, &[0, MAX_VALUE_LEN + 1], 0, 1, false);
        assert_eq!(e, Err(ValueError::BadOffsets { at: 1 }));
        let mut buf = *b"ab\0cd";
        assert_eq!(strip(&mut buf, &mut [0, 3, 5], false), Err((1, DecodeError::NoStopByte { found: b'd' })));
        let mut buf = *b"a\xff\0";
        assert_eq!(strip(&mut buf, &mut [0, 3], true), Err((0, DecodeError::NotUtf8 { at: 1 })));
        assert_eq!(strip(&mut buf, &mut [0, 0], true), Err((0, DecodeError::EmptyRecord)));
    }
}
