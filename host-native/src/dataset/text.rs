//! Text into token documents: `zr convert corpus.jsonl OUT --tokenizer tokenizer.json
//! [--text-field text] [--eos ID]`, and `zrecord.tokenize` from Python.
//!
//! The input is a JSON Lines file (one object per line, its text under `text_field`), a
//! text file (the whole file one document), a Parquet file (its `text_field` column, a row
//! per document: [`parquet`]), or a directory of them (`.jsonl`, `.json` lines, `.txt`,
//! `.parquet`, in name order). Each document is encoded by Hugging Face's `tokenizers`
//! crate from a `tokenizer.json` (the ids its Python package gives for the same file and
//! text), a block of documents at a time, the block's documents encoded in parallel on
//! rayon's pool; with `eos`, that id ends every document. The output is a dataset of one
//! ragged field, `tokens`, one sample per document, in input order: `<u2` when the
//! vocabulary fits 16 bits, else `<u4`. The other fields of JSON Lines objects are kept
//! beside it (unless `keep_fields` is off): the first object's strings become string
//! fields, its integers `<i8`, its other numbers `<f8` and its booleans `|b1` (nulls,
//! arrays and objects are left out, and said so), and every later object must have each
//! kept field, of the same kind; a Parquet file's columns are kept by the same rule, by its
//! schema. Memory stays bounded by a block (plus the longest
//! document); the write is the dataset writer's, so nothing is published before the
//! commit, and the `zr` front end stages the output beside its final name.
//!
//! Errors name the file and line (a line that is not a JSON object, a missing or
//! non-string text field); a document that encodes to no token, with no `eos`, follows the
//! writers' rule for empty samples (refused, or left out and counted with `skip_empty`).

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;

pub use tokenizers::Tokenizer;
use zrecord_core::dataset::Field;
use zrecord_core::error::{Error, IoError};
use zrecord_core::Codec;

mod parquet;

use self::parquet::ParquetText;
use super::convert::Imported;
use super::manifest_io::io_at;
use super::{Column, DatasetError, DatasetWriter, WriteOptions};

/// How [`import_text`] reads and writes.
#[derive(Clone, Debug)]
pub struct TextImport {
    /// The JSON key of each line's text (JSON Lines input).
    pub text_field: String,
    /// An id put after every document.
    pub eos: Option<u32>,
    /// The `tokens` field's codec.
    pub codec: Codec,
    /// How the dataset is written (shards, compression threshold, empty documents).
    pub write: WriteOptions,
    /// Bytes of text encoded per block (default 4 MiB): a block is encoded (in parallel)
    /// while the one before is compressed and written.
    pub block_bytes: usize,
    /// Keep the other fields of JSON Lines objects as fields of their own (the default);
    /// `false`: the tokens only.
    pub keep_fields: bool,
}

impl Default for TextImport {
    fn default() -> Self {
        TextImport {
            text_field: "text".into(),
            eos: None,
            codec: Codec::Flate,
            write: WriteOptions::default(),
            block_bytes: 4 << 20,
            keep_fields: true,
        }
    }
}

/// What [`import_text`] did beyond [`Imported`].
#[derive(Debug)]
pub struct TextImported {
    /// Documents written and the dataset after the commit.
    pub imported: Imported,
    /// Documents left out for encoding to no token (`skip_empty`).
    pub empty: u64,
    /// Tokens written (`eos` included).
    pub tokens: u64,
    /// Bytes of text read.
    pub text_bytes: u64,
    /// The fields kept beside `tokens`.
    pub kept: Vec<String>,
    /// The fields of the first object left out (nulls, arrays, objects).
    pub left_out: Vec<String>,
}

/// The files `input` names: itself, or a directory's `.jsonl`, `.json`, `.txt` and
/// `.parquet` files in name order.
pub fn text_inputs(input: &Path) -> Result<Vec<PathBuf>, DatasetError> {
    let at = io_at(input, "read");
    if !input.is_dir() {
        std::fs::metadata(input).map_err(at)?;
        return Ok(vec![input.to_path_buf()]);
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(input)
        .map_err(at)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.is_file() && matches!(p.extension().and_then(|x| x.to_str()), Some("jsonl" | "json" | "txt" | "parquet"))
        })
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(DatasetError::at(
            input,
            None,
            Error::InvalidArgument("holds no .jsonl, .json, .txt or .parquet file to tokenize".into()),
        ));
    }
    Ok(files)
}

/// Loads a `tokenizer.json`; its errors name the file. Truncation and padding the file may
/// carry are turned off: a document is stored whole, at its own length.
pub fn load_tokenizer(path: &Path) -> Result<Arc<Tokenizer>, DatasetError> {
    let bad = |what: String| DatasetError::at(path, None, Error::InvalidArgument(what));
    let mut tokenizer = Tokenizer::from_file(path)
        .map_err(|e| bad(format!("is not a tokenizer.json the tokenizers library reads: {e}")))?;
    tokenizer.with_truncation(None).map_err(|e| bad(format!("truncation: {e}")))?;
    tokenizer.with_padding(None);
    Ok(Arc::new(tokenizer))
}

/// Encodes the documents of `inputs` with `tokenizer` into the dataset at `output` (added
/// to it when it exists with the same field); see the module docs. `progress(bytes read,
/// bytes in all)` after each block.
pub fn import_text(
    inputs: &[PathBuf],
    tokenizer: Arc<Tokenizer>,
    output: &Path,
    options: &TextImport,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<TextImported, DatasetError> {
    let (kept, left_out, first) = match options.keep_fields {
        true => kept_fields(inputs, &options.text_field)?,
        false => (Vec::new(), Vec::new(), PathBuf::new()),
    };
    let mut writer = TextWriter::open_fields(tokenizer, output, options, kept.clone())?;
    writer.left_out = left_out;
    let total: u64 = inputs.iter().map(|p| std::fs::metadata(p).map_or(0, |m| m.len())).sum();
    let mut read = 0u64;
    progress(0, total);
    let mut block = Block::new(&kept);
    let block_bytes = options.block_bytes;
    let mut flush = |block: &mut Block, at_least: usize| match block.bytes >= at_least {
        true => block.flush(&mut writer, &kept),
        false => Ok(()),
    };
    for path in inputs {
        match Input::of(path) {
            Input::Parquet => {
                let file = ParquetText::open(path)?;
                file.check(path, &options.text_field, &kept, &first)?;
                let before = read;
                let mut each_row = |block: &mut Block| flush(block, block_bytes);
                let mut advanced = |done| {
                    read = before + done;
                    progress(read.min(total), total);
                };
                file.read(path, &options.text_field, &kept, &mut block, &mut each_row, &mut advanced)?;
                read = before + std::fs::metadata(path).map_or(0, |m| m.len());
            }
            Input::Text => {
                if !kept.is_empty() {
                    let what = format!(
                        "is a text file, with no field {:?} that the other input keeps (--tokens-only keeps none)",
                        kept[0].name
                    );
                    return Err(DatasetError::at(path, None, Error::InvalidArgument(what)));
                }
                let file = File::open(path).map_err(io_at(path, "open"))?;
                let mut text = String::new();
                BufReader::new(file).read_to_string(&mut text).map_err(|e| {
                    DatasetError::at(path, None, Error::InvalidArgument(format!("is not UTF-8 text: {e}")))
                })?;
                read += text.len() as u64;
                block.bytes += text.len();
                block.texts.push(text);
            }
            Input::JsonLines => {
                let file = File::open(path).map_err(io_at(path, "open"))?;
                let mut reader = BufReader::with_capacity(1 << 20, file);
                let mut line = String::new();
                let mut number = 0u64;
                loop {
                    line.clear();
                    let n = reader.read_line(&mut line).map_err(|e| {
                        let what = format!("line {}: {e}", number + 1);
                        DatasetError::at(path, None, Error::InvalidArgument(what))
                    })?;
                    if n == 0 {
                        break;
                    }
                    number += 1;
                    read += n as u64;
                    if line.trim().is_empty() {
                        continue;
                    }
                    let at_line = |what: String| {
                        DatasetError::at(path, None, Error::InvalidArgument(format!("line {number}: {what}")))
                    };
                    let (text, object) = text_of(&line, &options.text_field).map_err(at_line)?;
                    for (k, values) in kept.iter().zip(&mut block.extras) {
                        k.push(object.get(&k.name), values).map_err(at_line)?;
                    }
                    block.bytes += text.len();
                    block.texts.push(text);
                    if block.bytes >= block_bytes {
                        flush(&mut block, block_bytes)?;
                        progress(read, total);
                    }
                }
            }
        }
        flush(&mut block, block_bytes)?;
        progress(read.min(total), total);
    }
    flush(&mut block, 0)?;
    progress(total, total);
    writer.commit()
}

/// What kind of text input a file is, by its extension: `.txt` is one document, `.parquet`
/// a table, anything else JSON Lines.
enum Input {
    Text,
    Parquet,
    JsonLines,
}

impl Input {
    fn of(path: &Path) -> Input {
        match path.extension().and_then(|x| x.to_str()) {
            Some("txt") => Input::Text,
            Some("parquet") => Input::Parquet,
            _ => Input::JsonLines,
        }
    }
}

/// Documents read and not yet encoded: their texts and the kept fields' values.
struct Block {
    texts: Vec<String>,
    extras: Vec<Values>,
    /// Bytes of text in `texts`.
    bytes: usize,
}

impl Block {
    fn new(kept: &[Kept]) -> Block {
        Block { texts: Vec::new(), extras: kept.iter().map(Kept::values).collect(), bytes: 0 }
    }

    /// Hands the documents to `writer` and starts an empty block.
    fn flush(&mut self, writer: &mut TextWriter, kept: &[Kept]) -> Result<(), DatasetError> {
        let full = std::mem::replace(self, Block::new(kept));
        writer.write_with(full.texts, full.extras)
    }
}

/// A field of the JSON Lines objects kept beside the tokens, and what kind its values are.
#[derive(Clone, Debug)]
struct Kept {
    name: String,
    kind: Kind,
}

/// What a kept field holds: its values' kind in JSON (or a Parquet column's), and so its
/// dtype: a string field, `<i8`, `<f8` or `|b1`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// Text: a string field.
    String,
    /// Integers: `<i8`.
    Integer,
    /// Other numbers: `<f8`.
    Number,
    /// Booleans: `|b1`.
    Boolean,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::String => "a string",
            Kind::Integer => "an integer",
            Kind::Number => "a number",
            Kind::Boolean => "a boolean",
        }
    }

    /// The kind as a Parquet column's type is named in messages: `string`, `integer`,
    /// `floating`, `boolean`.
    fn column_word(self) -> &'static str {
        match self {
            Kind::String => "string",
            Kind::Integer => "integer",
            Kind::Number => "floating",
            Kind::Boolean => "boolean",
        }
    }
}

impl Kept {
    fn field(&self, codec: Codec) -> Field {
        match self.kind {
            Kind::String => Field::string(&self.name, codec),
            Kind::Integer => Field::fixed(&self.name, "<i8", &[], Codec::Raw),
            Kind::Number => Field::fixed(&self.name, "<f8", &[], Codec::Raw),
            Kind::Boolean => Field::fixed(&self.name, "|b1", &[], Codec::Raw),
        }
    }

    fn values(&self) -> Values {
        match self.kind {
            Kind::String => Values::Ragged { values: Vec::new(), offsets: vec![0] },
            _ => Values::Fixed(Vec::new()),
        }
    }

    /// Adds one object's value (`None`: the object has no such field).
    fn push(&self, value: Option<&serde_json::Value>, to: &mut Values) -> Result<(), String> {
        use serde_json::Value;
        let wrong = |v: &Value| {
            format!(
                "field {:?} is {} here, {} on the first line (--tokens-only keeps none)",
                self.name,
                json_kind(v),
                self.kind.name()
            )
        };
        let Some(v) = value else {
            return Err(format!("no field {:?}, which the first line has (--tokens-only keeps none)", self.name));
        };
        match (self.kind, v, to) {
            (Kind::String, Value::String(text), Values::Ragged { values, offsets }) => {
                values.extend_from_slice(text.as_bytes());
                offsets.push(values.len() as u64);
            }
            (Kind::Integer, Value::Number(n), Values::Fixed(out)) => {
                out.extend_from_slice(&n.as_i64().ok_or_else(|| wrong(v))?.to_le_bytes());
            }
            (Kind::Number, Value::Number(n), Values::Fixed(out)) => {
                out.extend_from_slice(&n.as_f64().ok_or_else(|| wrong(v))?.to_le_bytes());
            }
            (Kind::Boolean, Value::Bool(b), Values::Fixed(out)) => out.push(u8::from(*b)),
            _ => return Err(wrong(v)),
        }
        Ok(())
    }
}

/// The values of one kept field for a block of documents, as [`Column`] lays them out.
#[derive(Debug)]
enum Values {
    /// `<i8`, `<f8` or `|b1` values, back to back.
    Fixed(Vec<u8>),
    /// UTF-8 strings back to back, and `n + 1` byte offsets.
    Ragged {
        /// The strings' bytes.
        values: Vec<u8>,
        /// Byte offsets, `n + 1`, from 0.
        offsets: Vec<u64>,
    },
}

impl Values {
    fn column(&self) -> Column<'_> {
        match self {
            Values::Fixed(bytes) => Column::Fixed(bytes),
            Values::Ragged { values, offsets } => Column::Ragged { values, offsets },
        }
    }
}

/// The fields kept: those of the first JSON Lines object of `inputs` (in key order) but the
/// text, or the first Parquet file's columns when that comes first; the names of those left
/// out (nulls, arrays, objects; a Parquet file's other columns); and the file they are from.
fn kept_fields(inputs: &[PathBuf], text_field: &str) -> Result<(Vec<Kept>, Vec<String>, PathBuf), DatasetError> {
    let Some(path) = inputs.iter().find(|p| !matches!(Input::of(p), Input::Text)) else {
        return Ok((Vec::new(), Vec::new(), PathBuf::new()));
    };
    let (kept, left_out) = match Input::of(path) {
        Input::Parquet => ParquetText::open(path)?.kept(text_field),
        _ => kept_json_fields(path, text_field)?,
    };
    if kept.iter().any(|k| k.name == "tokens") {
        let what = "a field \"tokens\" clashes with the token field (--tokens-only keeps none)".to_string();
        return Err(DatasetError::at(path, None, Error::InvalidArgument(what)));
    }
    Ok((kept, left_out, path.clone()))
}

/// The fields of the first object of a JSON Lines file but the text, and those left out.
fn kept_json_fields(path: &Path, text_field: &str) -> Result<(Vec<Kept>, Vec<String>), DatasetError> {
    use serde_json::Value;
    let file = File::open(path).map_err(io_at(path, "open"))?;
    let mut number = 0u64;
    for line in BufReader::new(file).lines() {
        let line = line
            .map_err(|e| DatasetError::at(path, None, Error::InvalidArgument(format!("line {}: {e}", number + 1))))?;
        number += 1;
        if line.trim().is_empty() {
            continue;
        }
        let (_, object) = text_of(&line, text_field)
            .map_err(|what| DatasetError::at(path, None, Error::InvalidArgument(format!("line {number}: {what}"))))?;
        let (mut kept, mut left_out) = (Vec::new(), Vec::new());
        for (name, v) in &object {
            let kind = match v {
                Value::String(_) => Kind::String,
                Value::Number(n) if n.is_i64() => Kind::Integer,
                Value::Number(_) => Kind::Number,
                Value::Bool(_) => Kind::Boolean,
                _ => {
                    left_out.push(name.clone());
                    continue;
                }
            };
            if name == "tokens" {
                let what = format!(
                    "line {number}: a field \"tokens\" clashes with the token field (--tokens-only keeps none)"
                );
                return Err(DatasetError::at(path, None, Error::InvalidArgument(what)));
            }
            kept.push(Kept { name: name.clone(), kind });
        }
        return Ok((kept, left_out));
    }
    Ok((Vec::new(), Vec::new()))
}

/// Documents of text, block by block, into a dataset of token documents: [`import_text`]
/// over files, and `zrecord.tokenize` over texts Python reads (a Hugging Face dataset's
/// column, any iterable of strings).
pub struct TextWriter {
    tokenizer: Arc<Tokenizer>,
    /// Encoded blocks on their way to the stager thread, which owns the dataset writer
    /// and stages (compresses, writes) one block while the next is encoded.
    to_stager: Option<SyncSender<Encoded>>,
    stager: Option<JoinHandle<Result<DatasetWriter, DatasetError>>>,
    output: PathBuf,
    /// Tokens are `<u4` (else `<u2`).
    wide: bool,
    eos: Option<u32>,
    docs: u64,
    tokens: u64,
    /// Bytes of text written (what [`TextImported::text_bytes`] reports).
    text_bytes: u64,
    /// Kept fields beside `tokens`, and fields left out (reported by the commit).
    kept: Vec<String>,
    left_out: Vec<String>,
}

impl TextWriter {
    /// A writer of `tokenizer`'s ids into the dataset at `output` (its field `tokens`:
    /// `<u2` when the vocabulary and `eos` fit 16 bits, else `<u4`).
    pub fn open(tokenizer: Arc<Tokenizer>, output: &Path, options: &TextImport) -> Result<TextWriter, DatasetError> {
        Self::open_fields(tokenizer, output, options, Vec::new())
    }

    /// The writer of `tokens` and the fields `kept`, in that order.
    fn open_fields(
        tokenizer: Arc<Tokenizer>,
        output: &Path,
        options: &TextImport,
        kept: Vec<Kept>,
    ) -> Result<TextWriter, DatasetError> {
        let vocab = tokenizer.get_vocab_size(true) as u64;
        let wide = vocab > 1 << 16 || options.eos.is_some_and(|e| e >= 1 << 16);
        let field = Field::ragged("tokens", if wide { "<u4" } else { "<u2" }, options.codec);
        let fields = std::iter::once(field).chain(kept.iter().map(|k| k.field(options.codec))).collect();
        let mut writer = DatasetWriter::open(output, fields, options.write)?;
        let (to_stager, blocks) = sync_channel::<Encoded>(1);
        let stager = std::thread::Builder::new()
            .name("zrecord-text-stager".into())
            .spawn(move || {
                for block in blocks {
                    let tokens = Column::Ragged { values: &block.values, offsets: &block.offsets };
                    let columns: Vec<Column<'_>> =
                        std::iter::once(tokens).chain(block.extras.iter().map(Values::column)).collect();
                    writer.write(&columns)?;
                }
                Ok(writer)
            })
            .map_err(|e| DatasetError::at(output, None, Error::Io(IoError::from_std(e, "start a thread"))))?;
        Ok(TextWriter {
            tokenizer,
            to_stager: Some(to_stager),
            stager: Some(stager),
            output: output.to_path_buf(),
            wide,
            eos: options.eos,
            docs: 0,
            tokens: 0,
            text_bytes: 0,
            kept: kept.into_iter().map(|k| k.name).collect(),
            left_out: Vec::new(),
        })
    }

    /// Encodes `texts` (in parallel) and stages their documents, in order.
    pub fn write(&mut self, texts: Vec<String>) -> Result<(), DatasetError> {
        self.write_with(texts, Vec::new())
    }

    /// The same as [`TextWriter::write`] with the values of the fields the writer keeps, one
    /// per text each, in the writer's order.
    fn write_with(&mut self, texts: Vec<String>, extras: Vec<Values>) -> Result<(), DatasetError> {
        if extras.len() != self.kept.len() {
            let what = format!("{} kept fields' values for {} fields", extras.len(), self.kept.len());
            return Err(DatasetError::at(&self.output, None, Error::InvalidArgument(what)));
        }
        if texts.is_empty() {
            return Ok(());
        }
        let count = texts.len() as u64;
        let bytes: usize = texts.iter().map(String::len).sum();
        // The fast batch encode: ids without the offsets `encode_batch` also computes (a
        // dataset of token documents keeps ids only); the same ids.
        let encodings = self.tokenizer.encode_batch_fast(texts, true).map_err(|e| {
            DatasetError::at(&self.output, Some("tokens"), Error::InvalidArgument(format!("the tokenizer failed: {e}")))
        })?;
        let item = if self.wide { 4 } else { 2 };
        let eos = self.eos;
        let ids = encodings.iter().map(|e| e.len()).sum::<usize>() + encodings.len() * usize::from(eos.is_some());
        let mut values = Vec::with_capacity(ids * item);
        let mut offsets = Vec::with_capacity(encodings.len() + 1);
        offsets.push(0u64);
        for encoding in &encodings {
            for &id in encoding.get_ids().iter().chain(eos.as_ref()) {
                if self.wide {
                    values.extend_from_slice(&id.to_le_bytes());
                } else {
                    // The vocabulary fits 16 bits (`open`): so does every id.
                    values.extend_from_slice(&(id as u16).to_le_bytes());
                }
            }
            offsets.push(values.len() as u64);
        }
        self.docs += count;
        self.tokens += (values.len() / item) as u64;
        self.text_bytes += bytes as u64;
        let sent = self.to_stager.as_ref().is_some_and(|s| s.send(Encoded { values, offsets, extras }).is_ok());
        if !sent {
            // The stager stopped on an error: it is the one to report.
            return Err(self.join_stager().err().unwrap_or_else(|| self.stopped()));
        }
        Ok(())
    }

    fn stopped(&self) -> DatasetError {
        DatasetError::at(&self.output, None, Error::InvalidArgument("the writer was committed or failed".into()))
    }

    /// Waits for the stager to stage every block sent; its writer, or its error.
    fn join_stager(&mut self) -> Result<DatasetWriter, DatasetError> {
        self.to_stager = None;
        let Some(stager) = self.stager.take() else { return Err(self.stopped()) };
        stager.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    }

    /// Publishes the documents written (see [`DatasetWriter::commit`]).
    pub fn commit(mut self) -> Result<TextImported, DatasetError> {
        let writer = self.join_stager()?;
        let empty = writer.skipped();
        let dataset = writer.commit()?;
        Ok(TextImported {
            imported: Imported { samples: self.docs - empty, dataset },
            empty,
            tokens: self.tokens,
            text_bytes: self.text_bytes,
            kept: std::mem::take(&mut self.kept),
            left_out: std::mem::take(&mut self.left_out),
        })
    }
}

/// One encoded block: the ids of its documents back to back, and their byte offsets.
struct Encoded {
    values: Vec<u8>,
    offsets: Vec<u64>,
    /// The kept fields' values.
    extras: Vec<Values>,
}

impl Drop for TextWriter {
    fn drop(&mut self) {
        // Not committed: the stager's writer is dropped with it, which removes what it
        // staged (`DatasetWriter`'s drop).
        self.to_stager = None;
        if let Some(stager) = self.stager.take() {
            let _ = stager.join();
        }
    }
}

/// The text of one JSON Lines line, and the rest of its object.
fn text_of(line: &str, field: &str) -> Result<(String, serde_json::Map<String, serde_json::Value>), String> {
    let value: serde_json::Value = serde_json::from_str(line).map_err(|e| format!("not JSON: {e}"))?;
    let serde_json::Value::Object(mut object) = value else {
        return Err("not a JSON object (JSON Lines input holds one object per line)".into());
    };
    match object.remove(field) {
        Some(serde_json::Value::String(text)) => Ok((text, object)),
        Some(other) => Err(format!("field {field:?} is not a string but {}", json_kind(&other))),
        None => {
            let keys: Vec<&String> = object.keys().collect();
            Err(format!("no field {field:?} (its fields: {keys:?}); --text-field names the one holding the text"))
        }
    }
}

fn json_kind(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}
