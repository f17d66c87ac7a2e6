//! A dataset's identity as its changes see it: what it was before a change (so that a
//! state saved then resumes after an append or a column change), and how a change's new
//! stores fold into the manifest's row identity ([`Manifest::rows`]). The rule itself is
//! the core's, [`Manifest::identity`], which [`Dataset::id`] and the wasm guest call too;
//! the functions here only find the generations it folds, locally or in an object store.

use std::path::Path;

use zrecord_core::dataset::{Field, Manifest};
use zrecord_core::stream::DatasetId;

use super::{Dataset, DatasetError, RemoteOptions};
use crate::remote::Remote;
use crate::{OpenOptions, Zrecord};

/// The dataset's row identity as a saved state holds it: [`Dataset::id`]'s rule (the
/// manifest's rows when it records them, else the stores' generations), without opening
/// the dataset at `remote` when the manifest answers or `opened` is that dataset already.
/// Every remote change that records what it changed from asks here.
pub(super) fn remote_identity(
    remote: &Remote,
    manifest: &Manifest,
    opened: Option<&Dataset>,
) -> Result<DatasetId, DatasetError> {
    match (manifest.rows, opened) {
        (Some(rows), _) => Ok(DatasetId { length: manifest.len(), generation: rows }),
        (None, Some(ds)) => ds.id(),
        (None, None) => Dataset::open_remote_in(remote, RemoteOptions::default())?.id(),
    }
}

/// Records `before`, the identity of the rows a dataset had before an append, as its row
/// identity (`Manifest::rows`) if it has none yet. The identity stays what the stores
/// give (the stores' generations fold left to right, so folding the new stores into the
/// old ones' fold is the fold of them all), and the next append reads it from the manifest
/// instead of opening every store: an append's cost does not grow with the shards.
pub(super) fn keep_rows(manifest: &mut Manifest, before: DatasetId) {
    manifest.rows.get_or_insert(before.generation);
}

/// Folds the generations of the stores in shard folders `new` (opened read-only) into
/// `manifest.rows`, when the dataset has a row identity: what an append or a delete does
/// to it, as new stores would change the stores' identity.
pub(super) fn fold_new_stores(path: &Path, manifest: &mut Manifest, new: &[String]) -> Result<(), DatasetError> {
    if manifest.rows.is_some() {
        let generations = store_generations(path, &manifest.fields, new)?;
        fold_rows(manifest, &generations);
    }
    Ok(())
}

/// The generations of the stores of `fields` in shard folders `shards` under `path`, shard
/// by shard, each shard's in field order.
pub(super) fn store_generations(path: &Path, fields: &[Field], shards: &[String]) -> Result<Vec<u64>, DatasetError> {
    let mut generations = Vec::with_capacity(shards.len() * fields.len());
    for shard in shards {
        for f in fields {
            generations.push(store_generation(&path.join(shard).join(&f.name), &f.name)?);
        }
    }
    Ok(generations)
}

/// The generation of the store in `dir`, of field `field`.
fn store_generation(dir: &Path, field: &str) -> Result<u64, DatasetError> {
    let options = OpenOptions { create: false, read_only: true, ..OpenOptions::default() };
    let store = Zrecord::open_with(dir, options).map_err(|e| DatasetError::at(dir, Some(field), e))?;
    store.generation().map_err(|e| DatasetError::at(dir, Some(field), e))
}

/// The identity the dataset at `path` had when its manifest listed only the first `listed`
/// of `manifest`'s shards (as [`Dataset::id`] computes it then).
pub(super) fn prefix_identity(path: &Path, manifest: &Manifest, listed: usize) -> Result<DatasetId, DatasetError> {
    manifest.identity_of_first(listed, |s, f| {
        let dir = path.join(&manifest.shards[s].dir).join(&manifest.fields[f].name);
        store_generation(&dir, &manifest.fields[f].name)
    })
}

/// Folds new stores' `generations` ([`store_generations`]) into `manifest.rows`, if set.
pub(super) fn fold_rows(manifest: &mut Manifest, generations: &[u64]) {
    if let Some(rows) = manifest.rows {
        let all = std::iter::once(rows).chain(generations.iter().copied());
        manifest.rows = Some(DatasetId::of_stores(0, all).generation);
    }
}
