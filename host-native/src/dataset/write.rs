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
use std::path::{Path, PathBuf};

use zrecord_core::dataset::{shard_dir, Field, Manifest, ShardEntry, MANIFEST_FILE};
use zrecord_core::error::Error;
use zrecord_core::schema::SCHEMA_FILE;
use zrecord_core::MAX_RECORDS;

use super::field_write::{Column, FieldWrite};
use super::long::Spill;
use super::manifest_io::{describe, io_at, publish_then, read_manifest, remove_unlisted, Depth, WRITE_LOCK_FILE};
use super::options::{WriteMode, WriteOptions};
use super::{Dataset, DatasetError, DatasetOptions};
use crate::Zrecord;

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
        let (lock, created) = wait_for_lock(&path, options.lock_wait)?;
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
            if spill.finish(store, self.writes[f].policy())? {
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
        let theirs = super::manifest_io::part_manifest(part)?;
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
            let before = super::identity::prefix_identity(&self.path, &self.manifest, self.listed)?;
            self.manifest.grew_from(before);
            super::identity::keep_rows(&mut self.manifest, before);
        }
        super::identity::fold_new_stores(&self.path, &mut self.manifest, &new)?;
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

/// Takes the writer lock of the dataset at `path` (creating the folder if needed), waiting
/// up to `wait` while another writer holds it. Returns the lock and whether this call
/// made the folder (a writer that fails removes only a folder it made). A lock file taken
/// after its folder was removed (the writer before, which had made it, failed) is no one's
/// lock: the folder is made again and the lock taken there.
fn wait_for_lock(path: &Path, wait: std::time::Duration) -> Result<(File, bool), DatasetError> {
    let start = std::time::Instant::now();
    let lock_path = path.join(WRITE_LOCK_FILE);
    let mut pause = std::time::Duration::from_millis(5);
    loop {
        let created = !path.exists();
        std::fs::create_dir_all(path).map_err(io_at(path, "create"))?;
        if let Some(lock) = crate::lock::try_exclusive(&lock_path).map_err(io_at(&lock_path, "lock"))? {
            if still_there(&lock, &lock_path) {
                return Ok((lock, created));
            }
            continue;
        }
        let waited = start.elapsed();
        if waited >= wait {
            let what = match wait.is_zero() {
                true => format!("another writer is adding to {}", path.display()),
                false => format!(
                    "another writer has been adding to {} for the {:.1} s this write waited; wait longer (timeout=) \
                     or find the writer that holds {}",
                    path.display(),
                    waited.as_secs_f64(),
                    lock_path.display()
                ),
            };
            return Err(DatasetError::at(path, None, Error::Locked(what)));
        }
        std::thread::sleep(pause.min(wait - waited));
        pause = (pause * 2).min(std::time::Duration::from_millis(100));
    }
}

/// True when `lock` is the file at `path` now (not one unlinked with its folder).
fn still_there(lock: &File, path: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        match (lock.metadata(), std::fs::metadata(path)) {
            (Ok(a), Ok(b)) => a.ino() == b.ino() && a.dev() == b.dev(),
            _ => false,
        }
    }
    #[cfg(not(unix))]
    {
        let _ = lock;
        path.exists()
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
