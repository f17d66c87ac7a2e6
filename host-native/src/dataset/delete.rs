//! Samples deleted from a dataset of named fields ([`delete_samples`]), their bytes gone
//! from every file when it returns.
//!
//! A shard a manifest lists is never written again (readers holding that manifest read it),
//! so a delete copies each shard that holds a deleted sample into a new shard folder, every
//! field's surviving records in their order, and publishes the manifest with the new shard
//! in the old one's place; then the old folders go. Until the rename readers see the old
//! dataset; a delete killed before it leaves unlisted folders, which the next write or
//! delete removes (`write.rs`, `remove_unlisted`), and running it again starts over. The
//! surviving samples keep their order: sample `j` after the delete is the `j`-th sample not
//! deleted.

use std::path::Path;

use zrecord_core::dataset::long::LongIndex;
use zrecord_core::dataset::{shard_dir, Manifest, ShardEntry};
use zrecord_core::error::Error;
use zrecord_core::format::FileLayout;

use super::field_write::FieldWrite;
use super::manifest_io::{lock_existing, publish_then, settle};
use super::{DatasetError, WriteOptions};
use crate::{OpenOptions, Zrecord};

/// Records copied at a time, at most.
const BLOCK_RECORDS: usize = 4096;
/// Bytes of records copied at a time, about.
const BLOCK_BYTES: u64 = 64 << 20;

/// What [`delete_samples`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Deleted {
    /// Samples removed.
    pub samples: u64,
    /// Shards copied without them.
    pub shards: usize,
    /// Samples the dataset holds now.
    pub remaining: u64,
}

/// Deletes samples `indices` (in any order, repeats allowed) from the local dataset at
/// `path`; see the module docs. `progress(done, total)` counts records copied. An index
/// out of range is an error naming it, before anything is written.
pub fn delete_samples(
    path: impl AsRef<Path>,
    indices: &[u64],
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Deleted, DatasetError> {
    let path = path.as_ref();
    let (_lock, manifest) = lock_existing(path)?;
    let sorted = sorted_in_range(path, indices, manifest.len())?;
    let layout = manifest.layout();
    let groups = layout.group(&sorted).expect("every index was checked to be in range");
    let store_layout = first_layout(path, &manifest)?;
    let options = WriteOptions { layout: store_layout, ..WriteOptions::default() };
    let writes = FieldWrite::all(path, &manifest, &options)?;

    let total: u64 =
        groups.iter().map(|(s, gone, _)| (manifest.shards[*s].records - gone.len() as u64) * writes.len() as u64).sum();
    let mut done = 0u64;
    progress(0, total);
    let mut after = manifest.clone();
    let mut made = Vec::new();
    let result = (|| {
        for (s, gone, _) in &groups {
            let old = &manifest.shards[*s];
            let keep: Vec<u64> = (0..old.records).filter(|r| gone.binary_search(r).is_err()).collect();
            if keep.is_empty() {
                after.shards[*s].records = 0;
                continue;
            }
            let name = shard_dir(after.next_shard);
            after.next_shard += 1;
            let dir = path.join(&name);
            made.push(dir.clone());
            let mut long = Vec::new();
            for write in &writes {
                let from = open_read(&path.join(&old.dir).join(&write.field.name))?;
                let to = write.create_store(&dir, store_layout)?;
                copy_records(write, &from, &keep, &to, &mut |n| {
                    done += n;
                    progress(done, total);
                })?;
                if old.long.contains(&write.field.name) && copy_long(write, &from, old.records, &keep, &to)? {
                    long.push(write.field.name.clone());
                }
                to.commit().map_err(|e| DatasetError::at(to.path(), Some(&write.field.name), e))?;
            }
            after.shards[*s] = ShardEntry { dir: name, records: keep.len() as u64, long };
        }
        after.shards.retain(|s| s.records > 0);
        // The rows changed: so does their identity, when it is kept as `rows`, and no
        // earlier identity is a prefix of them any more.
        after.grown_from.clear();
        let new: Vec<String> =
            made.iter().filter_map(|d| d.file_name().and_then(|n| n.to_str()).map(String::from)).collect();
        super::identity::fold_new_stores(path, &mut after, &new)?;
        publish_then(path, &after)
    })();
    // Published but not synced: an error, the new shards kept (they are listed) and the
    // old ones left for the next change to remove.
    settle(result, &made)?;
    // Listed no more: a folder a failure here leaves is removed by the next write.
    for (s, _, _) in &groups {
        let _ = std::fs::remove_dir_all(path.join(&manifest.shards[*s].dir));
    }
    progress(total, total);
    Ok(Deleted { samples: sorted.len() as u64, shards: groups.len(), remaining: after.len() })
}

/// `indices` sorted, without repeats, after checking that each is below `len` (the error
/// names the first that is not).
pub(super) fn sorted_in_range(path: &Path, indices: &[u64], len: u64) -> Result<Vec<u64>, DatasetError> {
    if let Some(&bad) = indices.iter().find(|&&i| i >= len) {
        return Err(DatasetError::at(
            path,
            None,
            Error::InvalidArgument(format!("index {bad} is out of range for a dataset of {len} samples")),
        ));
    }
    let mut sorted = indices.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    Ok(sorted)
}

/// The layout of the dataset's stores (dense when it has none).
pub(super) fn first_layout(path: &Path, manifest: &Manifest) -> Result<FileLayout, DatasetError> {
    let Some(shard) = manifest.shards.first() else { return Ok(FileLayout::Dense) };
    let field = &manifest.fields[0];
    Ok(open_read(&path.join(&shard.dir).join(&field.name))?.layout())
}

pub(super) fn open_read(dir: &Path) -> Result<Zrecord, DatasetError> {
    let options = OpenOptions { create: false, read_only: true, ..OpenOptions::default() };
    Zrecord::open_with(dir, options).map_err(|e| DatasetError::at(dir, None, e))
}

/// Copies the continuation pieces of the kept samples longer than a record (`keep`, the
/// samples of `from`'s shard of `records` kept, in order) after `to`'s samples, and a long
/// index renumbered for them. Returns whether any was kept.
fn copy_long(
    write: &FieldWrite,
    from: &Zrecord,
    records: u64,
    keep: &[u64],
    to: &Zrecord,
) -> Result<bool, DatasetError> {
    let at = |z: &Zrecord, e: Error| DatasetError::at(z.path(), Some(&write.field.name), e);
    let index = super::long::read_index(from, records).map_err(|e| at(from, e))?;
    let mut entries = Vec::new();
    let mut pieces = Vec::new();
    for sample in index.samples() {
        if let Ok(now) = keep.binary_search(&u64::from(sample.sample)) {
            entries.push((now as u32, sample.more));
            pieces.extend(sample.records().skip(1).map(|(r, _)| r));
        }
    }
    if entries.is_empty() {
        return Ok(false);
    }
    copy_records(write, from, &pieces, to, &mut |_| {})?;
    let bytes = LongIndex::encode(&entries);
    to.stage_var_with(&bytes, &[0], &[bytes.len() as u32], write.policy()).map_err(|e| at(to, e))?;
    Ok(true)
}

/// Copies records `keep` of `from` (decoded, checked against their checksums) to `to`, in
/// order, re-encoded under the field's codec policy; staged, not committed.
pub(super) fn copy_records(
    write: &FieldWrite,
    from: &Zrecord,
    keep: &[u64],
    to: &Zrecord,
    copied: &mut dyn FnMut(u64),
) -> Result<(), DatasetError> {
    let at = |z: &Zrecord, e: Error| DatasetError::at(z.path(), Some(&write.field.name), e);
    let mut lens = Vec::new();
    let mut buf = Vec::new();
    let mut at_k = 0;
    while at_k < keep.len() {
        let end = (at_k + BLOCK_RECORDS).min(keep.len());
        let block = &keep[at_k..end];
        lens.clear();
        lens.resize(block.len(), 0u32);
        from.lengths(block, &mut lens).map_err(|e| at(from, e))?;
        // Fewer records when the block's bytes run past BLOCK_BYTES (one at least).
        let mut n = 0;
        let mut bytes = 0u64;
        while n < block.len() && (n == 0 || bytes + u64::from(lens[n]) <= BLOCK_BYTES) {
            bytes += u64::from(lens[n]);
            n += 1;
        }
        let mut starts = Vec::with_capacity(n);
        let mut total = 0u64;
        for &len in &lens[..n] {
            starts.push(total);
            total += u64::from(len);
        }
        buf.clear();
        buf.resize(total as usize, 0);
        from.gather_var(&block[..n], &mut buf, &starts).map_err(|e| at(from, e))?;
        to.stage_var_with(&buf, &starts, &lens[..n], write.policy()).map_err(|e| at(to, e))?;
        copied(n as u64);
        at_k += n;
    }
    Ok(())
}
