//! Columns added to and dropped from a dataset without rewriting the others
//! ([`FieldAdder`], [`drop_field`]); in an object store, the adder's stores go up as
//! `remote_edit.rs` describes ([`FieldAdder::open_remote`]).
//!
//! A new field is one new store per listed shard (`<shard>/<field>/`), filled in index
//! order with exactly the shard's record count, committed, and published by the manifest
//! (written beside, renamed over `dataset.json`) listing the field: until then readers see
//! the old fields, and a crash leaves unlisted field folders that the next add removes. A
//! dropped field leaves the manifest first; its folders go after. Both take the dataset's
//! writer lock.
//!
//! The manifest's `rows` ([`Manifest::rows`]) keeps the dataset's identity across the
//! change: states saved before it resume after it, since a stream reads rows, not columns.

use std::fs::File;
use std::path::{Path, PathBuf};

use zrecord_core::dataset::{Field, Manifest};
use zrecord_core::error::Error;

use super::field_write::FieldWrite;
use super::long::Spill;
use super::manifest_io::{io_at, lock_existing, publish};
use super::remote_edit::{discard_uploads, read_dataset, replace, Listed, Scratch};
use super::{Column, Dataset, DatasetError, DatasetOptions, RemoteOptions, WriteOptions};
use crate::remote::push::upload_tree;
use crate::remote::Remote;
use crate::Zrecord;

/// Adds one field to every sample of an existing local dataset; see the module docs.
/// Write its samples in index order with [`FieldAdder::write`], then
/// [`FieldAdder::commit`]. Dropped without a commit, it removes what it wrote.
pub struct FieldAdder {
    path: PathBuf,
    manifest: Manifest,
    write: FieldWrite,
    options: WriteOptions,
    /// The shard being filled and its store.
    shard: usize,
    store: Option<Zrecord>,
    /// The continuation pieces of the current store's samples longer than a record.
    spill: Option<Spill>,
    /// Samples staged into the current shard's store, and in all.
    in_shard: u64,
    written: u64,
    /// The dataset's identity before the change (what `rows` keeps).
    rows: u64,
    /// Shard folders holding a store of the new field.
    made: Vec<PathBuf>,
    done: bool,
    /// The local dataset's writer lock, held until the adder is done.
    _lock: Option<File>,
    /// A dataset in an object store: where the stores go up on commit (`path` is then a
    /// scratch folder).
    remote: Option<RemoteTarget>,
}

/// The dataset in an object store a [`FieldAdder`] adds to, as it read it.
struct RemoteTarget {
    remote: Remote,
    listed: Listed,
    _scratch: Scratch,
}

impl FieldAdder {
    /// An adder of `field` to the dataset at `path`, its stores compressed under
    /// `options.min_savings` and laid out as the dataset's stores are (dense or sparse;
    /// `options.layout` and `shard_records` do not apply).
    pub fn open(path: impl AsRef<Path>, field: Field, options: WriteOptions) -> Result<FieldAdder, DatasetError> {
        let path = path.as_ref().to_path_buf();
        let (lock, manifest) = lock_existing(&path)?;
        let ds = Dataset::open_with(&path, DatasetOptions { read_only: Some(true), ..DatasetOptions::default() })?;
        let (rows, layout) = (ds.id()?.generation, ds.stores_layout()?);
        drop(ds);
        // Checks the field first: a field the dataset has is no leftover.
        let adder = Self::start(path, manifest, field, WriteOptions { layout, ..options }, rows, Some(lock), None)?;
        // Folders of this name in listed shards are an interrupted add's: not listed, so
        // no reader uses them.
        for shard in &adder.manifest.shards {
            let leftover = adder.path.join(&shard.dir).join(&adder.write.field.name);
            if leftover.exists() {
                std::fs::remove_dir_all(&leftover).map_err(io_at(&leftover, "remove leftover field"))?;
            }
        }
        Ok(adder)
    }

    /// An adder of `field` to the dataset of named fields in an object store at `remote`
    /// (see `remote_edit.rs`): the stores are written in a scratch folder and, on commit,
    /// uploaded under names of this write (each listed at its field's path with its
    /// [`Object::key`](crate::remote::objects::Object::key)), then the listing that names
    /// them replaces the one read here, if no other writer's came first.
    pub fn open_remote(remote: &Remote, field: Field, options: WriteOptions) -> Result<FieldAdder, DatasetError> {
        let listed = read_dataset(remote, "add a field to")?;
        let ds = Dataset::open_remote_in(remote, RemoteOptions::default())?;
        let rows = super::identity::remote_identity(remote, &listed.manifest, Some(&ds))?.generation;
        let layout = ds.stores_layout()?;
        let scratch = Scratch::new("add-field")?;
        let manifest = listed.manifest.clone();
        let target = RemoteTarget { remote: remote.clone(), listed, _scratch: scratch };
        let path = target._scratch.path().to_path_buf();
        Self::start(path, manifest, field, WriteOptions { layout, ..options }, rows, None, Some(target))
    }

    fn start(
        path: PathBuf,
        manifest: Manifest,
        field: Field,
        options: WriteOptions,
        rows: u64,
        lock: Option<File>,
        remote: Option<RemoteTarget>,
    ) -> Result<FieldAdder, DatasetError> {
        let bad = |e: Error| DatasetError::at(&path, Some(&field.name), e);
        // Fields the caller describes are arguments: a bad one is an invalid argument.
        manifest.clone().add_field(field.clone(), 0).map_err(|e| bad(Error::InvalidArgument(e.to_string())))?;
        let write = FieldWrite::new(&field, &options).map_err(bad)?;
        Ok(FieldAdder {
            path,
            manifest,
            write,
            options,
            shard: 0,
            store: None,
            spill: None,
            in_shard: 0,
            written: 0,
            rows,
            made: Vec::new(),
            done: false,
            _lock: lock,
            remote,
        })
    }

    /// Samples the dataset holds: what the new field must hold.
    pub fn len(&self) -> u64 {
        self.manifest.len()
    }

    /// True when the dataset holds no sample.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Samples written so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Stages the next samples of the field (in index order), rolling from shard to shard
    /// at each one's record count. A column past the dataset's length, or a bad one, is an
    /// invalid argument naming the field; nothing of it is staged.
    pub fn write(&mut self, column: Column<'_>) -> Result<u64, DatasetError> {
        let n = self.write.check(&self.path, self.written, column)?;
        if self.written + n > self.len() {
            return Err(DatasetError::at(
                &self.path,
                Some(&self.write.field.name),
                Error::InvalidArgument(format!("{} samples given, the dataset holds {}", self.written + n, self.len())),
            ));
        }
        let mut done = 0u64;
        while done < n {
            // Empty shards hold no sample but get the field's (empty) store all the same.
            while self.in_shard == self.manifest.shards[self.shard].records {
                self.next_shard()?;
            }
            let room = self.manifest.shards[self.shard].records - self.in_shard;
            let k = room.min(n - done);
            if self.store.is_none() {
                let dir = self.path.join(&self.manifest.shards[self.shard].dir);
                self.store = Some(self.write.create_store(&dir, self.options.layout)?);
                self.spill = Some(self.write.spill(&dir));
                self.made.push(dir);
            }
            let store = self.store.as_ref().expect("made above");
            let spill = self.spill.as_mut().expect("made with the store");
            let lens = (done as usize..(done + k) as usize).map(|j| self.write.record_len(column, j));
            if spill.room(self.in_shard, lens) < k {
                // The shard's length is fixed: its store must hold every continuation piece.
                return Err(DatasetError::at(
                    &self.path,
                    Some(&self.write.field.name),
                    Error::InvalidArgument(format!(
                        "the samples of shard {:?} are too long for one store to hold (2^24 records of at most 1 MiB)",
                        self.manifest.shards[self.shard].dir
                    )),
                ));
            }
            self.write.stage(store, column, done as usize, (done + k) as usize, spill, self.in_shard)?;
            done += k;
            self.in_shard += k;
            self.written += k;
        }
        Ok(n)
    }

    /// Commits the current shard's store and moves to the next shard.
    fn next_shard(&mut self) -> Result<(), DatasetError> {
        self.finish_store()?;
        self.shard += 1;
        self.in_shard = 0;
        Ok(())
    }

    fn finish_store(&mut self) -> Result<(), DatasetError> {
        if self.store.is_none() && self.shard < self.manifest.shards.len() {
            // A shard of no records (or one the column skipped): an empty store.
            let dir = self.path.join(&self.manifest.shards[self.shard].dir);
            self.store = Some(self.write.create_store(&dir, self.options.layout)?);
            self.made.push(dir);
        }
        if let Some(store) = self.store.take() {
            let name = &self.write.field.name;
            if let Some(spill) = self.spill.take() {
                if spill.finish(&store, self.write.policy())? {
                    self.manifest.shards[self.shard].long.push(name.clone());
                }
            }
            store.commit().map_err(|e| DatasetError::at(store.path(), Some(name), e))?;
        }
        Ok(())
    }

    /// Publishes the field: every store committed, then the manifest listing it. Fails
    /// unless every sample was written.
    pub fn commit(mut self) -> Result<Dataset, DatasetError> {
        if self.written != self.len() {
            return Err(DatasetError::at(
                &self.path,
                Some(&self.write.field.name),
                Error::InvalidArgument(format!(
                    "{} samples given, the dataset holds {}: a new field needs one for every sample",
                    self.written,
                    self.len()
                )),
            ));
        }
        while self.shard < self.manifest.shards.len() {
            self.next_shard()?;
        }
        let mut manifest = self.manifest.clone();
        let field = self.write.field.clone();
        manifest
            .add_field(field, self.rows)
            .map_err(|e| DatasetError::at(&self.path, None, Error::InvalidArgument(e.to_string())))?;
        let Some(target) = self.remote.take() else {
            publish(&self.path, &manifest)?;
            self.done = true;
            return Dataset::open_with(
                &self.path,
                DatasetOptions { read_only: Some(true), ..DatasetOptions::default() },
            );
        };
        let remote = &target.remote;
        let name = &self.write.field.name;
        let tag = super::write_tag();
        let mut objects = target.listed.objects.objects.clone();
        let mut uploaded: Vec<String> = Vec::new();
        for shard in &manifest.shards {
            let listed_at = format!("{}/{name}", shard.dir);
            let stored_at = format!("{listed_at}.{tag}");
            let local = self.path.join(&shard.dir).join(name);
            let up = match upload_tree(&local, remote, &stored_at, &mut |_, _| {}) {
                Ok(up) => up,
                Err(e) => {
                    discard_uploads(remote, &uploaded);
                    return Err(DatasetError::at(&local, Some(name), e));
                }
            };
            for (key, mut object) in up.objects {
                let file = key.strip_prefix(&stored_at).unwrap_or(&key).to_owned();
                object.key = Some(key.clone());
                uploaded.push(key);
                objects.insert(format!("{listed_at}{file}"), object);
            }
        }
        replace(remote, target.listed, &manifest, objects, &uploaded, "add_field")?;
        self.done = true;
        Dataset::open_remote_in(remote, RemoteOptions::default())
    }

    /// Drops the new field's stores; the dataset is as it was.
    pub fn discard(self) {}
}

impl Drop for FieldAdder {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        if let Some(store) = self.store.take() {
            store.discard();
        }
        for shard in &self.made {
            let _ = std::fs::remove_dir_all(shard.join(&self.write.field.name));
        }
    }
}

/// Removes field `name` from the local dataset at `path`: the manifest without it is
/// published first (readers see the field gone at once), then its stores are removed.
/// Refuses the last field.
pub fn drop_field(path: impl AsRef<Path>, name: &str) -> Result<Field, DatasetError> {
    let path = path.as_ref();
    let (_lock, manifest) = lock_existing(path)?;
    let rows = Dataset::open_with(path, DatasetOptions { read_only: Some(true), ..DatasetOptions::default() })?
        .id()?
        .generation;
    let mut after = manifest.clone();
    let field = after
        .drop_field(name, rows)
        .map_err(|e| DatasetError::at(path, Some(name), Error::InvalidArgument(e.to_string())))?;
    publish(path, &after)?;
    for shard in &manifest.shards {
        let dir = path.join(&shard.dir).join(name);
        // Listed no more: a folder left by a failure here is removed by the next change.
        let _ = std::fs::remove_dir_all(&dir);
    }
    Ok(field)
}
