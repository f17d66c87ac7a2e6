//! One field's rules for a write ([`FieldWrite`]): how its columns are checked (kinds,
//! sizes, values a dtype holds), staged into a shard's store, and how that store is
//! created. Shared by every writer of new stores: [`super::DatasetWriter`], the column
//! adder (`columns.rs`), deletes and compaction (`delete.rs`, `compact.rs`).

use std::path::Path;

use zrecord_core::dataset::long::{piece_len, MAX_SAMPLE_LEN};
use zrecord_core::dataset::values::{self, ValueError};
use zrecord_core::dataset::{Field, FieldKind, Manifest};
use zrecord_core::error::Error;
use zrecord_core::format::FileLayout;
use zrecord_core::schema::SCHEMA_FILE;
use zrecord_core::CodecPolicy;

use super::long::Spill;
use super::manifest_io::io_at;
use super::options::WriteOptions;
use super::DatasetError;
use crate::{OpenOptions, Zrecord};

/// One field's samples for [`DatasetWriter::write`](super::DatasetWriter::write).
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

/// One field's rules for a write: how its columns are checked, staged, and where its store
/// in a new shard comes from. Shared by [`DatasetWriter`] and the column adder
/// (`columns.rs`).
pub(super) struct FieldWrite {
    pub(super) field: Field,
    /// Bytes of a fixed field's sample (`None` for ragged, bytes and string fields).
    pub(super) sample_len: Option<u64>,
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
