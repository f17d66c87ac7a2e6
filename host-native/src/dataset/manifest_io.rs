//! The dataset folder on disk, beside the stores: the writer lock, the manifest read and
//! published (the commit point of every change), what a published change's new folders
//! become ([`settle`]), and the leftovers of interrupted changes. Every change to a local
//! dataset (writes, field changes, deletes, compaction, concat, layout) goes through here;
//! this file uses no other file of the module but `error.rs`.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use zrecord_core::dataset::{Field, Manifest, MANIFEST_FILE};
use zrecord_core::error::{Error, IoError};

use super::{Dataset, DatasetError, DatasetOptions};

/// The writer lock's file name inside a dataset directory.
pub const WRITE_LOCK_FILE: &str = ".zrecord-write.lock";

/// An I/O error of `what` (a verb: "create", "write" ...) on `path`, naming both.
pub(super) fn io_at<'a>(path: &'a Path, what: &str) -> impl Fn(std::io::Error) -> DatasetError + 'a {
    let what = what.to_owned();
    move |e| DatasetError::at(path, None, Error::Io(IoError::from_std(e, format!("{what} {}", path.display()))))
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
pub(super) enum Depth {
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
pub(super) fn remove_unlisted(path: &Path, manifest: &Manifest, depth: Depth) -> Result<(), DatasetError> {
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

/// The manifest of the committed part at `path`, after opening every store (which checks
/// each against it); a part must be a dataset of named fields.
pub(super) fn part_manifest(path: &Path) -> Result<Manifest, DatasetError> {
    let dataset = Dataset::open_with(path, DatasetOptions { read_only: Some(true), ..DatasetOptions::default() })?;
    dataset.open_all()?;
    dataset.manifest().cloned().ok_or_else(|| {
        DatasetError::at(
            path,
            None,
            Error::InvalidArgument("a part must be a dataset of named fields (dataset.json)".into()),
        )
    })
}
