//! Text into token documents for `zrecord.tokenize` (`host-native/src/dataset/text.rs`
//! does the work): files the Rust side reads (`_tokenize_files`: JSON Lines, text, Parquet),
//! or texts Python hands over a block at a time (`_TextWriter`: a Hugging Face dataset's
//! column, any iterable of strings). Encoding runs without the GIL, on rayon's pool.

use std::path::PathBuf;
use std::sync::Arc;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use zrecord::dataset::{import_text, load_tokenizer, text_inputs, TextImport, TextImported, TextWriter, Tokenizer};
use zrecord::{Codec, WriteOptions};

use crate::dataset::error::to_py;
use crate::pool::call;

fn import_options(
    text_field: String,
    eos: Option<u32>,
    codec: &str,
    skip_empty: bool,
    shard_records: Option<u64>,
) -> PyResult<TextImport> {
    let codec = Codec::from_name(codec)
        .ok_or_else(|| PyValueError::new_err(format!("codec must be \"raw\", \"flate\" or \"zstd\", not {codec:?}")))?;
    let mut write = WriteOptions { skip_empty, ..WriteOptions::default() };
    if let Some(n) = shard_records {
        write.shard_records = n;
    }
    Ok(TextImport { text_field, eos, codec, write, ..TextImport::default() })
}

/// `(documents, tokens, text bytes, documents left out)` of an import.
type Counts = (u64, u64, u64, u64);

fn counts(done: &TextImported) -> Counts {
    (done.imported.samples, done.tokens, done.text_bytes, done.empty)
}

/// `zrecord.tokenize` over JSON Lines, text or Parquet files (or a directory of them) the
/// Rust side reads: their documents encoded with `tokenizer` into the dataset `output`.
#[pyfunction]
#[pyo3(name = "_tokenize_files", signature = (input, tokenizer, output, text_field, eos, codec, skip_empty,
                                              shard_records = None, progress = None, keep_fields = true))]
#[allow(clippy::too_many_arguments)]
pub fn tokenize_files(
    py: Python<'_>,
    input: PathBuf,
    tokenizer: PathBuf,
    output: PathBuf,
    text_field: String,
    eos: Option<u32>,
    codec: &str,
    skip_empty: bool,
    shard_records: Option<u64>,
    progress: Option<Py<PyAny>>,
    keep_fields: bool,
) -> PyResult<Counts> {
    let options = TextImport { keep_fields, ..import_options(text_field, eos, codec, skip_empty, shard_records)? };
    let mut reporter = crate::progress::Progress::new(progress);
    let bar = &mut reporter;
    let done = call(py, move || {
        let tokenizer = load_tokenizer(&tokenizer)?;
        let inputs = text_inputs(&input)?;
        import_text(&inputs, tokenizer, &output, &options, &mut |d, t| bar.report(d, t))
    })?;
    reporter.finish()?;
    Ok(counts(&done))
}

/// The writer behind `zrecord.tokenize` over texts Python reads (internal).
#[pyclass(module = "zrecord", name = "_TextWriter")]
pub struct PyTextWriter {
    inner: Option<TextWriter>,
}

#[pymethods]
impl PyTextWriter {
    #[new]
    #[pyo3(signature = (output, tokenizer, eos, codec, skip_empty, shard_records = None))]
    fn new(
        py: Python<'_>,
        output: PathBuf,
        tokenizer: PathBuf,
        eos: Option<u32>,
        codec: &str,
        skip_empty: bool,
        shard_records: Option<u64>,
    ) -> PyResult<Self> {
        let options = import_options(String::new(), eos, codec, skip_empty, shard_records)?;
        let writer = call(py, move || {
            let tokenizer: Arc<Tokenizer> = load_tokenizer(&tokenizer)?;
            TextWriter::open(tokenizer, &output, &options)
        })?;
        Ok(PyTextWriter { inner: Some(writer) })
    }

    /// Encodes and stages `texts`, in order.
    fn write(&mut self, py: Python<'_>, texts: Vec<String>) -> PyResult<()> {
        let writer = self.inner.as_mut().ok_or_else(|| PyValueError::new_err("the writer was committed"))?;
        py.detach(|| writer.write(texts)).map_err(|e| to_py(py, e))
    }

    /// Publishes the documents written; returns `(documents, tokens, text bytes, documents
    /// left out)`.
    fn commit(&mut self, py: Python<'_>) -> PyResult<Counts> {
        let writer = self.inner.take().ok_or_else(|| PyValueError::new_err("the writer was committed"))?;
        let done = call(py, move || writer.commit())?;
        Ok(counts(&done))
    }

    /// Drops what was written (the dataset is left as it was).
    fn discard(&mut self) {
        self.inner = None;
    }
}
