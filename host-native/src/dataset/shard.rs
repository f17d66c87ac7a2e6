//! One shard of a dataset: its folder, what the manifest says of it, and its stores (one
//! per field), opened the first time a read needs them.
//!
//! A local dataset's open reads its manifest and nothing else: a dataset of many shards
//! (every append adds one until a compaction merges them) opens in the time of one file,
//! and a read touches only the shards it reads. A loader opens every shard when it starts
//! ([`super::Dataset::open_all`]), so that a run that began before a change removed some
//! shards (a delete, an overwrite, a compaction: their folders are removed once the new
//! manifest is published) keeps reading the dataset it started on: an open store's files
//! stay readable after their folder is gone. A shard that a handle first reads after such
//! a change is gone is reported as a changed dataset, never read from another shard: shard
//! folder names are never reused.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use zrecord_core::dataset::long::LongIndex;
use zrecord_core::dataset::{Field, MANIFEST_FILE};
use zrecord_core::error::{Error, FormatError, IoError, IoErrorKind};

use super::DatasetError;
use crate::{OpenOptions, Verify, Zrecord};

/// A shard's stores and their long indices.
pub(super) struct Opened {
    pub(super) stores: Vec<Arc<Zrecord>>,
    /// Per field, the long index of a store holding samples longer than a record
    /// (`long.rs`); empty when none does.
    pub(super) long: Vec<Option<Arc<LongIndex>>>,
}

/// One shard. Clones (a split's view of the dataset) share the opened stores.
#[derive(Clone)]
pub(super) struct Shard {
    pub(super) dir: PathBuf,
    /// The records the manifest lists for it (its stores may hold more: the tail of a long
    /// sample's continuations).
    pub(super) records: u64,
    /// The fields whose stores hold samples longer than a record (the manifest's `long`).
    pub(super) long_fields: Vec<String>,
    opened: Arc<OnceLock<Opened>>,
}

impl Shard {
    /// A shard of a manifest, opened when first read.
    pub(super) fn listed(dir: PathBuf, records: u64, long_fields: Vec<String>) -> Shard {
        Shard { dir, records, long_fields, opened: Arc::new(OnceLock::new()) }
    }

    /// A shard whose stores are open already (a single store, stores the caller opened, a
    /// dataset in an object store, whose stores open side by side), its long indices read.
    pub(super) fn open_now(
        dir: PathBuf,
        records: u64,
        long_fields: Vec<String>,
        fields: &[Field],
        stores: Vec<Arc<Zrecord>>,
    ) -> Result<Shard, DatasetError> {
        let shard = Shard::listed(dir, records, long_fields);
        let opened = shard.with_long(fields, stores)?;
        let _ = shard.opened.set(opened);
        Ok(shard)
    }

    /// The stores, when opened.
    pub(super) fn if_open(&self) -> Option<&Opened> {
        self.opened.get()
    }

    /// The stores, opened now if they are not yet. `dataset` is the dataset's folder
    /// (errors name it); `fields` its fields, `verify` when reads check checksums.
    pub(super) fn opened(&self, dataset: &Path, fields: &[Field], verify: Verify) -> Result<&Opened, DatasetError> {
        if let Some(o) = self.opened.get() {
            return Ok(o);
        }
        let mut stores = Vec::with_capacity(fields.len());
        for field in fields {
            stores.push(Arc::new(self.open_store(dataset, field, verify)?));
        }
        let opened = self.with_long(fields, stores)?;
        // Two threads may open the same shard at once: one's stores are kept.
        Ok(self.opened.get_or_init(|| opened))
    }

    fn open_store(&self, dataset: &Path, field: &Field, verify: Verify) -> Result<Zrecord, DatasetError> {
        let store_dir = self.dir.join(&field.name);
        let at = |e: Error| DatasetError::at(&store_dir, Some(&field.name), e);
        let options = OpenOptions {
            create: false,
            read_only: true,
            codec: field.codec().map_err(|e| at(e.into()))?,
            verify,
            ..OpenOptions::default()
        };
        let store = match Zrecord::open_with(&store_dir, options) {
            Ok(store) => store,
            Err(e) if !self.dir.exists() => {
                // Shard folders are never reused: one that is gone was replaced by a change
                // published after this handle read the manifest.
                let what = format!(
                    "this shard is no longer part of the dataset at {}: a delete, overwrite or compaction replaced \
                     it after the dataset was opened; open the dataset again",
                    dataset.display()
                );
                let why = match e {
                    Error::Io(io) => IoError::new(IoErrorKind::NotFound, io.context, what),
                    other => {
                        IoError::new(IoErrorKind::NotFound, format!("open {}: {other}", store_dir.display()), what)
                    }
                };
                return Err(at(Error::Io(why)));
            }
            Err(e) => return Err(at(e)),
        };
        if u64::from(store.len()) < self.records {
            let shard = self.dir.file_name().map_or_else(String::new, |n| n.to_string_lossy().into_owned());
            return Err(at(FormatError::Container(format!(
                "holds {} records but {MANIFEST_FILE} lists {} for shard {shard:?}",
                store.len(),
                self.records,
            ))
            .into()));
        }
        Ok(store)
    }

    fn with_long(&self, fields: &[Field], stores: Vec<Arc<Zrecord>>) -> Result<Opened, DatasetError> {
        let mut long = Vec::new();
        if !self.long_fields.is_empty() {
            long = vec![None; fields.len()];
            for name in &self.long_fields {
                let f = fields.iter().position(|g| &g.name == name).expect("the manifest's check: a field");
                let store = &stores[f];
                let index = super::long::read_index(store, self.records)
                    .map_err(|e| DatasetError::at(store.path(), Some(name), e))?;
                long[f] = Some(index);
            }
        }
        Ok(Opened { stores, long })
    }

    /// True when field `f` (of `fields`) holds samples longer than a record here.
    pub(super) fn has_long(&self, fields: &[Field], f: usize) -> bool {
        self.long_fields.iter().any(|n| *n == fields[f].name)
    }
}
