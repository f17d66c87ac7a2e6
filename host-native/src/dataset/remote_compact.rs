//! Compaction of a dataset of named fields in an object store ([`compact_remote`]): the
//! many small shards that appends to a bucket leave, merged as a local compaction merges
//! them (`compact.rs`), by the same plan and the same copy.
//!
//! Objects a listing names are never rewritten (a reader pins each by its ETag), so the
//! compaction works as a remote delete does (`remote_edit.rs`): the shards of each run to
//! merge are fetched into a scratch folder, merged there, and go up as new shards
//! (`shard-N-TAG`); the listing is then replaced by one naming them in the runs' places,
//! on the condition that the listing read is still there, and only then are the old
//! shards' objects deleted. Shards outside the runs are neither fetched nor touched.
//! Sample `i` is the same sample before and after, so the dataset keeps its identity (as
//! the manifest's `rows`) and a loader state saved before resumes after.

use std::path::Path;

use zrecord_core::error::{Error, IoError};

use super::compact::{merge_runs, plan, Compacted};
use super::manifest_io::{lock_existing, publish};
use super::remote_edit::{read_dataset, replace, upload_shard, Scratch};
use super::DatasetError;
use crate::remote::push::fetch_object;
use crate::remote::Remote;

/// Merges runs of neighbouring small shards of the dataset of named fields at `remote`
/// into shards of at most `target_rows` samples each (see the module docs).
/// `progress(done, total)` counts records copied. Values, row order and the dataset's
/// identity stay. Fails, changing nothing, when another writer replaced the listing while
/// it ran.
pub fn compact_remote(
    remote: &Remote,
    target_rows: u64,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Compacted, DatasetError> {
    let at = Path::new(remote.url());
    let fail = |e: IoError| DatasetError::at(at, None, Error::Io(e));
    let listed = read_dataset(remote, "compact")?;
    let manifest = listed.manifest.clone();
    let merge = plan(at, &manifest, target_rows)?;
    let shards_before = manifest.shards.len();
    if merge.is_empty() {
        return Ok(Compacted { shards_before, shards_after: shards_before, samples_copied: 0, bytes_copied: 0 });
    }
    // The identity before, kept: sample i stays sample i.
    let identity = super::identity::remote_identity(remote, &manifest, None)?;

    // The runs' shards alone, one run after another, as a local dataset.
    let scratch = Scratch::new("compact")?;
    let mut local = manifest.clone();
    local.shards = merge.iter().flat_map(|r| manifest.shards[r.clone()].iter().cloned()).collect();
    local.grown_from.clear();
    local.rows = None;
    for entry in &local.shards {
        let prefix = format!("{}/", entry.dir);
        for (name, object) in listed.objects.objects.iter().filter(|(k, _)| k.starts_with(&prefix)) {
            fetch_object(remote, name, object, &scratch.path().join(name), &mut |_| {}).map_err(fail)?;
        }
    }
    publish(scratch.path(), &local)?;
    let mut local_runs = Vec::with_capacity(merge.len());
    let mut start = 0;
    for run in &merge {
        local_runs.push(start..start + run.len());
        start += run.len();
    }
    let (lock, local) = lock_existing(scratch.path())?;
    let (done, merged) = merge_runs(scratch.path(), &local, &local_runs, identity.generation, progress)?;
    drop(lock);

    // Each merged shard goes up under a name of this compaction's; the listing names it in
    // its run's place.
    let tag = super::write_tag();
    let mut objects = listed.objects.objects.clone();
    for entry in &local.shards {
        let prefix = format!("{}/", entry.dir);
        objects.retain(|k, _| !k.starts_with(&prefix));
    }
    let mut uploaded: Vec<String> = Vec::new();
    let mut entries = Vec::with_capacity(merged.shards.len());
    for entry in &merged.shards {
        entries.push(upload_shard(remote, scratch.path(), entry, &tag, &mut objects, &mut uploaded)?);
    }
    let mut changed = manifest.clone();
    // Later runs first, so that earlier positions stay where they were.
    for (run, entry) in merge.iter().zip(entries).rev() {
        changed.shards.splice(run.clone(), [entry]);
    }
    changed.next_shard = merged.next_shard.max(manifest.next_shard);
    changed.rows = Some(identity.generation);
    let shards_after = changed.shards.len();
    replace(remote, listed, &changed, objects, &uploaded, "compaction")?;
    Ok(Compacted { shards_before, shards_after, ..done })
}
