//! Writing a dataset: samples staged into the stores of new shards, rolled over at
//! [`WriteOptions::shard_records`], and published all at once by replacing the manifest.
//!
//! Order (what makes a crash or an error leave the old dataset intact):
//! 1. take the dataset's writer lock (`.zrecord-write.lock`, an exclusive `flock`); remove
//!    shard folders the manifest does not list (an earlier interrupted write's);
//! 2. create each new shard folder and its stores, stage every block into them;
//! 3. [`DatasetWriter::commit`]: commit (sync) every new store, then write the manifest
//!    beside its final name, sync it, rename it over `dataset.json`, sync the directory.
//!
//! Until step 3 renames, readers see the old dataset. A writer dropped without a commit
//! (an error, a panic, `KeyboardInterrupt` in Python) removes its new shard folders, and
//! the dataset's directory when it made it.
//! Samples are only ever added in new shards: a shard a manifest lists is never written
//! again, so a reader holding the old manifest reads exactly what it listed.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use zrecord_core::dataset::long::{piece_len, MAX_SAMPLE_LEN};
use zrecord_core::dataset::values::{self, ValueError};
use zrecord_core::dataset::{shard_dir, Field, FieldKind, Manifest, ShardEntry, MANIFEST_FILE};
use zrecord_core::error::{Error, FormatError, IoError};
use zrecord_core::format::FileLayout;
use zrecord_core::schema::SCHEMA_FILE;
use zrecord_core::stream::DatasetId;
use zrecord_core::{CodecPolicy, MAX_RECORDS};

use super::long::Spill;
use super::{Dataset, DatasetError, DatasetOptions};
use crate::{OpenOptions, Zrecord};

/// The writer lock's file name inside a dataset directory.
pub const WRITE_LOCK_FILE: &str = ".zrecord-write.lock";

/// How a dataset is written.
#[derive(Clone, Copy, Debug)]
pub struct WriteOptions {
    /// Samples per shard; a write rolls to a new shard when one is full (default and most:
    /// 2^24, the store's record limit).
    pub shard_records: u64,
    /// The least fraction compression must save for a record to be stored compressed
    /// ([`CodecPolicy`]; default [`zrecord_core::DEFAULT_MIN_SAVINGS`]).
    pub min_savings: f64,
    /// How the new shards' stores size their files (default [`FileLayout::Dense`]: files
    /// as long as what they hold, safe for any copy tool; [`FileLayout::Sparse`] makes
    /// each fixed field store one loaderx 0.5.4 opens).
    pub layout: FileLayout,
    /// What a sample with an empty ragged field (no element) does: a store holds no empty
    /// record, so by default the write fails naming it; `true` leaves such samples out
    /// (every field of them) and counts them ([`DatasetWriter::skipped`]). The one rule of
    /// every writer: `Dataset.write`, `zr convert`, parts.
    pub skip_empty: bool,
    /// What a write does to a dataset already at the path (default [`WriteMode::Append`],
    /// what `zr convert`, parts and Ray's sink do; Python's `Dataset.write` asks for
    /// [`WriteMode::Create`] unless told otherwise).
    pub mode: WriteMode,
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
            skip_empty: false,
            mode: WriteMode::Append,
        }
    }
}

/// A column rebuilt without some samples ([`DatasetWriter::write`] with `skip_empty`).
enum Kept {
    Fixed(Vec<u8>),
    Ragged(Vec<u8>, Vec<u64>),
}

impl Kept {
    fn column(&self) -> Column<'_> {
        match self {
            Kept::Fixed(bytes) => Column::Fixed(bytes),
            Kept::Ragged(values, offsets) => Column::Ragged { values, offsets },
        }
    }
}

/// One field's samples for [`DatasetWriter::write`].
#[derive(Clone, Copy, Debug)]
pub enum Column<'a> {
    /// The samples of a fixed field, back to back (`n * sample_len` bytes).
    Fixed(&'a [u8]),
    /// The samples of a ragged field: sample `k` is `values[offsets[k]..offsets[k + 1]]`
    /// (byte offsets, `n + 1` of them, Arrow's list layout).
    Ragged {
        /// Every sample's elements, back to back.
        values: &'a [u8],
        /// Byte offsets, `n + 1`, non-decreasing.
        offsets: &'a [u64],
    },
}

struct OpenShard {
    entry: ShardEntry,
    stores: Vec<Zrecord>,
    /// Per field, the continuation pieces of its samples longer than a record.
    spills: Vec<Spill>,
}

/// Adds samples to a dataset (creating it if needed); see the module docs.
pub struct DatasetWriter {
    path: PathBuf,
    manifest: Manifest,
    /// Shards listed when the writer opened; later entries are this writer's.
    listed: usize,
    current: Option<OpenShard>,
    /// How each field's columns are checked and staged.
    writes: Vec<FieldWrite>,
    options: WriteOptions,
    _lock: File,
    /// True when this writer made the dataset's directory: dropped without a commit, it
    /// removes the directory too, leaving nothing.
    created: bool,
    done: bool,
    /// A block failed half-staged: the stores may disagree, so nothing more is written.
    failed: bool,
    /// Shards moved in by [`DatasetWriter::adopt`]: (where they were, their new folder
    /// name), moved back if the writer is dropped without a commit.
    adopted: Vec<(PathBuf, String)>,
    /// Samples left out for an empty ragged field ([`WriteOptions::skip_empty`]).
    skipped: u64,
    /// The shard folders of the dataset an overwrite replaces, removed once the new
    /// manifest is published.
    replaced: Vec<String>,
}

pub(super) fn io_at<'a>(path: &'a Path, what: &str) -> impl Fn(std::io::Error) -> DatasetError + 'a {
    let what = what.to_owned();
    move |e| DatasetError::at(path, None, Error::Io(IoError::from_std(e, format!("{what} {}", path.display()))))
}

impl DatasetWriter {
    /// A writer adding samples of `fields` to the dataset in `path`: a new dataset when
    /// `path` holds none (the directory is created), or the existing one when its fields
    /// have the same names, kinds, dtypes and shapes (its codecs are kept).
    pub fn open(path: impl AsRef<Path>, fields: Vec<Field>, options: WriteOptions) -> Result<Self, DatasetError> {
        let path = path.as_ref().to_path_buf();
        let bad = |e: Error| DatasetError::at(&path, None, e);
        if options.shard_records == 0 || options.shard_records > u64::from(MAX_RECORDS) {
            return Err(bad(Error::InvalidArgument(format!(
                "shard_records must be in 1..={MAX_RECORDS}, got {}",
                options.shard_records
            ))));
        }
        // Fields the caller describes are arguments: a bad one is an invalid argument.
        let fresh = Manifest::new(fields).map_err(|e| bad(Error::InvalidArgument(e.to_string())))?;
        if path.join(SCHEMA_FILE).exists() || path.join(zrecord_core::format::META_FILE).exists() {
            return Err(bad(Error::InvalidArgument(format!(
                "{} holds a single-store (loaderx) dataset; write a multi-field dataset to another directory",
                path.display()
            ))));
        }
        let created = !path.exists();
        std::fs::create_dir_all(&path).map_err(io_at(&path, "create"))?;
        let lock_path = path.join(WRITE_LOCK_FILE);
        let Some(lock) = crate::lock::try_exclusive(&lock_path).map_err(io_at(&lock_path, "lock"))? else {
            return Err(bad(Error::Locked(format!("another writer is adding to {}", path.display()))));
        };
        let manifest_path = path.join(MANIFEST_FILE);
        let mut replaced = Vec::new();
        let manifest = if manifest_path.exists() {
            let existing = read_manifest(&manifest_path)?;
            // What an interrupted change left goes first (a new shard folder's name may be
            // one of them), judged against the dataset there: an overwrite's new manifest
            // lists none of the shards readers still read until its commit.
            remove_unlisted(&path, &existing, Depth::Shards)?;
            if options.mode == WriteMode::Create {
                return Err(bad(Error::InvalidArgument(format!(
                    "{} already holds a dataset of named fields ({} samples of {}): write with mode=\"append\" to \
                     add samples to it, or mode=\"overwrite\" to replace it",
                    path.display(),
                    existing.len(),
                    describe(&existing.fields)
                ))));
            }
            if options.mode == WriteMode::Overwrite {
                // A new dataset under the old one's folder: its shards take numbers the old
                // one never used, and nothing it had carries over (card, identity, history).
                replaced = existing.shards.iter().map(|s| s.dir.clone()).collect();
                Manifest { next_shard: existing.next_shard, ..fresh }
            } else if !existing.accepts(&fresh.fields) {
                return Err(bad(Error::InvalidArgument(format!(
                    "{} holds fields {}, cannot add samples of {} ({})",
                    path.display(),
                    describe(&existing.fields),
                    describe(&fresh.fields),
                    existing.field_differences(&fresh.fields)
                ))));
            } else {
                existing
            }
        } else {
            remove_unlisted(&path, &fresh, Depth::Shards)?;
            fresh
        };
        let writes = FieldWrite::all(&path, &manifest, &options)?;
        let listed = manifest.shards.len();
        Ok(DatasetWriter {
            path,
            manifest,
            listed,
            current: None,
            writes,
            options,
            _lock: lock,
            created,
            done: false,
            failed: false,
            adopted: Vec::new(),
            skipped: 0,
            replaced,
        })
    }

    /// The dataset's fields.
    pub fn fields(&self) -> &[Field] {
        &self.manifest.fields
    }

    /// Sets the dataset card the commit writes into the manifest (`docs/format.md`,
    /// "dataset.json"): a JSON object, at most 1 MiB; it replaces the card the dataset had.
    /// Without a call, the commit keeps the existing card.
    pub fn set_metadata(&mut self, json: &str) -> Result<(), DatasetError> {
        // Bad input from the caller, not a damaged file: an invalid argument.
        self.manifest
            .set_metadata(json)
            .map_err(|e| DatasetError::at(&self.path, None, Error::InvalidArgument(e.to_string())))
    }

    /// Samples the dataset will hold once committed (those already there included).
    pub fn len(&self) -> u64 {
        self.manifest.len() + self.current.as_ref().map_or(0, |c| c.entry.records)
    }

    /// True when the dataset will hold no sample.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Stages one block of samples: one column per field, in field order, all with the
    /// same number of samples. Nothing is visible to readers before [`DatasetWriter::commit`].
    /// Fails, naming the field (and sample), on a column of another length or kind, a
    /// ragged sample that is empty, not a whole number of elements, or over the 4 GiB
    /// sample limit (a sample longer than a record spans several: `long.rs`); the writer
    /// is then still usable (the block was not staged).
    pub fn write(&mut self, columns: &[Column<'_>]) -> Result<u64, DatasetError> {
        if self.options.skip_empty {
            if let Some((kept, skipped)) = self.without_empty(columns) {
                self.skipped += skipped;
                let borrowed: Vec<Column<'_>> = kept.iter().map(Kept::column).collect();
                return self.write_checked(&borrowed);
            }
        }
        self.write_checked(columns)
    }

    /// Samples left out so far for an empty ragged field ([`WriteOptions::skip_empty`]).
    pub fn skipped(&self) -> u64 {
        self.skipped
    }

    /// `columns` without the samples whose ragged (numeric) field is empty, and how many
    /// those were; `None` when there is none (or the columns are malformed: the check
    /// then names what is wrong).
    fn without_empty(&self, columns: &[Column<'_>]) -> Option<(Vec<Kept>, u64)> {
        let mut empty: Vec<bool> = Vec::new();
        for (column, write) in columns.iter().zip(&self.writes) {
            if let (Column::Ragged { offsets, .. }, false) = (column, write.field.has_stop_byte()) {
                empty.resize(offsets.len().saturating_sub(1), false);
                for (k, w) in offsets.windows(2).enumerate() {
                    empty[k] |= w[0] == w[1];
                }
            }
        }
        let skipped = empty.iter().filter(|&&e| e).count() as u64;
        if skipped == 0 {
            return None;
        }
        let mut kept = Vec::with_capacity(columns.len());
        for (column, write) in columns.iter().zip(&self.writes) {
            match (*column, write.sample_len) {
                (Column::Fixed(bytes), Some(size)) => {
                    let size = size as usize;
                    if bytes.len() != size * empty.len() {
                        return None;
                    }
                    let mut out = Vec::with_capacity(bytes.len());
                    for (k, sample) in bytes.chunks_exact(size).enumerate() {
                        if !empty[k] {
                            out.extend_from_slice(sample);
                        }
                    }
                    kept.push(Kept::Fixed(out));
                }
                (Column::Ragged { values, offsets }, None) => {
                    if offsets.len() != empty.len() + 1 {
                        return None;
                    }
                    let (mut out, mut at) = (Vec::with_capacity(values.len()), vec![0u64]);
                    for (k, w) in offsets.windows(2).enumerate() {
                        if !empty[k] {
                            out.extend_from_slice(values.get(w[0] as usize..w[1] as usize)?);
                            at.push(out.len() as u64);
                        }
                    }
                    kept.push(Kept::Ragged(out, at));
                }
                _ => return None,
            }
        }
        Some((kept, skipped))
    }

    fn write_checked(&mut self, columns: &[Column<'_>]) -> Result<u64, DatasetError> {
        if self.failed {
            return Err(DatasetError::at(
                &self.path,
                None,
                Error::InvalidArgument("an earlier block failed to stage; discard this writer and write again".into()),
            ));
        }
        let n = self.check(columns)?;
        let mut done = 0u64;
        while done < n {
            if self.current.is_none() {
                self.start_shard()?;
            }
            let shard_room = self.options.shard_records - self.current.as_ref().map_or(0, |c| c.entry.records);
            let k = self.long_room(columns, done as usize, shard_room.min(n - done));
            if k == 0 {
                let current = self.current.as_ref().expect("a shard was started above");
                if current.entry.records == 0 {
                    return Err(DatasetError::at(
                        &self.path,
                        None,
                        Error::InvalidArgument(format!("sample {} is too long for a store to hold", self.len())),
                    ));
                }
                // The store's record limit or the long index is full: the next shard.
                self.finish_shard()?;
                continue;
            }
            if let Err(e) = self.stage(columns, done as usize, (done + k) as usize) {
                self.failed = true;
                return Err(e);
            }
            done += k;
            let current = self.current.as_mut().expect("a shard was started above");
            current.entry.records += k;
            if current.entry.records == self.options.shard_records {
                self.finish_shard()?;
            }
        }
        Ok(n)
    }

    /// The number of samples in `columns`, after checking every one.
    fn check(&self, columns: &[Column<'_>]) -> Result<u64, DatasetError> {
        let fields = &self.manifest.fields;
        if columns.len() != fields.len() {
            return Err(DatasetError::at(
                &self.path,
                None,
                Error::InvalidArgument(format!(
                    "{} columns for {} fields ({})",
                    columns.len(),
                    fields.len(),
                    describe(fields)
                )),
            ));
        }
        let mut n: Option<(u64, &str)> = None;
        for ((field, column), write) in fields.iter().zip(columns).zip(&self.writes) {
            let bad = |what: String| DatasetError::at(&self.path, Some(&field.name), Error::InvalidArgument(what));
            let count = write.check(&self.path, self.len(), *column)?;
            match n {
                None => n = Some((count, &field.name)),
                Some((m, first)) if m != count => {
                    return Err(bad(format!("{count} samples, but field {first:?} has {m}")));
                }
                _ => {}
            }
        }
        let n = n.map_or(0, |(n, _)| n);
        if self.len().checked_add(n).is_none_or(|t| t > zrecord_core::dataset::MAX_SAMPLES) {
            return Err(DatasetError::at(&self.path, None, Error::StoreFull("a dataset holds at most 2^62 samples")));
        }
        Ok(n)
    }

    /// How many of the `k` samples of `columns` from `from` the open shard still takes,
    /// with the continuation pieces of samples longer than a record counted.
    fn long_room(&self, columns: &[Column<'_>], from: usize, k: u64) -> u64 {
        let current = self.current.as_ref().expect("a shard is open");
        let mut room = k;
        for ((column, write), spill) in columns.iter().zip(&self.writes).zip(&current.spills) {
            if let Column::Ragged { .. } = column {
                let lens = (from..from + room as usize).map(|j| write.record_len(*column, j));
                room = spill.room(current.entry.records, lens);
            }
        }
        room
    }

    fn stage(&mut self, columns: &[Column<'_>], from: usize, to: usize) -> Result<(), DatasetError> {
        let current = self.current.as_mut().expect("a shard is open");
        let first = current.entry.records;
        for (((column, store), write), spill) in
            columns.iter().zip(&current.stores).zip(&self.writes).zip(&mut current.spills)
        {
            write.stage(store, *column, from, to, spill, first)?;
        }
        Ok(())
    }

    fn start_shard(&mut self) -> Result<(), DatasetError> {
        let dir_name = shard_dir(self.manifest.next_shard);
        self.manifest.next_shard += 1;
        let dir = self.path.join(&dir_name);
        let mut stores = Vec::with_capacity(self.manifest.fields.len());
        let mut spills = Vec::with_capacity(self.manifest.fields.len());
        for write in &self.writes {
            stores.push(write.create_store(&dir, self.options.layout)?);
            spills.push(write.spill(&dir));
        }
        let entry = ShardEntry { dir: dir_name, records: 0, long: Vec::new() };
        self.current = Some(OpenShard { entry, stores, spills });
        Ok(())
    }

    /// Commits the open shard's stores (durable, not yet listed) and lists it.
    fn finish_shard(&mut self) -> Result<(), DatasetError> {
        let Some(mut shard) = self.current.take() else { return Ok(()) };
        for (f, (store, spill)) in shard.stores.iter().zip(shard.spills.drain(..)).enumerate() {
            let name = &self.manifest.fields[f].name;
            if spill.finish(store, self.writes[f].policy)? {
                shard.entry.long.push(name.clone());
            }
            store.commit().map_err(|e| DatasetError::at(store.path(), Some(name), e))?;
        }
        if shard.entry.records > 0 {
            self.manifest.shards.push(shard.entry);
        }
        Ok(())
    }

    /// Moves the shards of the committed dataset at `part` (the same fields, on the same
    /// file system: a [`super::part_dir`] of this dataset) in as new shards, listed at
    /// [`DatasetWriter::commit`]; returns its number of samples. Dropped without a commit,
    /// the writer moves them back.
    pub fn adopt(&mut self, part: &Path) -> Result<u64, DatasetError> {
        if self.failed {
            return Err(DatasetError::at(
                &self.path,
                None,
                Error::InvalidArgument("an earlier block failed to stage; discard this writer and write again".into()),
            ));
        }
        self.finish_shard()?;
        let theirs = super::parts::part_manifest(part)?;
        if !self.manifest.accepts(&theirs.fields) {
            return Err(DatasetError::at(
                part,
                None,
                Error::InvalidArgument(format!(
                    "holds fields {}, {} holds {}",
                    describe(&theirs.fields),
                    self.path.display(),
                    describe(&self.manifest.fields)
                )),
            ));
        }
        if self.len().checked_add(theirs.len()).is_none_or(|t| t > zrecord_core::dataset::MAX_SAMPLES) {
            return Err(DatasetError::at(&self.path, None, Error::StoreFull("a dataset holds at most 2^62 samples")));
        }
        for shard in &theirs.shards {
            let from = part.join(&shard.dir);
            let name = shard_dir(self.manifest.next_shard);
            self.manifest.next_shard += 1;
            let to = self.path.join(&name);
            std::fs::rename(&from, &to).map_err(io_at(&from, "move"))?;
            self.adopted.push((from, name.clone()));
            self.manifest.shards.push(ShardEntry { dir: name, records: shard.records, long: shard.long.clone() });
        }
        Ok(theirs.len())
    }

    /// Publishes every staged sample at once (see the module docs) and opens the result.
    pub fn commit(mut self) -> Result<Dataset, DatasetError> {
        if self.failed {
            return Err(DatasetError::at(
                &self.path,
                None,
                Error::InvalidArgument("a block failed to stage: nothing was committed".into()),
            ));
        }
        self.finish_shard()?;
        // A dataset whose identity is its rows' (a field was added or dropped): the new
        // shards' stores change it.
        let new: Vec<String> = self.manifest.shards[self.listed..].iter().map(|s| s.dir.clone()).collect();
        if self.listed > 0 && !new.is_empty() {
            // An append: a state saved on the dataset as it was resumes on it grown.
            let before = super::columns::prefix_identity(&self.path, &self.manifest, self.listed)?;
            self.manifest.grew_from(before);
            keep_rows(&mut self.manifest, before);
        }
        super::columns::fold_new_stores(&self.path, &mut self.manifest, &new)?;
        let synced = publish_then(&self.path, &self.manifest)?;
        // Renamed into place: the new shards are the dataset's now, whatever follows.
        self.done = true;
        synced?;
        // An overwrite: the old shards are no longer listed. One that cannot be removed
        // now is a leftover the next change removes (as after a crash here).
        for dir in std::mem::take(&mut self.replaced) {
            let _ = std::fs::remove_dir_all(self.path.join(dir));
        }
        let path = self.path.clone();
        drop(self);
        Dataset::open_with(&path, DatasetOptions { read_only: Some(true), ..DatasetOptions::default() })
    }

    /// Drops every staged sample and removes the new shard folders.
    pub fn discard(self) {}
}

/// Records `before`, the identity of the rows a dataset had before an append, as its row
/// identity (`Manifest::rows`) if it has none yet. The identity stays what the stores
/// give (the stores' generations fold left to right, so folding the new stores into the
/// old ones' fold is the fold of them all), and the next append reads it from the manifest
/// instead of opening every store: an append's cost does not grow with the shards.
pub(super) fn keep_rows(manifest: &mut Manifest, before: DatasetId) {
    manifest.rows.get_or_insert(before.generation);
}

/// One field's rules for a write: how its columns are checked, staged, and where its store
/// in a new shard comes from. Shared by [`DatasetWriter`] and the column adder
/// (`columns.rs`).
pub(super) struct FieldWrite {
    pub(super) field: Field,
    /// Bytes of a fixed field's sample (`None` for ragged, bytes and string fields).
    sample_len: Option<u64>,
    itemsize: u64,
    policy: CodecPolicy,
}

impl FieldWrite {
    /// The writes of every field of `manifest` (the dataset at `path`, which errors name).
    pub(super) fn all(
        path: &Path,
        manifest: &Manifest,
        options: &WriteOptions,
    ) -> Result<Vec<FieldWrite>, DatasetError> {
        let write = |f: &Field| FieldWrite::new(f, options).map_err(|e| DatasetError::at(path, Some(&f.name), e));
        manifest.fields.iter().map(write).collect()
    }

    pub(super) fn new(field: &Field, options: &WriteOptions) -> Result<FieldWrite, Error> {
        let codec = field.codec()?;
        Ok(FieldWrite {
            field: field.clone(),
            sample_len: field.sample_len()?,
            itemsize: field.itemsize()?,
            policy: CodecPolicy::new(codec, options.min_savings)?,
        })
    }

    /// The codec policy new records of the field are written under.
    pub(super) fn policy(&self) -> CodecPolicy {
        self.policy
    }

    /// Where the field's store in shard folder `shard` keeps the continuation pieces of
    /// samples longer than a record until the shard finishes.
    pub(super) fn spill(&self, shard: &Path) -> Spill {
        Spill::new(shard, &self.field.name, piece_len(self.itemsize))
    }

    /// The bytes sample `k` of a checked `column` takes as records (a bytes or string
    /// value's with its stop byte).
    pub(super) fn record_len(&self, column: Column<'_>, k: usize) -> u64 {
        match column {
            Column::Fixed(_) => self.sample_len.unwrap_or(0),
            Column::Ragged { offsets, .. } => offsets[k + 1] - offsets[k] + u64::from(self.field.has_stop_byte()),
        }
    }

    /// The number of samples in `column`, after checking every one; `first` numbers the
    /// first in messages. A bad column is an invalid argument naming the field.
    pub(super) fn check(&self, path: &Path, first: u64, column: Column<'_>) -> Result<u64, DatasetError> {
        let field = &self.field;
        let bad = |what: String| DatasetError::at(path, Some(&field.name), Error::InvalidArgument(what));
        match (column, self.sample_len) {
            (Column::Fixed(bytes), Some(size)) => {
                if !(bytes.len() as u64).is_multiple_of(size) {
                    return Err(bad(format!("{} bytes is not a whole number of {size}-byte samples", bytes.len())));
                }
                Ok(bytes.len() as u64 / size)
            }
            (Column::Ragged { values, offsets }, None) => {
                let Some(count) = offsets.len().checked_sub(1) else {
                    return Err(bad("a ragged column needs n + 1 offsets, got none".into()));
                };
                if field.has_stop_byte() {
                    self.check_values(path, first, values, offsets)?;
                } else {
                    self.check_ragged(path, first, values, offsets)?;
                }
                Ok(count as u64)
            }
            (Column::Fixed(_), None) => Err(bad("a ragged field needs values and offsets".into())),
            (Column::Ragged { .. }, Some(_)) => Err(bad("a fixed field needs an array of samples".into())),
        }
    }

    /// Checks a ragged column's samples: offsets in order and within the values, each
    /// sample non-empty, a whole number of elements and within the sample limit.
    fn check_ragged(&self, path: &Path, first: u64, values: &[u8], offsets: &[u64]) -> Result<(), DatasetError> {
        let field = &self.field;
        let bad = |what: String| DatasetError::at(path, Some(&field.name), Error::InvalidArgument(what));
        let item = self.itemsize;
        for (k, w) in offsets.windows(2).enumerate() {
            let sample = first + k as u64;
            if w[1] < w[0] || w[1] > values.len() as u64 {
                return Err(bad(format!(
                    "sample {sample}: offsets {}..{} are outside the {} value bytes",
                    w[0],
                    w[1],
                    values.len()
                )));
            }
            let len = w[1] - w[0];
            if len == 0 {
                return Err(bad(format!(
                    "sample {sample} is empty: a store holds no empty record; skip_empty=True \
                     (zr convert --skip-empty) leaves such samples out and counts them"
                )));
            }
            if !len.is_multiple_of(item) {
                return Err(bad(format!("sample {sample}: {len} bytes is not a whole number of elements")));
            }
            if len > MAX_SAMPLE_LEN {
                return Err(bad(format!(
                    "sample {sample} holds {} elements ({len} bytes), over the {MAX_SAMPLE_LEN}-byte sample limit",
                    len / item
                )));
            }
        }
        Ok(())
    }

    /// Checks a bytes, string or image column: offsets in order and within the values,
    /// every value at most [`values::MAX_VALUE_LEN`] bytes, a string field's values UTF-8,
    /// an image field's values JPEG, PNG or WebP with a size in their header.
    fn check_values(&self, path: &Path, first: u64, values: &[u8], offsets: &[u64]) -> Result<(), DatasetError> {
        let field = &self.field;
        let text = field.kind == FieldKind::String;
        let count = offsets.len().saturating_sub(1);
        values::check(values, offsets, 0, count, text).map(drop).map_err(|e| {
            let what = match e {
                ValueError::TooLong { sample, len } => format!(
                    "sample {}: {len} bytes is over the {}-byte limit of a {} value",
                    first + sample as u64,
                    values::MAX_VALUE_LEN,
                    field.kind.name()
                ),
                ValueError::NotUtf8 { sample, at } => {
                    format!("sample {}: not UTF-8 (the first bad byte is at {at})", first + sample as u64)
                }
                ValueError::BadOffsets { at } => {
                    format!("offset {at} is below the one before it or past the {} value bytes", values.len())
                }
            };
            DatasetError::at(path, Some(&field.name), Error::InvalidArgument(what))
        })?;
        if field.kind == FieldKind::Image {
            for (k, ends) in offsets.windows(2).enumerate() {
                if let Err(e) = zrecord_core::image::info(&values[ends[0] as usize..ends[1] as usize]) {
                    let what = format!("sample {}: {e}", first + k as u64);
                    return Err(DatasetError::at(path, Some(&field.name), Error::InvalidArgument(what)));
                }
            }
        }
        Ok(())
    }

    /// Stages samples `from..to` of a checked column into `store`, whose record `first` is
    /// sample `from`; a sample longer than a record stages its first piece and leaves the
    /// rest with `spill`.
    pub(super) fn stage(
        &self,
        store: &Zrecord,
        column: Column<'_>,
        from: usize,
        to: usize,
        spill: &mut Spill,
        first: u64,
    ) -> Result<(), DatasetError> {
        let at = |e: Error| DatasetError::at(store.path(), Some(&self.field.name), e);
        match column {
            Column::Fixed(bytes) => {
                let size = self.sample_len.expect("checked: a fixed field") as usize;
                let src = &bytes[from * size..to * size];
                store.stage_with(src, to - from, size, self.policy).map_err(at)?;
            }
            Column::Ragged { values, offsets } if self.field.has_stop_byte() => {
                // Checked already (`check_values`): only the stop bytes to add.
                let r = values::records(values, offsets, from, to, false)
                    .map_err(|e| at(Error::InvalidArgument(format!("{e:?}"))))?;
                self.stage_records(store, &r.bytes, &r.starts, &r.lens, spill, first)?;
            }
            Column::Ragged { values, offsets } => {
                let starts = &offsets[from..to];
                let lens: Vec<u32> = offsets[from..=to].windows(2).map(|w| (w[1] - w[0]) as u32).collect();
                self.stage_records(store, values, starts, &lens, spill, first)?;
            }
        }
        Ok(())
    }

    /// Stages records `bytes[starts[k]..][..lens[k]]`, each over a record's length cut to
    /// its first piece, the rest kept by `spill` (record `first + k`).
    fn stage_records(
        &self,
        store: &Zrecord,
        bytes: &[u8],
        starts: &[u64],
        lens: &[u32],
        spill: &mut Spill,
        first: u64,
    ) -> Result<(), DatasetError> {
        let at = |e: Error| DatasetError::at(store.path(), Some(&self.field.name), e);
        let piece = spill.piece();
        if lens.iter().all(|&len| u64::from(len) <= piece) {
            store.stage_var_with(bytes, starts, lens, self.policy).map_err(at)?;
            return Ok(());
        }
        let cut: Vec<u32> = lens.iter().map(|&len| u64::from(len).min(piece) as u32).collect();
        store.stage_var_with(bytes, starts, &cut, self.policy).map_err(at)?;
        for (k, (&start, &len)) in starts.iter().zip(lens).enumerate() {
            if u64::from(len) > piece {
                spill.add(first + k as u64, &bytes[(start + piece) as usize..(start + u64::from(len)) as usize])?;
            }
        }
        Ok(())
    }

    /// The field's new store in shard folder `shard` (with loaderx's `schema.json` for a
    /// fixed field, so that its store is a loaderx dataset on its own).
    pub(super) fn create_store(&self, shard: &Path, layout: FileLayout) -> Result<Zrecord, DatasetError> {
        let store_dir = shard.join(&self.field.name);
        let at = |e: Error| DatasetError::at(&store_dir, Some(&self.field.name), e);
        let options = OpenOptions { codec: self.policy.codec, layout, ..OpenOptions::default() };
        let store = Zrecord::open_with(&store_dir, options).map_err(at)?;
        if let Some(schema) = self.field.schema() {
            let schema_path = store_dir.join(SCHEMA_FILE);
            std::fs::write(&schema_path, schema.to_json()).map_err(io_at(&schema_path, "write"))?;
        }
        Ok(store)
    }
}

impl Drop for DatasetWriter {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        if let Some(shard) = self.current.take() {
            for store in &shard.stores {
                store.discard();
            }
            drop(shard.stores);
            let _ = std::fs::remove_dir_all(self.path.join(&shard.entry.dir));
        }
        for (from, name) in self.adopted.drain(..) {
            let _ = std::fs::rename(self.path.join(&name), from);
        }
        for entry in &self.manifest.shards[self.listed..] {
            let _ = std::fs::remove_dir_all(self.path.join(&entry.dir));
        }
        if self.created {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

/// What a change that wrote the new shard folders `made` and then published (the outcome
/// of a [`publish_then`], or an earlier failure) leaves: not published, the folders go;
/// published, they stay, being listed, even when the sync after the rename failed.
pub(super) fn settle(
    result: Result<Result<(), DatasetError>, DatasetError>,
    made: &[PathBuf],
) -> Result<(), DatasetError> {
    match result {
        Err(e) => {
            for dir in made {
                let _ = std::fs::remove_dir_all(dir);
            }
            Err(e)
        }
        Ok(synced) => synced,
    }
}

/// Takes the writer lock of the existing dataset at `path`, reads its manifest and removes
/// what an interrupted change left (for changes to it: fields added or dropped, samples
/// deleted).
pub(super) fn lock_existing(path: &Path) -> Result<(File, Manifest), DatasetError> {
    let (lock, manifest) = lock_dataset(path)?;
    // What an interrupted change left (unlisted shard and field folders) goes first: a new
    // shard folder's name may be one of them.
    remove_unlisted(path, &manifest, Depth::Fields)?;
    Ok((lock, manifest))
}

/// Takes the writer lock of the existing dataset at `path` and reads its manifest.
fn lock_dataset(path: &Path) -> Result<(File, Manifest), DatasetError> {
    let bad = |e: Error| DatasetError::at(path, None, e);
    let manifest_path = path.join(MANIFEST_FILE);
    if !manifest_path.is_file() {
        return Err(bad(Error::InvalidArgument(format!(
            "{} is not a dataset of named fields (no {MANIFEST_FILE}): write one with Dataset.write first",
            path.display()
        ))));
    }
    let lock_path = path.join(WRITE_LOCK_FILE);
    let Some(lock) = crate::lock::try_exclusive(&lock_path).map_err(io_at(&lock_path, "lock"))? else {
        return Err(bad(Error::Locked(format!("another writer is changing {}", path.display()))));
    };
    let manifest = read_manifest(&manifest_path)?;
    Ok((lock, manifest))
}

/// Reads and checks the manifest at `manifest_path`; its errors name the file.
pub(super) fn read_manifest(manifest_path: &Path) -> Result<Manifest, DatasetError> {
    let bytes = super::read_meta_file(manifest_path, zrecord_core::dataset::MAX_MANIFEST_LEN)
        .map_err(|e| DatasetError::in_metadata(manifest_path, e))?;
    Manifest::from_json(&bytes).map_err(|e| DatasetError::in_metadata(manifest_path, e))
}

/// Writes `manifest` beside `dataset.json`, syncs it, renames it over `dataset.json` and
/// syncs the directory: the commit point of every change to a dataset.
pub(super) fn publish(path: &Path, manifest: &Manifest) -> Result<(), DatasetError> {
    publish_then(path, manifest)?
}

/// [`publish`], telling its two failures apart: the outer error means the manifest was
/// not renamed into place (nothing changed); the inner one that it was (readers see the
/// change) but the directory's sync failed. After an inner error the change must be kept
/// as committed: its new shards are listed and must not be removed.
pub(super) fn publish_then(path: &Path, manifest: &Manifest) -> Result<Result<(), DatasetError>, DatasetError> {
    let text = manifest.to_json();
    let final_path = path.join(MANIFEST_FILE);
    let tmp = path.join(format!(".{MANIFEST_FILE}.tmp"));
    let mut file = File::create(&tmp).map_err(io_at(&tmp, "create"))?;
    file.write_all(text.as_bytes()).map_err(io_at(&tmp, "write"))?;
    file.sync_all().map_err(io_at(&tmp, "sync"))?;
    drop(file);
    std::fs::rename(&tmp, &final_path).map_err(io_at(&final_path, "rename into"))?;
    Ok(File::open(path).and_then(|d| d.sync_all()).map_err(io_at(path, "sync")))
}

/// What interrupted changes left in the dataset directory `path` beside `manifest`: the
/// `shard-*` folders it does not list, the folders in listed shards that name no field of
/// it (an interrupted add_field's, a dropped field's not yet removed) and a manifest
/// written beside but never renamed. Each with the bytes it takes on disk. Without the
/// writer lock, a write in progress looks the same.
pub fn leftovers(path: &Path, manifest: &Manifest) -> Result<Vec<(PathBuf, u64)>, DatasetError> {
    Ok(unlisted(path, manifest, Depth::Fields)?
        .into_iter()
        .map(|p| {
            let size = disk_bytes(&p);
            (p, size)
        })
        .collect())
}

/// How far a look for [`leftovers`] goes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Depth {
    /// The dataset folder: unlisted shard folders and a manifest never renamed. What a
    /// write must clear (a new shard folder's name may be one of them), at a cost that
    /// does not grow with the shards listed.
    Shards,
    /// Also every listed shard's folder: the folders there that name no field. What the
    /// changes that touch every shard anyway (fields added or dropped, deletes) and
    /// `zr clean` clear; an interrupted add of a field is cleared again by the next add
    /// of that field, so a write may leave them.
    Fields,
}

/// The paths [`leftovers`] lists, looked for as far as `depth` says.
fn unlisted(path: &Path, manifest: &Manifest, depth: Depth) -> Result<Vec<PathBuf>, DatasetError> {
    let mut out = Vec::new();
    let listed: std::collections::HashSet<&str> = manifest.shards.iter().map(|s| s.dir.as_str()).collect();
    let entries = std::fs::read_dir(path).map_err(io_at(path, "list"))?;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if name.starts_with("shard-") && !listed.contains(name) {
            out.push(entry.path());
        }
    }
    for shard in manifest.shards.iter().filter(|_| depth == Depth::Fields) {
        let Ok(entries) = std::fs::read_dir(path.join(&shard.dir)) else { continue };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if entry.path().is_dir() && manifest.field_index(name).is_none() {
                out.push(entry.path());
            }
        }
    }
    let tmp = path.join(format!(".{MANIFEST_FILE}.tmp"));
    if tmp.exists() {
        out.push(tmp);
    }
    out.sort();
    Ok(out)
}

/// The bytes `path` (a file, or a folder and all it holds) takes on disk: allocated
/// blocks, so a sparse file counts what it holds, not its length.
fn disk_bytes(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::symlink_metadata(path) else { return 0 };
    if !meta.is_dir() {
        return meta.blocks() * 512;
    }
    let Ok(entries) = std::fs::read_dir(path) else { return 0 };
    entries.flatten().map(|e| disk_bytes(&e.path())).sum()
}

/// Removes the [`leftovers`] of the dataset at `path` under its writer lock (so that no
/// write is in progress) and returns what they were.
pub fn remove_leftovers(path: &Path) -> Result<Vec<(PathBuf, u64)>, DatasetError> {
    let (_lock, manifest) = lock_dataset(path)?;
    let found = leftovers(path, &manifest)?;
    remove_unlisted(path, &manifest, Depth::Fields)?;
    Ok(found)
}

/// Removes what an interrupted write left ([`leftovers`]; the writer lock is held, so no
/// other writer is filling them).
fn remove_unlisted(path: &Path, manifest: &Manifest, depth: Depth) -> Result<(), DatasetError> {
    for leftover in unlisted(path, manifest, depth)? {
        let removed =
            if leftover.is_dir() { std::fs::remove_dir_all(&leftover) } else { std::fs::remove_file(&leftover) };
        removed.map_err(io_at(&leftover, "remove leftover"))?;
    }
    Ok(())
}

/// The fields, as errors show them.
pub(crate) fn describe(fields: &[Field]) -> String {
    let parts: Vec<String> = fields.iter().map(|f| format!("{}: {}", f.name, f.type_name())).collect();
    format!("[{}]", parts.join(", "))
}

impl From<FormatError> for DatasetError {
    fn from(e: FormatError) -> Self {
        DatasetError::at(Path::new("."), None, e)
    }
}
