//! Small shards merged into larger ones ([`compact_shards`]): what a dataset grown by many
//! small appends needs, since each append adds a shard.
//!
//! A shard a manifest lists is never written again (readers holding that manifest read
//! it), so a compaction copies each run of neighbouring small shards into one new shard
//! folder, every field's records in their order (decoded, checked against their checksums,
//! written again under the field's codec), and publishes the manifest with the new shard
//! in the run's place; only then do the old folders go. Sample `i` is the same sample
//! before and after, so the dataset keeps its identity: a loader state saved before the
//! compaction resumes after it, batch for batch (the identity is kept as the manifest's
//! `rows`, as a column change keeps it). A compaction killed before the rename leaves the
//! old dataset and unlisted folders, which the next change removes.
//!
//! Shards holding samples longer than a record (`long`) are left as they are.

use std::ops::Range;
use std::path::Path;

use zrecord_core::dataset::{shard_dir, Manifest, ShardEntry};
use zrecord_core::error::Error;

use super::delete::{copy_records, first_layout, open_read};
use super::field_write::FieldWrite;
use super::manifest_io::{lock_existing, publish_then, settle};
use super::{DatasetError, WriteOptions};

/// What [`compact_shards`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Compacted {
    /// Shards before.
    pub shards_before: usize,
    /// Shards after.
    pub shards_after: usize,
    /// Samples copied into new shards.
    pub samples_copied: u64,
    /// Bytes of records copied (as stored, before re-encoding).
    pub bytes_copied: u64,
}

/// Runs of neighbouring shards to merge: each a range of shard positions whose shards hold
/// fewer than `target_rows` samples together (at most `target_rows`), have no long samples,
/// and number two or more.
fn runs(records: &[(u64, bool)], target_rows: u64) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let mut s = 0;
    while s < records.len() {
        let (n, long) = records[s];
        if long || n >= target_rows {
            s += 1;
            continue;
        }
        let mut end = s + 1;
        let mut total = n;
        while end < records.len() && !records[end].1 && total + records[end].0 <= target_rows {
            total += records[end].0;
            end += 1;
        }
        if end - s >= 2 {
            out.push(s..end);
        }
        s = end;
    }
    out
}

/// Runs of `manifest`'s shards to merge into shards of at most `target_rows` samples
/// ([`runs`] over its shards), after checking `target_rows`; `at` names the dataset in the
/// error.
pub(super) fn plan(at: &Path, manifest: &Manifest, target_rows: u64) -> Result<Vec<Range<usize>>, DatasetError> {
    if target_rows == 0 || target_rows > u64::from(zrecord_core::format::MAX_RECORDS) {
        return Err(DatasetError::at(
            at,
            None,
            Error::InvalidArgument(format!(
                "target_rows must be in 1..={}, got {target_rows}",
                zrecord_core::format::MAX_RECORDS
            )),
        ));
    }
    let shape: Vec<(u64, bool)> = manifest.shards.iter().map(|s| (s.records, !s.long.is_empty())).collect();
    Ok(runs(&shape, target_rows))
}

/// Merges runs of neighbouring small shards of the local dataset at `path` into shards of
/// at most `target_rows` samples each (see the module docs). `progress(done, total)`
/// counts records copied. Values, row order and the dataset's identity stay.
pub fn compact_shards(
    path: impl AsRef<Path>,
    target_rows: u64,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Compacted, DatasetError> {
    let path = path.as_ref();
    let (_lock, manifest) = lock_existing(path)?;
    let merge = plan(path, &manifest, target_rows)?;
    if merge.is_empty() {
        let shards = manifest.shards.len();
        return Ok(Compacted { shards_before: shards, shards_after: shards, samples_copied: 0, bytes_copied: 0 });
    }
    // The identity before, kept: sample i stays sample i.
    let identity = super::identity::prefix_identity(path, &manifest, manifest.shards.len())?;
    let (done, _) = merge_runs(path, &manifest, &merge, identity.generation, progress)?;
    Ok(done)
}

/// Copies each run of `merge` (shard positions of `manifest`, the dataset at `path`, whose
/// writer lock the caller holds) into one new shard and publishes the manifest with the
/// new shards in the runs' places and `rows` as its row identity; then removes the old
/// shards. Returns what it did and the manifest published.
pub(super) fn merge_runs(
    path: &Path,
    manifest: &Manifest,
    merge: &[Range<usize>],
    rows: u64,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<(Compacted, Manifest), DatasetError> {
    let shards_before = manifest.shards.len();
    let store_layout = first_layout(path, manifest)?;
    let options = WriteOptions { layout: store_layout, ..WriteOptions::default() };
    let writes = FieldWrite::all(path, manifest, &options)?;
    let samples: u64 = merge.iter().flat_map(|r| &manifest.shards[r.clone()]).map(|s| s.records).sum();
    let total = samples * writes.len() as u64;

    let mut done = 0u64;
    let mut bytes = 0u64;
    progress(0, total);
    let mut after = manifest.clone();
    let mut made = Vec::new();
    let mut merged = Vec::with_capacity(merge.len());
    let result = (|| {
        for run in merge {
            let name = shard_dir(after.next_shard);
            after.next_shard += 1;
            let dir = path.join(&name);
            made.push(dir.clone());
            let mut records = 0u64;
            for write in &writes {
                let to = write.create_store(&dir, store_layout)?;
                records = 0;
                for old in &manifest.shards[run.clone()] {
                    let from = open_read(&path.join(&old.dir).join(&write.field.name))?;
                    let all: Vec<u64> = (0..old.records).collect();
                    bytes +=
                        from.stats().map_err(|e| DatasetError::at(from.path(), Some(&write.field.name), e))?.live_bytes;
                    copy_records(write, &from, &all, &to, &mut |n| {
                        done += n;
                        progress(done, total);
                    })?;
                    records += old.records;
                }
                to.commit().map_err(|e| DatasetError::at(to.path(), Some(&write.field.name), e))?;
            }
            merged.push((run.clone(), ShardEntry { dir: name, records, long: Vec::new() }));
        }
        // Later runs first, so that earlier positions stay where they were.
        for (run, entry) in merged.iter().rev() {
            after.shards.splice(run.clone(), [entry.clone()]);
        }
        after.rows = Some(rows);
        publish_then(path, &after)
    })();
    // Published but not synced: an error, the merged shards kept (they are listed) and the
    // old ones left for the next change to remove.
    settle(result, &made)?;
    // Listed no more: a folder a failure here leaves is removed by the next change.
    for run in merge {
        for old in &manifest.shards[run.clone()] {
            let _ = std::fs::remove_dir_all(path.join(&old.dir));
        }
    }
    progress(total, total);
    let done =
        Compacted { shards_before, shards_after: after.shards.len(), samples_copied: samples, bytes_copied: bytes };
    Ok((done, after))
}

#[cfg(test)]
mod tests {
    use super::runs;

    #[test]
    fn runs_take_neighbouring_small_shards_up_to_the_target() {
        let small = |n| (n, false);
        assert_eq!(runs(&[small(10), small(10), small(10)], 25), vec![0..2]);
        assert_eq!(runs(&[small(10), small(10), small(10)], 30), vec![0..3]);
        // A full shard or one with long samples ends a run; a run of one is left alone.
        assert_eq!(runs(&[small(5), small(30), small(5), (5, true), small(5), small(5)], 30), vec![4..6]);
        assert_eq!(runs(&[small(30), small(30)], 30), Vec::<std::ops::Range<usize>>::new());
        assert_eq!(runs(&[small(20), small(20), small(20), small(20)], 40), vec![0..2, 2..4]);
        assert_eq!(runs(&[], 10), Vec::<std::ops::Range<usize>>::new());
    }
}
