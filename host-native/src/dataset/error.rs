//! Why a dataset operation failed: [`DatasetError`], naming the store and the field.

use std::path::{Path, PathBuf};

use zrecord_core::error::{Error, FormatError};

/// A failure of a dataset operation, naming the store (the shard's field folder, or the
/// dataset directory) and the field it happened in. [`DatasetError::code`] is the inner
/// store error's stable code.
#[derive(Debug, thiserror::Error)]
#[error("{}{}: {source}", .path.display(), field_note(.field))]
pub struct DatasetError {
    /// The store directory (or the dataset directory, for errors above the stores).
    pub path: PathBuf,
    /// The field, when the error belongs to one.
    pub field: Option<String>,
    /// What went wrong.
    #[source]
    pub source: Error,
    /// True when the error is in the dataset's metadata file (`dataset.json` or a
    /// `schema.json`: unreadable, not JSON, not a zrecord dataset), not in a store.
    pub metadata: bool,
}

fn field_note(field: &Option<String>) -> String {
    field.as_ref().map(|f| format!(" (field {f:?})")).unwrap_or_default()
}

impl DatasetError {
    /// The stable numeric code of the inner error ([`Error::code`]).
    pub fn code(&self) -> i32 {
        self.source.code()
    }

    /// The record of the store at [`DatasetError::path`] that failed its checksum or its
    /// decode, when that is what happened.
    pub fn record(&self) -> Option<u64> {
        match self.source {
            Error::Checksum { index, .. } | Error::Decode { index, .. } => Some(index),
            _ => None,
        }
    }

    pub(crate) fn at(path: &Path, field: Option<&str>, source: impl Into<Error>) -> Self {
        DatasetError {
            path: path.to_path_buf(),
            field: field.map(str::to_owned),
            source: source.into(),
            metadata: false,
        }
    }

    /// An error in the metadata file at `file`.
    pub(crate) fn in_metadata(file: &Path, source: impl Into<Error>) -> Self {
        DatasetError { metadata: true, ..DatasetError::at(file, None, source) }
    }

    /// An index past the end is `IndexOutOfRange` (code -3, loaderx's) when the numbers
    /// fit the store error; otherwise the invalid-argument error as built.
    pub(super) fn with_code_of_index_error(mut self, index: u64, length: u64) -> Self {
        if let Ok(length) = u32::try_from(length) {
            self.source = Error::IndexOutOfRange { index, length };
        }
        self
    }
}

impl From<FormatError> for DatasetError {
    fn from(e: FormatError) -> Self {
        DatasetError::at(Path::new("."), None, e)
    }
}
