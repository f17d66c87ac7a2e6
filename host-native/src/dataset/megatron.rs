//! Megatron-LM's indexed datasets into token documents: `zr convert data.bin OUT
//! --megatron` (with `data.idx` beside it), what Megatron's `preprocess_data.py` writes.
//!
//! The `.idx` file (all numbers little-endian):
//!
//! ```text
//! offset 0   "MMIDIDX\0\0"               9 bytes
//!        9   version                     u64, 1
//!       17   dtype code                  u8: 1 u8, 2 i8, 3 i16, 4 i32, 5 i64, 6 f64, 7 f32, 8 u16
//!       18   sequence count S            u64
//!       26   document index count D      u64 (documents + 1)
//!       34   sequence lengths            S x i32, in elements
//!            sequence pointers           S x i64, byte offsets into the .bin
//!            document indices            D x i64, each document's first sequence, then S
//!            (sequence modes             S x i8, multimodal datasets only: ignored)
//! ```
//!
//! Each *sequence* becomes one sample of the ragged field `tokens` (Megatron's GPT dataset
//! reads sequences as its documents; `preprocess_data.py` writes one per document unless
//! it splits sentences), its tokens as stored: an end-of-document id appended by
//! `--append-eod` stays in the sample, so pack without `eos`. Only integer dtypes convert.
//! The `.bin` is read a block of sequences at a time; a pointer or length past the file's
//! end is an error naming the file and the sequence.

use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use zrecord_core::dataset::Field;
use zrecord_core::error::{Error, FormatError};

use super::convert::{ImportOptions, Imported};
use super::manifest_io::io_at;
use super::{Column, DatasetError, DatasetWriter};

/// The `.idx` file's first bytes.
pub const MEGATRON_MAGIC: &[u8; 9] = b"MMIDIDX\x00\x00";

/// The `.bin` and `.idx` paths of a Megatron indexed dataset named by `input`: either file,
/// or their common prefix.
pub fn megatron_files(input: &Path) -> (PathBuf, PathBuf) {
    let s = input.to_string_lossy();
    let prefix = s.strip_suffix(".bin").or_else(|| s.strip_suffix(".idx")).unwrap_or(&s).to_string();
    (PathBuf::from(format!("{prefix}.bin")), PathBuf::from(format!("{prefix}.idx")))
}

/// Adds the sequences of the Megatron indexed dataset `input` (see [`megatron_files`]) to
/// the dataset in `output` as the ragged field `tokens`, one sample per sequence, in the
/// file's dtype. `progress(sequences done, sequences)` after each block.
pub fn import_megatron(
    input: &Path,
    output: &Path,
    options: &ImportOptions,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Imported, DatasetError> {
    let (bin, idx) = megatron_files(input);
    let index = std::fs::read(&idx).map_err(io_at(&idx, "read"))?;
    let bad = |what: String| DatasetError::at(&idx, None, Error::Format(FormatError::Container(what)));
    if index.len() < 34 || &index[..9] != MEGATRON_MAGIC {
        return Err(bad("is not a Megatron indexed dataset index (no MMIDIDX header)".into()));
    }
    let u64_at = |at: usize| u64::from_le_bytes(index[at..at + 8].try_into().expect("eight bytes"));
    let version = u64_at(9);
    if version != 1 {
        return Err(bad(format!("index version {version} (this build reads version 1)")));
    }
    let (descr, item) = match index[17] {
        1 => ("|u1", 1),
        2 => ("|i1", 1),
        3 => ("<i2", 2),
        4 => ("<i4", 4),
        5 => ("<i8", 8),
        8 => ("<u2", 2),
        code => return Err(bad(format!("dtype code {code} is not an integer token dtype"))),
    };
    let sequences = u64_at(18);
    let documents = u64_at(26);
    let need = 34u64.saturating_add(sequences.saturating_mul(12)).saturating_add(documents.saturating_mul(8));
    if (index.len() as u64) < need {
        return Err(bad(format!(
            "holds {} bytes, too few for {sequences} sequences and {documents} document indices",
            index.len()
        )));
    }
    let lengths_at = 34usize;
    let pointers_at = lengths_at + 4 * sequences as usize;
    let length = |k: usize| i32::from_le_bytes(index[lengths_at + 4 * k..][..4].try_into().expect("four bytes"));
    let pointer = |k: usize| i64::from_le_bytes(index[pointers_at + 8 * k..][..8].try_into().expect("eight bytes"));

    let bin_len = std::fs::metadata(&bin).map_err(io_at(&bin, "read"))?.len();
    let mut data = BufReader::with_capacity(1 << 20, File::open(&bin).map_err(io_at(&bin, "open"))?);
    let field = Field::ragged("tokens", descr, options.codec);
    let mut writer = DatasetWriter::open(output, vec![field], options.write)?;
    let block = options.chunk_bytes.max(1 << 16) as u64;
    let mut values: Vec<u8> = Vec::new();
    let mut offsets: Vec<u64> = vec![0];
    let mut at = 0u64; // where `data` stands in the .bin
    progress(0, sequences);
    for k in 0..sequences as usize {
        let (len, ptr) = (length(k), pointer(k));
        let bytes = u64::try_from(len).ok().map(|l| l * item as u64);
        let start = u64::try_from(ptr).ok();
        let (Some(bytes), Some(start)) = (bytes, start) else {
            return Err(bad(format!("sequence {k}: length {len} or pointer {ptr} is negative")));
        };
        if start.checked_add(bytes).is_none_or(|end| end > bin_len) {
            return Err(DatasetError::at(
                &bin,
                None,
                Error::Format(FormatError::Container(format!(
                    "sequence {k} (bytes {start}..{}) runs past the file's {bin_len} bytes: is {} its index?",
                    start.saturating_add(bytes),
                    idx.display()
                ))),
            ));
        }
        if start != at {
            data.seek(SeekFrom::Start(start)).map_err(io_at(&bin, "read"))?;
        }
        let from = values.len();
        values.resize(from + bytes as usize, 0);
        data.read_exact(&mut values[from..]).map_err(io_at(&bin, "read"))?;
        at = start + bytes;
        offsets.push(values.len() as u64);
        if values.len() as u64 >= block {
            writer.write(&[Column::Ragged { values: &values, offsets: &offsets }])?;
            values.clear();
            offsets.truncate(1);
            progress(k as u64 + 1, sequences);
        }
    }
    if offsets.len() > 1 {
        writer.write(&[Column::Ragged { values: &values, offsets: &offsets }])?;
    }
    progress(sequences, sequences);
    let empty = writer.skipped();
    let dataset = writer.commit()?;
    Ok(Imported { samples: sequences - empty, dataset })
}
