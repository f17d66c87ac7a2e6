//! How a dataset is written ([`WriteOptions`]) and what a write does to a dataset already
//! at its path ([`WriteMode`]): the options every writer of new stores takes.

use zrecord_core::format::FileLayout;
use zrecord_core::MAX_RECORDS;

/// How a dataset is written.
#[derive(Clone, Copy, Debug)]
pub struct WriteOptions {
    /// Samples per shard; a write rolls to a new shard when one is full (default and most:
    /// 2^24, the store's record limit).
    pub shard_records: u64,
    /// The least fraction compression must save for a record to be stored compressed
    /// ([`CodecPolicy`](zrecord_core::CodecPolicy); default [`zrecord_core::DEFAULT_MIN_SAVINGS`]).
    pub min_savings: f64,
    /// How the new shards' stores size their files (default [`FileLayout::Dense`]: files
    /// as long as what they hold, safe for any copy tool; [`FileLayout::Sparse`] makes
    /// each fixed field store one loaderx 0.5.4 opens).
    pub layout: FileLayout,
    /// What a sample with an empty ragged field (no element) does: a store holds no empty
    /// record, so by default the write fails naming it; `true` leaves such samples out
    /// (every field of them) and counts them ([`DatasetWriter::skipped`](super::DatasetWriter::skipped)). The one rule of
    /// every writer: `Dataset.write`, `zr convert`, parts.
    pub skip_empty: bool,
    /// What a write does to a dataset already at the path (default [`WriteMode::Append`],
    /// what `zr convert`, parts and Ray's sink do; Python's `Dataset.write` asks for
    /// [`WriteMode::Create`] unless told otherwise).
    pub mode: WriteMode,
    /// How long a write waits for the dataset's writer lock while another write holds it
    /// (appenders side by side take turns; each write's rows land whole, once). Past it
    /// the write fails with [`Error::Locked`](zrecord_core::error::Error::Locked), saying
    /// how long it waited. Default zero: fail at once (Python's `Dataset.write` waits 60
    /// s unless told otherwise).
    pub lock_wait: std::time::Duration,
}

/// What a write does when its path already holds a dataset of named fields.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WriteMode {
    /// Refuse it, naming the other modes.
    Create,
    /// Add the new samples after its own (the fields must match).
    #[default]
    Append,
    /// Replace it: the new samples, of any fields, become the dataset at the commit, all
    /// at once (readers see the old dataset or the new one), and the old shards go after.
    Overwrite,
}

impl WriteMode {
    /// Every mode, in the order of their names' documentation.
    pub const ALL: [WriteMode; 3] = [WriteMode::Create, WriteMode::Append, WriteMode::Overwrite];

    /// The mode's name, the same in Rust, Python and the CLI.
    pub fn name(self) -> &'static str {
        match self {
            WriteMode::Create => "create",
            WriteMode::Append => "append",
            WriteMode::Overwrite => "overwrite",
        }
    }

    /// The mode called `name`.
    pub fn from_name(name: &str) -> Option<WriteMode> {
        WriteMode::ALL.into_iter().find(|m| m.name() == name)
    }
}

impl Default for WriteOptions {
    fn default() -> Self {
        WriteOptions {
            shard_records: u64::from(MAX_RECORDS),
            min_savings: zrecord_core::DEFAULT_MIN_SAVINGS,
            layout: FileLayout::Dense,
            lock_wait: std::time::Duration::ZERO,
            skip_empty: false,
            mode: WriteMode::Append,
        }
    }
}
