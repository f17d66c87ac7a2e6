//! The command line as data, below both its parser and its front ends: the verbs' parsers,
//! the path roles and `cli.rs`'s runner all use [`Command`], and none of them has to be read
//! to see what a command line can say.

use alloc::string::String;
use alloc::vec::Vec;

use zrecord_core::codec::CodecPolicy;
use zrecord_core::engine::Verify;
use zrecord_core::format::FileLayout;

use crate::cli::host::TextImport;

/// One parsed command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// `inspect STORE [--json]`.
    Inspect {
        /// Store directory.
        store: String,
        /// Print JSON.
        json: bool,
    },
    /// `verify STORE [--json] [--seal]`.
    Verify {
        /// Store directory.
        store: String,
        /// Print JSON.
        json: bool,
        /// Checksum the unchecked records first (opens the store writable).
        seal: bool,
    },
    /// `stats STORE`.
    Stats {
        /// Store directory.
        store: String,
    },
    /// `delete STORE|DATASET INDEX... [--from-file F] [--force]`.
    Delete {
        /// Store or dataset directory.
        store: String,
        /// Indices to delete.
        indices: Vec<u64>,
        /// A file of more indices.
        from_file: Option<String>,
        /// Change a store that is a field of a dataset all the same.
        force: bool,
    },
    /// `compact STORE|DATASET [--target-rows N] [--force]`.
    Compact {
        /// Store or dataset directory.
        store: String,
        /// A dataset's shard size to merge up to.
        target_rows: Option<u64>,
        /// Change a store that is a field of a dataset all the same.
        force: bool,
    },
    /// `clean DATASET [--older-than SECONDS]`: remove what interrupted writes left.
    Clean {
        /// Dataset directory or URL.
        dataset: String,
        /// By URL, the least age in seconds of an unlisted object it removes (the host's
        /// default when `None`); a local dataset's writer lock makes age irrelevant.
        older_than: Option<u64>,
    },
    /// `copy SRC DST`: a dataset copied as one state (native host).
    Copy {
        /// The dataset (a directory or URL).
        src: String,
        /// The new copy (a directory or URL).
        dst: String,
    },
    /// `layout STORE dense|sparse`.
    Layout {
        /// Store or dataset directory.
        store: String,
        /// The layout to give it.
        layout: FileLayout,
    },
    /// `convert IN.npy|DIR|IN.npz OUT [--codec C] [--chunk-mib N] [--min-savings F]
    /// [--shard-records N]`.
    Convert {
        /// Input `.npy` file, or a directory of them, or an `.npz`.
        input: String,
        /// Output store directory.
        output: String,
        /// Codec for a new dataset, and the least fraction compression must save for a
        /// record to be stored compressed.
        policy: CodecPolicy,
        /// MiB of source per append.
        chunk_mib: usize,
        /// Samples per shard of a dataset of named fields (`None`: the writer's default).
        shard_records: Option<u64>,
        /// `--tokens DTYPE --eos ID`: the input is a flat token file, split into documents
        /// at each `ID` (the numpy dtype string and the id).
        tokens: Option<(&'static str, u64)>,
        /// `--skip-empty`: samples with an empty ragged field (empty documents) are left
        /// out and counted instead of failing the conversion.
        skip_empty: bool,
        /// `--tokenizer FILE [--text-field NAME] [--eos ID]`: the input is text, tokenized.
        text: Option<TextImport>,
        /// `--megatron`: the input is a Megatron-LM indexed dataset (`.bin` with `.idx`).
        megatron: bool,
        /// `--images`: the input is an ImageFolder tree (a folder of images per class).
        images: bool,
    },
    /// `push LOCAL URL`: a dataset or store into an object store (native host).
    Push {
        /// The local dataset or store directory.
        local: String,
        /// Where it goes (`s3://bucket/prefix`, ...).
        url: String,
    },
    /// `pull URL OUT`: a pushed dataset or store into a new local directory (native host).
    Pull {
        /// The pushed dataset's location.
        url: String,
        /// The new local directory.
        output: String,
    },
    /// `view DATASET|URL [--port N] [--site DIR] [--tokenizer FILE] [--index N]`: the
    /// dataset viewer's page served on 127.0.0.1 (native host).
    View {
        /// A local dataset directory, or the URL of a dataset folder.
        target: String,
        /// The port; 0 asks the system for a free one.
        port: u16,
        /// The page's files (built by `make view`); `None`: where the host finds them.
        site: Option<String>,
        /// A tokenizer.json to decode token fields with in the page.
        tokenizer: Option<String>,
        /// The first sample the page shows.
        index: u64,
    },
    /// `export STORE OUT.npy [--verify MODE]`.
    Export {
        /// Store directory.
        store: String,
        /// Output `.npy` file.
        output: String,
        /// When records are checked against their checksums.
        verify: Verify,
    },
    /// `--help`, `-h`, `help`.
    Help,
    /// `--version`, `-V`.
    Version,
}

/// A wrong command line: printed as one line, exit [`EXIT_ERROR`](crate::cli::EXIT_ERROR).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UsageError(pub String);

/// The token dtypes `convert --tokens` reads: the name it takes, the numpy dtype string.
pub const TOKEN_DTYPES: &[(&str, &str)] =
    &[("uint8", "|u1"), ("uint16", "<u2"), ("int32", "<i4"), ("uint32", "<u4"), ("int64", "<i8")];
