//! A flat token file into a dataset of documents: `zr convert train.bin OUT --tokens uint16
//! --eos ID`.
//!
//! The input is what nanoGPT-style preparation scripts write: token ids back to back,
//! little-endian, no header, with an end-of-document id after each document. The output
//! is a dataset with one ragged field, `tokens`, one sample per document, *without* the
//! end-of-document id (a packed loader puts it back with `Pack(eos=ID)`, so the packed
//! stream is the file's own). Empty documents (two ids in a row) hold no token and are
//! not written; tokens after the last id are the last document.
//!
//! The file is read a block at a time, so memory stays bounded by a block and the longest
//! document; a document of any length is stored (one longer than a record spans several),
//! up to [`MAX_DOCUMENT_LEN`] bytes: past that it fails with its number and its first
//! token's place in the file (is `--eos` right?), before anything is published.

use std::fs::File;
use std::io::Read;
use std::path::Path;

use zrecord_core::dataset::Field;
use zrecord_core::error::{Error, FormatError, IoError};

use super::convert::{ImportOptions, Imported};
use super::{Column, DatasetError, DatasetWriter};

/// The longest document the import holds in memory, in bytes (a document longer than a
/// record spans several records of its store; one longer than this is far more likely an
/// end-of-document id that is not the file's).
pub const MAX_DOCUMENT_LEN: usize = 1 << 30;

/// What [`import_tokens`] did beyond [`Imported`].
#[derive(Debug)]
pub struct TokensImported {
    /// Documents written and the dataset after the commit.
    pub imported: Imported,
    /// Empty documents not written.
    pub empty: u64,
}

/// Adds the documents of the flat token file `input` (dtype `descr`, one of
/// `zrecord_app::cli::TOKEN_DTYPES`' numpy strings) to the dataset in `output` (created when missing), as
/// ragged field `tokens`. `progress(bytes read, bytes in the file)` after each block.
pub fn import_tokens(
    input: &Path,
    output: &Path,
    descr: &str,
    eos: u64,
    options: &ImportOptions,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<TokensImported, DatasetError> {
    let at = |e: Error| DatasetError::at(input, None, e);
    let io = |what: &'static str| {
        move |e: std::io::Error| at(Error::Io(IoError::from_std(e, format!("{what} {}", input.display()))))
    };
    let item = match descr {
        "|u1" => 1,
        "<u2" => 2,
        "<i4" | "<u4" => 4,
        "<i8" => 8,
        other => return Err(at(Error::InvalidArgument(format!("token dtype {other:?} is not supported")))),
    };
    let signed = descr.contains('i');
    let bits = 8 * item as u32 - u32::from(signed);
    if bits < 64 && eos >> bits != 0 {
        return Err(at(Error::InvalidArgument(format!("--eos {eos} does not fit a token of dtype {descr}"))));
    }
    let eos_bytes = eos.to_le_bytes();
    let eos_bytes = &eos_bytes[..item];
    let mut file = File::open(input).map_err(io("open"))?;
    let size = file.metadata().map_err(io("read"))?.len();
    if size % item as u64 != 0 {
        return Err(at(FormatError::Container(format!(
            "is {size} bytes, not a whole number of {item}-byte tokens: is --tokens right?"
        ))
        .into()));
    }
    let field = Field::ragged("tokens", descr, options.codec);
    let mut writer = DatasetWriter::open(output, vec![field], options.write)?;
    let block = (options.chunk_bytes.max(1 << 16) / item) * item;
    let mut buf = vec![0u8; block];
    // The document being read: its bytes so far and its first token's index in the file.
    let mut current: Vec<u8> = Vec::new();
    let mut current_start = 0u64;
    let mut docs = 0u64;
    let mut read = 0u64;
    let mut values: Vec<u8> = Vec::new();
    let mut offsets: Vec<u64> = vec![0];
    progress(0, size);
    let too_long = |doc: u64, start: u64| {
        at(Error::InvalidArgument(format!(
            "document {doc} (from token {start}) is longer than {MAX_DOCUMENT_LEN} bytes ({} tokens): is --eos right?",
            MAX_DOCUMENT_LEN / item
        )))
    };
    while read < size {
        let n = (size - read).min(block as u64) as usize;
        file.read_exact(&mut buf[..n]).map_err(io("read"))?;
        values.clear();
        offsets.truncate(1);
        let first_token = read / item as u64;
        let mut doc_begin = 0usize; // in `buf`, where the current document's tokens in this block start
        for (k, token) in buf[..n].chunks_exact(item).enumerate() {
            if token != eos_bytes {
                continue;
            }
            let end = k * item;
            let len = current.len() + (end - doc_begin);
            if len > MAX_DOCUMENT_LEN {
                return Err(too_long(docs, current_start));
            }
            // An empty document (two ids in a row) goes to the writer too: its rule,
            // every writer's, refuses it or leaves it out and counts it (`skip_empty`).
            values.extend_from_slice(&current);
            values.extend_from_slice(&buf[doc_begin..end]);
            offsets.push(values.len() as u64);
            docs += 1;
            current.clear();
            doc_begin = end + item;
            current_start = first_token + k as u64 + 1;
        }
        current.extend_from_slice(&buf[doc_begin..n]);
        if current.len() > MAX_DOCUMENT_LEN {
            return Err(too_long(docs, current_start));
        }
        if offsets.len() > 1 {
            writer.write(&[Column::Ragged { values: &values, offsets: &offsets }])?;
        }
        read += n as u64;
        progress(read, size);
    }
    if !current.is_empty() {
        writer.write(&[Column::Ragged { values: &current, offsets: &[0, current.len() as u64] }])?;
        docs += 1;
    }
    let empty = writer.skipped();
    let dataset = writer.commit()?;
    Ok(TokensImported { imported: Imported { samples: docs - empty, dataset }, empty })
}
