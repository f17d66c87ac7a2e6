//! What a front end supplies to run the command line: the [`Host`] trait and the types it
//! takes and returns (what is at a path, how a store is opened, a closed stdout, the options
//! and outcome of a dataset import).

use alloc::string::String;
use alloc::vec::Vec;

use zrecord_core::codec::CodecPolicy;
use zrecord_core::engine::{Store, Verify, Writer};
use zrecord_core::error::Error;
use zrecord_core::io::{Backend, StorageFile};

use super::Failure;

/// What is at a path on the host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PathKind {
    /// A directory.
    Dir,
    /// Something that is not a directory (a file, a device...).
    File,
    /// Nothing, but its parent directory exists.
    Missing,
    /// Nothing, and neither is its parent directory.
    MissingParent,
}

/// How a store is opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// An existing store, read-only.
    Read,
    /// An existing store, writable.
    Write,
    /// Writable, created if the directory holds none.
    Create,
}

/// stdout was closed by its reader (`zr verify s | head -1`): stop writing, quietly.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Closed;

/// What a front end supplies: files, paths, progress display and the two output streams.
/// Every method that can fail returns the core's [`Error`]; [`run`](super::run) adds which
/// path it was about and prints it.
pub trait Host {
    /// The store backend.
    type Backend: Backend;
    /// A single file (`convert`'s input, `export`'s output).
    type File: StorageFile;

    /// What is at `path`.
    fn kind(&self, path: &str) -> PathKind;
    /// How to name `path` to the user: what they typed.
    fn shown(&self, path: &str) -> String;
    /// Opens the store in directory `path` (which [`Host::kind`] said is a directory, or,
    /// for [`Access::Create`], a directory made by [`Host::stage_store`]).
    fn open_store(&mut self, path: &str, access: Access) -> Result<(Store<Self::Backend>, Writer), Error>;
    /// Opens the existing file `path` for reading.
    fn open_input(&mut self, path: &str) -> Result<Self::File, Error>;
    /// True when `path` is a directory with nothing in it: a new store or dataset is then
    /// built beside it and moved over it, as for a missing path, so that a failure leaves
    /// it empty. Hosts that cannot tell keep the default (written in place).
    fn is_empty_dir(&self, path: &str) -> bool {
        let _ = path;
        false
    }
    /// Makes a new empty directory beside `path` (creating missing parents) where a new
    /// store is built; returns its path, which [`Host::commit`] moves to `path` (replacing
    /// an empty directory there).
    fn stage_store(&mut self, path: &str) -> Result<String, Error>;
    /// Creates a new empty file beside `path` for output; returns it and its path, which
    /// [`Host::commit`] moves to `path`.
    fn stage_file(&mut self, path: &str) -> Result<(Self::File, String), Error>;
    /// Moves what was staged at `staged` to `path`, replacing a file there.
    fn commit(&mut self, staged: &str, path: &str) -> Result<(), Error>;
    /// Removes what was staged at `staged` and anything its staging created.
    fn discard(&mut self, staged: &str);
    /// Reports progress of a long step (`what` is `verify`, `convert`...): `done` of
    /// `total` records. Called with `done == total` at the end.
    fn progress(&mut self, what: &str, done: u64, total: u64);
    /// Writes `text` to stdout.
    fn out(&mut self, text: &str) -> Result<(), Closed>;
    /// Writes `text` to stderr.
    fn err(&mut self, text: &str);

    /// True when the host has a dataset writer for [`Host::import_fields`] and
    /// [`Host::export_fields`] (the native `zr` does; the default says no, and `convert`
    /// and `export` of datasets then fail before they create anything).
    fn has_fields_io(&self) -> bool {
        false
    }

    /// `convert` of a directory of `.npy` files or an `.npz` (`input`) into the dataset of
    /// named fields in directory `output` (an existing one, or a new directory made by
    /// [`Host::stage_store`]).
    fn import_fields(&mut self, input: &str, output: &str, options: &FieldImport) -> Result<FieldsDone, Failure> {
        let _ = (output, options);
        Err(Failure::new(self.shown(input), NO_FIELDS_IO))
    }

    /// `push` of the dataset or store in `local` to the object store location `url`;
    /// returns the line to print. The default says this host cannot.
    fn push(&mut self, local: &str, url: &str) -> Result<String, Failure> {
        let _ = url;
        Err(Failure::new(self.shown(local), NO_REMOTE))
    }

    /// `pull` of the dataset or store pushed to `url` into `output`, a directory made by
    /// [`Host::stage_store`]; returns the number of files. The default says this host
    /// cannot.
    fn pull(&mut self, url: &str, output: &str) -> Result<u64, Failure> {
        let _ = output;
        Err(Failure::new(url.into(), NO_REMOTE))
    }

    /// `view` of `target` (a dataset directory or URL): serves the viewer's page until
    /// interrupted, having written its URL to stdout ([`Host::out`]). The default says this
    /// host cannot.
    fn view(&mut self, target: &str, options: &ViewOptions) -> Result<(), Failure> {
        let _ = options;
        Err(Failure::new(target.into(), NO_VIEW))
    }

    /// `delete` of samples `indices` (any order, repeats allowed) of the dataset of named
    /// fields at `dataset` (a directory or URL), every field of them; returns the samples
    /// deleted and the samples left. The default says this host cannot.
    fn delete_samples(&mut self, dataset: &str, indices: &[u64]) -> Result<(u64, u64), Failure> {
        let _ = indices;
        Err(Failure::new(self.shown(dataset), NO_FIELDS_IO))
    }

    /// `copy` of the dataset of named fields (or pushed dataset) at `src` to the new `dst`,
    /// a directory or URL, as one consistent state while writers change it; returns the
    /// line to print. The default says this host cannot.
    fn copy(&mut self, src: &str, dst: &str) -> Result<String, Failure> {
        let _ = dst;
        Err(Failure::new(self.shown(src), NO_FIELDS_IO))
    }

    /// `compact` of the dataset of named fields at `dataset`: neighbouring shards merged
    /// into shards of at most `target_rows` samples; returns the line to print. The default
    /// says this host cannot.
    fn compact_dataset(&mut self, dataset: &str, target_rows: u64) -> Result<String, Failure> {
        let _ = target_rows;
        Err(Failure::new(self.shown(dataset), NO_FIELDS_IO))
    }

    /// The manifest of the dataset at `dir` when the host holds it other than as the file
    /// `dir/dataset.json` (an object store's listing of version 2 carries it inline, and
    /// every change to a dataset in a bucket writes one), as the manifest's JSON bytes.
    /// `None`: read the file. Hosts without such datasets keep the default.
    fn inline_manifest(&mut self, dir: &str) -> Result<Option<Vec<u8>>, Failure> {
        let _ = dir;
        Ok(None)
    }

    /// What interrupted writes left in the dataset directory `dataset`: folders and files
    /// its manifest does not name, each with its size in bytes (as the path the user
    /// would type). With `remove`, they are removed under the dataset's writer lock first
    /// (`clean`); `older_than` is `clean --older-than` (used where there is no lock: an
    /// object store). Hosts that cannot list a directory keep the default: none, and
    /// `clean` says it cannot.
    fn leftovers(
        &mut self,
        dataset: &str,
        remove: bool,
        older_than: Option<u64>,
    ) -> Result<Vec<(String, u64)>, Failure> {
        let _ = older_than;
        if remove {
            return Err(Failure::new(self.shown(dataset), NO_FIELDS_IO));
        }
        Ok(Vec::new())
    }

    /// `export` of the dataset of named fields in directory `dataset` into `output`: a
    /// directory made by [`Host::stage_store`] (`npz` false) or a file made by
    /// [`Host::stage_file`] (`npz` true). Returns the number of samples.
    fn export_fields(&mut self, dataset: &str, output: &str, npz: bool, verify: Verify) -> Result<u64, Failure> {
        let _ = (output, npz, verify);
        Err(Failure::new(self.shown(dataset), NO_FIELDS_IO))
    }
}

/// What a host that serves no page says to `view`.
pub const NO_VIEW: &str = "view needs the native zr (it serves a page to a browser)";

/// `view`'s options ([`Host::view`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ViewOptions {
    /// The port; 0 for a free one.
    pub port: u16,
    /// The page's files; `None`: where the host finds them.
    pub site: Option<String>,
    /// A tokenizer.json for the page.
    pub tokenizer: Option<String>,
    /// The first sample shown.
    pub index: u64,
}

/// What a host without an object store client says to `push` and `pull`.
pub const NO_REMOTE: &str = "push and pull need the native zr (this zr reads no object store)";

/// What a host without a dataset writer says to `convert DIR|IN.npz` and `export DATASET`.
pub const NO_FIELDS_IO: &str =
    "converting or exporting a dataset of named fields needs the native zr (this zr has no dataset writer)";

/// How [`Host::import_fields`] writes.
#[derive(Clone, Debug, PartialEq)]
pub struct FieldImport {
    /// The codec of a new dataset's fields and the compression threshold.
    pub policy: CodecPolicy,
    /// MiB of input per block.
    pub chunk_mib: usize,
    /// Samples per shard (`None`: the writer's default, the store's record limit).
    pub shard_records: Option<u64>,
    /// A flat token file (numpy dtype string, end-of-document id) instead of `.npy` files.
    pub tokens: Option<(&'static str, u64)>,
    /// Leave out samples with an empty ragged field, counted, instead of failing.
    pub skip_empty: bool,
    /// Text to tokenize (`--tokenizer`) instead of `.npy` files.
    pub text: Option<TextImport>,
    /// A Megatron-LM indexed dataset (`--megatron`) instead of `.npy` files.
    pub megatron: bool,
    /// An ImageFolder tree (`--images`) instead of `.npy` files.
    pub images: bool,
}

/// `zr convert TEXT OUT --tokenizer FILE [--text-field NAME] [--eos ID]`: what to tokenize
/// with ([`Host::import_fields`]; the native host's).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TextImport {
    /// The `tokenizer.json` file.
    pub tokenizer: String,
    /// The JSON key of each line's text.
    pub text_field: String,
    /// An id put after every document.
    pub eos: Option<u32>,
    /// Keep no field of the JSON objects but the tokens.
    pub tokens_only: bool,
}

/// What [`Host::import_fields`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FieldsDone {
    /// Samples added.
    pub added: u64,
    /// Samples the dataset holds now.
    pub samples: u64,
    /// Its fields.
    pub fields: usize,
    /// Its shards.
    pub shards: usize,
}
