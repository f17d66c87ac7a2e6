//! Why a loader cannot be built or cannot go on: [`LoaderError`], the [`Place`] a
//! dataset error happened at, and the [`ArgumentError`] of a refused argument.

use zrecord_core::stream::{StateError, StreamError};

use crate::{DatasetError, Error};

/// Why a loader cannot be built or cannot go on.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoaderError {
    /// A store failed (reading a record, or an allocation).
    #[error(transparent)]
    Store(#[from] Error),
    /// A dataset's store failed: the error names the store's path and the field.
    #[error(transparent)]
    Dataset(#[from] DatasetError),
    /// The stream or the shard cannot be built (empty dataset, batch larger than an epoch,
    /// a world size that does not divide the global batch, ...).
    #[error(transparent)]
    Stream(#[from] StreamError),
    /// A saved state does not belong to this loader's stream.
    #[error(transparent)]
    State(#[from] StateError),
    /// A saved state was refused because a dataset it read changed since: the message
    /// names the dataset's path, says how it changed and what to do ([`explain_resume`]).
    #[error("{0}")]
    Changed(String),
    /// The sources do not fit the stream or each other.
    #[error("{0}")]
    Sources(String),
    /// An argument of a [`LoaderSpec`](super::LoaderSpec) is refused.
    #[error(transparent)]
    Argument(#[from] ArgumentError),
    /// The threads could not be started.
    #[error("cannot start loader threads: {0}")]
    Spawn(std::io::Error),
    /// A worker panicked: a bug in zrecord.
    #[error("internal error (please report): {0}")]
    Panic(String),
    /// A worker went away without a batch or an error: a bug in zrecord.
    #[error("internal error (please report): a loader worker exited unexpectedly")]
    WorkerExited,
    /// An earlier [`Loader::next`](super::Loader::next) failed with this; the loader stops there. `code` is the
    /// store error's [`Error::code`] when it was one.
    #[error("{message}")]
    Stopped {
        /// The first error's code, if it was a store error.
        code: Option<i32>,
        /// The first error's message.
        message: String,
        /// Where it happened, when it was a dataset error: the store, field and record.
        at: Option<Place>,
    },
    /// The loader's threads live in the process that made it, and this one was forked.
    #[error(
        "this loader was created in a parent process and has no threads after fork(); create a new one in the child"
    )]
    Forked,
}

/// An argument of a [`LoaderSpec`](super::LoaderSpec) that is refused: which one, and
/// why in the words its caller is shown (the message alone).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ArgumentError {
    /// The argument, named as the spec's field (and the Python `_Pipeline`'s keyword).
    pub argument: &'static str,
    /// What is wrong with it.
    pub message: String,
}

/// Where a dataset error happened ([`LoaderError::Stopped`] keeps it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    /// The store (or dataset directory).
    pub path: std::path::PathBuf,
    /// The field.
    pub field: Option<String>,
    /// The store's record that failed its checksum or decode.
    pub record: Option<u64>,
}

impl LoaderError {
    /// Where a dataset error happened: its own place, or the first error's for a stopped
    /// loader.
    pub fn place(&self) -> Option<Place> {
        match self {
            LoaderError::Dataset(e) => Some(Place { path: e.path.clone(), field: e.field.clone(), record: e.record() }),
            LoaderError::Stopped { at, .. } => at.clone(),
            _ => None,
        }
    }

    /// The store error's stable code ([`Error::code`]), for this error or the one a
    /// stopped loader first failed with.
    pub fn code(&self) -> Option<i32> {
        match self {
            LoaderError::Store(e) => Some(e.code()),
            LoaderError::Dataset(e) => Some(e.code()),
            LoaderError::Stopped { code, .. } => *code,
            _ => None,
        }
    }
}

/// A refused resume in the words a user needs: when the state's dataset `index` changed,
/// the error names `paths[index]`, says whether it grew, shrank or was rewritten, and what
/// to do; any other refusal is returned as it is.
pub fn explain_resume(e: StateError, paths: &[std::path::PathBuf]) -> LoaderError {
    let (index, what) = match &e {
        StateError::DatasetLength { index, saved, current } if current > saved => (
            *index,
            format!(
                "grew from {saved} to {current} samples, and not by appends to the dataset the state read (it was \
                 written again, or rows were deleted or shards merged before the appends)"
            ),
        ),
        StateError::DatasetLength { index, saved, current } => {
            (*index, format!("shrank from {saved} to {current} samples: rows were deleted since the state was saved"))
        }
        StateError::DatasetGeneration { index, length, .. } => (
            *index,
            format!(
                "has the same {length} samples but is not the dataset the state read: it was written again (perhaps \
                 with the same sizes in another order), or rows were deleted or compacted in one of its stores"
            ),
        ),
        _ => return LoaderError::State(e),
    };
    let shown = paths.get(index).map_or_else(|| format!("dataset {index}"), |p| p.display().to_string());
    let which = if paths.len() > 1 { format!(" (mixture source {index})") } else { String::new() };
    LoaderError::Changed(format!(
        "cannot resume: {shown}{which} {what}, so the saved position would point at other samples. Start a new \
         run on it without the state, or resume on the dataset as it was when the state was saved (a copy of it)"
    ))
}
