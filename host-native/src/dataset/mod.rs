//! Datasets: named fields (fixed-shape or ragged) over one index space that may span many
//! shards, each field of each shard a store ([`Zrecord`]).
//!
//! The layout and its rules (names, kinds, limits, the manifest) are the core's
//! ([`zrecord_core::dataset`]); this module opens the stores a manifest lists, maps a
//! dataset index to its shard's record and gathers across shards. A directory that holds
//! one store and a loaderx `schema.json` (what loaderx 0.5.4 and `zr convert` write) opens
//! as a dataset of one fixed field, [`LEGACY_FIELD`], so every loaderx dataset is a dataset
//! here too. Writing is [`DatasetWriter`] (`write.rs`).
//!
//! Access: a dataset opened for reading never needs the right to write. The stores of a
//! multi-field dataset are always opened read-only; a single loaderx store is opened
//! writable when the user may write it (so that delete and compact work) and read-only
//! when the system refuses (EACCES, EROFS), unless [`DatasetOptions::read_only`] says which.
//!
//! The files, readers first:
//! - `mod.rs` the [`Dataset`] and its reads (an index to its shard's record, the gathers);
//!   `shard.rs` a shard's stores, opened when a read first needs them; `read_ahead.rs`
//!   [`Dataset::will_read`]; `open.rs` opening one ([`DatasetOptions`], [`RemoteOptions`]);
//!   `error.rs` [`DatasetError`]; `report.rs` a whole dataset's inspect, verify and stats
//!   ([`Dataset::inspect_stores`], [`Dataset::verify_stores`], [`Dataset::stats`]).
//! - What every change shares, using no sibling but `long.rs`: `manifest_io.rs` the writer
//!   lock, the manifest read and published, leftovers ([`leftovers`]); `options.rs`
//!   [`WriteOptions`] and [`WriteMode`]; `field_write.rs` one field's rules for a write
//!   ([`Column`], `FieldWrite`); `identity.rs` the identity a change records and folds
//!   (the rule is the core's `Manifest::identity`); `long.rs` samples longer than a record.
//! - The changes: `write.rs` [`DatasetWriter`]; `parts.rs` a dataset written in parts
//!   ([`Part`]); `saved_parts.rs` parts from separate processes kept at the destination
//!   until one commits them ([`save_part`], [`commit_saved`]); `columns.rs` fields added and
//!   dropped ([`FieldAdder`], [`drop_field`]); `delete.rs` samples deleted
//!   ([`delete_samples`]); `compact.rs` small shards merged ([`compact_shards`]); `copy.rs`
//!   a consistent copy ([`copy_dataset`]); `remote_edit.rs` samples deleted and fields
//!   dropped or added in an object store ([`delete_remote`], [`drop_field_remote`],
//!   [`FieldAdder::open_remote`]); `remote_compact.rs` small shards merged in an object
//!   store ([`compact_remote`]); `remote_leftovers.rs` objects of interrupted changes in
//!   an object store, listed and removed ([`remote_leftovers`]); `remote_write.rs` a dataset
//!   written into an object store by one process ([`write_remote`]); `concat.rs` one dataset of several ([`concat`]);
//!   `layout.rs` a dataset's stores made dense or sparse ([`set_layout`]).
//! - Imports: `convert.rs` NumPy files in and out ([`import_npy`], [`export_npy`]);
//!   `tokens.rs` a flat token file into documents ([`import_tokens`]); `text.rs` text into
//!   token documents through a `tokenizer.json` ([`import_text`]); `megatron.rs`
//!   Megatron-LM's `.bin`/`.idx` indexed datasets ([`import_megatron`]); `images.rs`
//!   image folders and WebDataset shards; `find.rs` the datasets under a folder or prefix
//!   ([`find_local`], [`find_remote`]).
//!
//! No file imports one that imports it (checked by reading their `use super::` lines).

mod columns;
mod compact;
mod concat;
mod convert;
mod copy;
mod delete;
mod error;
mod field_write;
mod find;
mod identity;
mod images;
mod layout;
mod long;
mod manifest_io;
mod megatron;
mod open;
mod options;
mod parts;
mod read_ahead;
mod remote_compact;
mod remote_edit;
mod remote_leftovers;
mod remote_write;
mod report;
mod saved_parts;
mod shard;
mod text;
mod tokens;
mod write;

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use zrecord_core::dataset::long::LongIndex;
use zrecord_core::dataset::split::Split;
use zrecord_core::dataset::{Field, FieldKind, Layout, Manifest, ShardGroup};
use zrecord_core::error::{DecodeError, Error};
use zrecord_core::stream::DatasetId;

pub use columns::{drop_field, FieldAdder};
pub use compact::{compact_shards, Compacted};
pub use concat::{concat, concat_remote, Concatenated};
pub use convert::{export_npy, import_npy, ExportTo, ImportOptions, Imported, OFFSETS_SUFFIX};
pub use copy::{copy_dataset, Copied};
pub use delete::{delete_samples, Deleted};
pub use error::DatasetError;
pub use field_write::Column;
pub use find::{find_local, find_remote};
pub use images::{image_folder, import_image_folder, import_webdataset, webdataset_shards, ImageFolder};
pub use layout::{set_layout, LayoutChange};
pub use manifest_io::{leftovers, remove_leftovers};
pub use megatron::{import_megatron, megatron_files, MEGATRON_MAGIC};
pub(crate) use open::read_meta_file;
pub use open::{open_store, DatasetOptions, RemoteOptions};
pub use options::{WriteMode, WriteOptions};
pub use parts::{commit_local, commit_remote, finish_part, part_dir, write_tag, Part};
pub use remote_compact::compact_remote;
pub use remote_edit::{delete_remote, drop_field_remote};
pub use remote_leftovers::{remote_leftovers, remove_remote_leftovers, Leftover, LEFTOVER_AGE};
pub use remote_write::write_remote;
pub use report::{DatasetStats, StoreReport};
pub use saved_parts::{commit_saved, save_part, CommittedParts, PartsAt, SAVED_PARTS};
pub use text::{import_text, load_tokenizer, text_inputs, TextImport, TextImported, TextWriter, Tokenizer};
pub use tokens::{import_tokens, TokensImported};
pub use write::DatasetWriter;

use crate::{FixedSlots, Pick, Verify, Zrecord};
use shard::Shard;

/// The field name of a single-store (loaderx) dataset.
pub const LEGACY_FIELD: &str = "data";

/// An open dataset: fields, shards, and the index space `0..len()` over them.
pub struct Dataset {
    path: PathBuf,
    fields: Vec<Field>,
    /// Bytes per sample of each fixed field (0 for a ragged one).
    sample_lens: Vec<usize>,
    /// Bytes per element of each field.
    itemsizes: Vec<usize>,
    shards: Vec<Shard>,
    layout: Layout,
    /// `None` for a single store (a loaderx dataset) or stores handed over by the caller.
    manifest: Option<Manifest>,
    read_only: bool,
    /// A dataset read from an object store: the record data it keeps.
    cache: Option<Arc<crate::remote::file::Cache>>,
    /// A split of the dataset ([`Dataset::split`]): its index `p` is sample
    /// `subset.at(p)` of the whole, and its identity folds the split's key in.
    view: Option<Arc<Split>>,
    /// When reads check checksums: the stores of shards opened later open with it.
    verify: Verify,
}

impl Dataset {
    /// The record data a dataset read from an object store keeps (`None` when local).
    pub fn cache(&self) -> Option<&Arc<crate::remote::file::Cache>> {
        self.cache.as_ref()
    }

    /// What reading this dataset from an object store cost so far (`None` when local).
    pub fn remote_stats(&self) -> Option<crate::remote::RemoteCounts> {
        let counts = self.shards.first()?.if_open()?.stores.first()?.remote_stats()?;
        Some(match self.cache.as_ref().and_then(|c| c.disk()) {
            Some(disk) => disk.with_hits(counts),
            None => counts,
        })
    }

    /// The dataset directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The fields, in batch order.
    pub fn fields(&self) -> &[Field] {
        &self.fields
    }

    /// The position of the field called `name`.
    pub fn field_index(&self, name: &str) -> Option<usize> {
        self.fields.iter().position(|f| f.name == name)
    }

    /// Bytes of one sample of fixed field `f` (0 for a ragged field).
    pub fn sample_len(&self, f: usize) -> usize {
        self.sample_lens[f]
    }

    /// Bytes of one element of field `f`.
    pub fn itemsize(&self, f: usize) -> usize {
        self.itemsizes[f]
    }

    /// Number of samples (of the split, for a split).
    pub fn len(&self) -> u64 {
        match &self.view {
            Some(view) => view.subset.len(),
            None => self.layout.len(),
        }
    }

    /// Splits of the dataset by reference ([`zrecord_core::dataset::split`]): disjoint
    /// subsets of `fractions` of its samples (each positive, summing to at most 1), the
    /// same for the same `seed`, each a dataset sharing these stores (read-only; nothing
    /// is copied) with an identity of its own, so a loader state saved on one resumes only
    /// on it.
    pub fn split(&self, fractions: &[f64], seed: u64) -> Result<Vec<Dataset>, DatasetError> {
        let bad = |what: String| DatasetError::at(&self.path, None, Error::InvalidArgument(what));
        if self.view.is_some() {
            return Err(bad("this is a split already: split the whole dataset".into()));
        }
        let splits = zrecord_core::dataset::split::split(self.len(), fractions, seed).map_err(bad)?;
        Ok(splits.into_iter().map(|split| self.with_view(split)).collect())
    }

    /// This dataset seen through `split`.
    fn with_view(&self, split: Split) -> Dataset {
        Dataset {
            path: self.path.clone(),
            fields: self.fields.clone(),
            sample_lens: self.sample_lens.clone(),
            itemsizes: self.itemsizes.clone(),
            shards: self.shards.clone(),
            layout: self.layout.clone(),
            manifest: self.manifest.clone(),
            read_only: true,
            cache: self.cache.clone(),
            view: Some(Arc::new(split)),
            verify: self.verify,
        }
    }

    /// True for a split of a dataset ([`Dataset::split`]).
    pub fn is_split(&self) -> bool {
        self.view.is_some()
    }

    /// `indices` of this dataset as indices of the whole (the same, but for a split),
    /// after checking each is in range.
    fn to_whole<'a>(&self, indices: &'a [u64]) -> Result<Cow<'a, [u64]>, DatasetError> {
        let Some(view) = &self.view else { return Ok(Cow::Borrowed(indices)) };
        let len = view.subset.len();
        indices
            .iter()
            .map(|&i| if i < len { Ok(view.subset.at(i)) } else { Err(self.out_of_range(i)) })
            .collect::<Result<Vec<u64>, _>>()
            .map(Cow::Owned)
    }

    /// One index of this dataset as an index of the whole.
    fn one_to_whole(&self, index: u64) -> Result<u64, DatasetError> {
        Ok(self.to_whole(&[index])?[0])
    }

    /// True when the dataset holds no sample.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The dataset card (`dataset.json`'s `metadata`) as JSON text, if the writer gave one.
    pub fn metadata_json(&self) -> Option<String> {
        let card = self.manifest.as_ref()?.metadata.as_ref()?;
        serde_json::to_string(card).ok()
    }

    /// The manifest, for a multi-field (or sharded) dataset.
    pub fn manifest(&self) -> Option<&Manifest> {
        self.manifest.as_ref()
    }

    /// The identities this dataset had before its appends, oldest first (its manifest's
    /// `grown_from`): a loader state saved on any of them resumes on it.
    pub fn grown_from(&self) -> &[DatasetId] {
        if self.view.is_some() {
            // A split of the dataset as it was is not a prefix of its split now.
            return &[];
        }
        self.manifest.as_ref().map_or(&[], |m| m.grown_from.as_slice())
    }

    /// True when this handle may not change the dataset.
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// Number of shards.
    pub fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// The folder of shard `s` (the dataset directory itself for a single store).
    pub fn shard_dir(&self, s: usize) -> &Path {
        &self.shards[s].dir
    }

    /// The first dataset index of shard `s`.
    pub fn shard_start(&self, s: usize) -> u64 {
        self.layout.start(s)
    }

    /// The stores of shard `s`, opened now if no read opened them yet (`shard.rs`).
    fn opened(&self, s: usize) -> Result<&shard::Opened, DatasetError> {
        self.shards[s].opened(&self.path, &self.fields, self.verify)
    }

    /// The store of field `f` in shard `s` (opened now if no read opened it yet).
    pub fn store(&self, s: usize, f: usize) -> Result<&Arc<Zrecord>, DatasetError> {
        Ok(&self.opened(s)?.stores[f])
    }

    /// The layout of the dataset's stores (its first store's; dense when it has none).
    pub fn stores_layout(&self) -> Result<zrecord_core::format::FileLayout, DatasetError> {
        Ok(match self.shard_count() {
            0 => zrecord_core::format::FileLayout::Dense,
            _ => self.store(0, 0)?.layout(),
        })
    }

    /// Opens every shard's stores that no read opened yet. A loader calls it when it
    /// starts: what it holds open stays readable when a later change removes the shards
    /// (`shard.rs`).
    pub fn open_all(&self) -> Result<(), DatasetError> {
        for s in 0..self.shards.len() {
            self.opened(s)?;
        }
        Ok(())
    }

    /// The stores opened so far (a read's shards, or every shard after
    /// [`Dataset::open_all`]; every store of a single store or of a dataset in an object
    /// store), shard by shard, field by field.
    pub fn opened_stores(&self) -> impl Iterator<Item = &Arc<Zrecord>> {
        self.shards.iter().filter_map(|s| s.if_open()).flat_map(|o| &o.stores)
    }

    /// Every store, shard by shard, field by field (every shard opened).
    pub fn stores(&self) -> Result<Vec<&Arc<Zrecord>>, DatasetError> {
        let mut all = Vec::with_capacity(self.shards.len() * self.fields.len());
        for s in 0..self.shards.len() {
            all.extend(self.opened(s)?.stores.iter());
        }
        Ok(all)
    }

    /// The dataset as a stream's input: its length and every store's generation combined
    /// ([`DatasetId::of_stores`]), so that a change to any store invalidates saved states;
    /// once a field was added or dropped, the manifest's `rows` instead (the identity the
    /// stores gave before the change, with every later append's stores folded in).
    pub fn id(&self) -> Result<DatasetId, DatasetError> {
        let whole = self.whole_id()?;
        Ok(match &self.view {
            None => whole,
            Some(view) => DatasetId {
                length: view.subset.len(),
                generation: zrecord_core::stream::combine_generations(whole.generation, view.key),
            },
        })
    }

    fn whole_id(&self) -> Result<DatasetId, DatasetError> {
        let generation = |s: usize, f: usize| self.store(s, f)?.generation().map_err(|e| self.error(s, f, e));
        if let Some(manifest) = &self.manifest {
            return manifest.identity(generation);
        }
        let length = self.layout.len();
        let mut generations = Vec::with_capacity(self.shards.len() * self.fields.len());
        for s in 0..self.shards.len() {
            for (f, store) in self.opened(s)?.stores.iter().enumerate() {
                generations.push(store.generation().map_err(|e| self.error(s, f, e))?);
            }
        }
        Ok(DatasetId::of_stores(length, generations))
    }

    /// An error of field `f`'s store in shard `s`.
    pub(crate) fn error(&self, s: usize, f: usize, e: Error) -> DatasetError {
        let name = &self.fields[f].name;
        match self.shards[s].if_open() {
            Some(o) => DatasetError::at(o.stores[f].path(), Some(name), e),
            None => DatasetError::at(&self.shards[s].dir.join(name), Some(name), e),
        }
    }

    fn out_of_range(&self, index: u64) -> DatasetError {
        // Store errors carry a u32 length; a dataset's may be larger, so say it in words.
        DatasetError::at(
            &self.path,
            None,
            Error::InvalidArgument(format!("index {index} is out of range for a dataset of {} samples", self.len())),
        )
        .with_code_of_index_error(index, self.len())
    }

    fn group(&self, indices: &[u64]) -> Result<Vec<ShardGroup>, DatasetError> {
        self.layout.group(indices).map_err(|k| self.out_of_range(indices[k]))
    }

    /// Decodes fixed field `f` of sample `indices[k]` into `dst[slot(k) * sample_len..]`,
    /// where `slot(k)` is `slots[k]`, or `k` when `slots` is `None`.
    ///
    /// Records shorter than the sample (stores written by others) are zero-padded when
    /// `dirty` says `dst` may hold old bytes; a fresh zeroed buffer needs no padding.
    pub fn gather_fixed(
        &self,
        f: usize,
        indices: &[u64],
        dst: &mut [u8],
        slots: Option<&[usize]>,
        dirty: bool,
    ) -> Result<(), DatasetError> {
        let indices = &*self.to_whole(indices)?;
        let size = self.sample_lens[f];
        if self.fields[f].is_ragged() {
            return Err(DatasetError::at(
                &self.path,
                Some(&self.fields[f].name),
                Error::InvalidArgument("a ragged field has no fixed sample size: gather it with gather_ragged".into()),
            ));
        }
        let slots_len = slots.map_or(indices.len(), |s| s.iter().max().map_or(0, |&m| m + 1));
        if dst.len() < slots_len * size {
            return Err(DatasetError::at(
                &self.path,
                Some(&self.fields[f].name),
                Error::BufferTooSmall(format!("{} samples of {size} bytes into {} bytes", slots_len, dst.len())),
            ));
        }
        if self.shards.len() == 1 && slots.is_none() {
            // One store, every slot in order: its strided gather (which checks that each
            // record fits its slot), then the slack of short records cleared.
            let store = self.store(0, f)?;
            if let Some(k) = indices.iter().position(|&i| i >= self.layout.len()) {
                return Err(self.out_of_range(indices[k]));
            }
            store.gather(indices, dst, size).map_err(|e| self.error(0, f, e))?;
            if dirty {
                let mut lengths = vec![0u32; indices.len()];
                store.lengths(indices, &mut lengths).map_err(|e| self.error(0, f, e))?;
                for (k, &len) in lengths.iter().enumerate() {
                    dst[k * size + len as usize..(k + 1) * size].fill(0);
                }
            }
            return Ok(());
        }
        let place = |k: usize| slots.map_or(k, |sl| sl[k]);
        let picks = self.picks(indices, |k| (place(k) * size) as u64)?;
        self.gather_picks(f, &picks, dst, Some(FixedSlots { size, clear: dirty }))
    }

    /// About one round trip to the object store the dataset is read from, in seconds
    /// (`None` for a local dataset, or before the first request).
    pub fn round_trip(&self) -> Option<f64> {
        self.shards.first()?.if_open()?.stores.first()?.round_trip()
    }

    /// Where each of `indices` lives: its shard and record there, and the destination
    /// offset `offset(k)` of sample `k`.
    fn picks(&self, indices: &[u64], offset: impl Fn(usize) -> u64) -> Result<Vec<Pick>, DatasetError> {
        let mut picks = Vec::with_capacity(indices.len());
        for (k, &i) in indices.iter().enumerate() {
            let (store, index) = self.layout.locate(i).ok_or_else(|| self.out_of_range(i))?;
            picks.push(Pick { store, index, offset: offset(k) });
        }
        Ok(picks)
    }

    /// Field `f` of every pick (its `store` a shard number) into `dst`, one parallel pass
    /// over all shards.
    fn gather_picks(
        &self,
        f: usize,
        picks: &[Pick],
        dst: &mut [u8],
        fixed: Option<FixedSlots>,
    ) -> Result<(), DatasetError> {
        if self.shards.iter().all(|shard| shard.if_open().is_some()) {
            let stores: Vec<&Zrecord> =
                self.shards.iter().filter_map(|shard| shard.if_open()).map(|o| &*o.stores[f]).collect();
            return Zrecord::gather_stores(&stores, picks, dst, fixed).map_err(|(s, e)| self.error(s, f, e));
        }
        // Some shards are not open: the ones the picks read open now, and the picks name
        // them by their place among those.
        let mut place = vec![usize::MAX; self.shards.len()];
        let mut shards = Vec::new();
        let mut stores: Vec<&Zrecord> = Vec::new();
        let mut local = Vec::with_capacity(picks.len());
        for pick in picks {
            if place[pick.store] == usize::MAX {
                place[pick.store] = stores.len();
                shards.push(pick.store);
                stores.push(&**self.store(pick.store, f)?);
            }
            local.push(Pick { store: place[pick.store], ..*pick });
        }
        Zrecord::gather_stores(&stores, &local, dst, fixed).map_err(|(k, e)| self.error(shards[k], f, e))
    }

    /// The byte length of field `f` of each sample in `indices`, into `out`.
    pub fn byte_lengths(&self, f: usize, indices: &[u64], out: &mut [u64]) -> Result<(), DatasetError> {
        self.whole_byte_lengths(f, &self.to_whole(indices)?, out)
    }

    fn whole_byte_lengths(&self, f: usize, indices: &[u64], out: &mut [u64]) -> Result<(), DatasetError> {
        let groups = self.group(indices)?;
        let mut lengths: Vec<u32> = Vec::new();
        for (s, local, slots) in groups {
            lengths.clear();
            lengths.resize(local.len(), 0);
            self.store(s, f)?.lengths(&local, &mut lengths).map_err(|e| self.error(s, f, e))?;
            for (&slot, &len) in slots.iter().zip(&lengths) {
                out[slot] = u64::from(len);
            }
            if let Some(long) = self.long(s, f)? {
                for (&slot, &index) in slots.iter().zip(&local) {
                    if let Some(sample) = long.find(index) {
                        out[slot] = sample.total;
                    }
                }
            }
        }
        Ok(())
    }

    /// The long index of field `f`'s store in shard `s`, when it holds samples longer
    /// than a record.
    fn long(&self, s: usize, f: usize) -> Result<Option<&LongIndex>, DatasetError> {
        if !self.shards[s].has_long(&self.fields, f) {
            return Ok(None);
        }
        Ok(self.opened(s)?.long.get(f).and_then(|l| l.as_deref()))
    }

    /// True when some store of field `f` holds samples longer than a record.
    fn has_long(&self, f: usize) -> bool {
        self.shards.iter().any(|shard| shard.has_long(&self.fields, f))
    }

    /// Bytes `from .. from + out.len()` of field `f` of sample `index`, the record's
    /// checksum checked whole ([`zrecord_core::Store::read_piece`]): a packed row's share
    /// of a long document without copying the rest.
    pub fn read_piece(
        &self,
        f: usize,
        index: u64,
        from: u64,
        out: &mut [u8],
        scratch: &mut Vec<u8>,
    ) -> Result<(), DatasetError> {
        let index = self.one_to_whole(index)?;
        let (s, local) = self.layout.locate(index).ok_or_else(|| self.out_of_range(index))?;
        let store = self.store(s, f)?;
        let Some(sample) = self.long(s, f)?.and_then(|long| long.find(local)) else {
            return store.read_piece(local, from, out, scratch).map_err(|e| self.error(s, f, e));
        };
        if from.saturating_add(out.len() as u64) > sample.total {
            let what = format!("bytes {from}..{} of a {}-byte sample", from + out.len() as u64, sample.total);
            return Err(self.error(s, f, Error::InvalidArgument(what)));
        }
        let mut at = 0usize;
        for (record, offset, len) in sample.ranges(from, out.len() as u64) {
            let part = &mut out[at..at + len as usize];
            store.read_piece(record, offset, part, scratch).map_err(|e| self.error(s, f, e))?;
            at += len as usize;
        }
        Ok(())
    }

    /// Decodes field `f` of sample `indices[k]` into `dst` at byte `offsets[k]` (each must
    /// have room for the sample's [`Dataset::byte_lengths`]): the ragged gather.
    pub fn gather_at(&self, f: usize, indices: &[u64], dst: &mut [u8], offsets: &[u64]) -> Result<(), DatasetError> {
        self.whole_gather_at(f, &self.to_whole(indices)?, dst, offsets)
    }

    fn whole_gather_at(&self, f: usize, indices: &[u64], dst: &mut [u8], offsets: &[u64]) -> Result<(), DatasetError> {
        if offsets.len() != indices.len() {
            return Err(DatasetError::at(
                &self.path,
                Some(&self.fields[f].name),
                Error::InvalidArgument(format!("{} offsets for {} indices", offsets.len(), indices.len())),
            ));
        }
        let mut picks = self.picks(indices, |k| offsets[k])?;
        if self.has_long(f) {
            // A long sample's own record holds its first piece; its continuations follow.
            for k in 0..picks.len() {
                let Pick { store: s, index, offset } = picks[k];
                if let Some(sample) = self.long(s, f)?.and_then(|long| long.find(index)) {
                    picks.extend(sample.records().skip(1).map(|(r, at)| Pick {
                        store: s,
                        index: r,
                        offset: offset + at,
                    }));
                }
            }
        }
        self.gather_picks(f, &picks, dst, None)
    }

    /// Field `f` of the samples `indices`, ragged or fixed, as the flat bytes of all of
    /// them and the byte offset of each (`indices.len() + 1` offsets, starting at 0). A
    /// bytes or string field gives its values (each record's stop byte stripped; a string
    /// field's checked to be UTF-8).
    pub fn gather_ragged(&self, f: usize, indices: &[u64]) -> Result<(Vec<u8>, Vec<u64>), DatasetError> {
        let indices = &*self.to_whole(indices)?;
        let mut lengths = vec![0u64; indices.len()];
        self.whole_byte_lengths(f, indices, &mut lengths)?;
        let mut offsets = Vec::with_capacity(indices.len() + 1);
        let mut total = 0u64;
        offsets.push(0);
        for &len in &lengths {
            total += len;
            offsets.push(total);
        }
        let mut values = vec![0u8; total as usize];
        self.whole_gather_at(f, indices, &mut values, &offsets[..indices.len()])?;
        if self.fields[f].has_stop_byte() {
            let text = self.fields[f].kind == FieldKind::String;
            let len = zrecord_core::dataset::values::strip(&mut values, &mut offsets, text)
                .map_err(|(k, why)| self.whole_value_error(f, indices[k], why))?;
            values.truncate(len);
        }
        Ok((values, offsets))
    }

    /// The error of a bytes or string record of sample `index` (field `f`) that is not a
    /// value ([`zrecord_core::dataset::values::strip`]): its store and
    /// record named.
    pub(crate) fn value_error(&self, f: usize, index: u64, why: DecodeError) -> DatasetError {
        match self.one_to_whole(index) {
            Ok(whole) => self.whole_value_error(f, whole, why),
            Err(e) => e,
        }
    }

    fn whole_value_error(&self, f: usize, index: u64, why: DecodeError) -> DatasetError {
        match self.layout.locate(index) {
            Some((s, local)) => self.error(s, f, Error::Decode { index: local, source: why }),
            None => self.out_of_range(index),
        }
    }

    /// Footprint of every store opened so far in bytes ([`Zrecord::footprint`]): of every
    /// store after [`Dataset::open_all`], which a loader calls.
    pub fn footprint(&self) -> u64 {
        self.opened_stores().map(|s| s.footprint()).sum()
    }
}

impl std::fmt::Debug for Dataset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dataset")
            .field("path", &self.path)
            .field("fields", &self.fields.iter().map(|f| &f.name).collect::<Vec<_>>())
            .field("len", &self.len())
            .field("shards", &self.shards.len())
            .field("read_only", &self.read_only)
            .finish()
    }
}
