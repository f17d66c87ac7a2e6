//! One dataset made of others with the same fields, without copying a record
//! ([`concat`]).
//!
//! The new dataset's shards are the sources' shards, in order, their files hard links to
//! the sources' (a listed shard's files are never written again: appends add shards,
//! deletes copy shards, so the sources and the new dataset cannot change each other's
//! records). Across file systems, where no hard link can be made, the files are copied.
//! Everything is made in a folder beside the destination and renamed into place at the
//! end: the destination appears whole or not at all.

use std::path::{Path, PathBuf};

use zrecord_core::dataset::{shard_dir, Manifest, ShardEntry, MANIFEST_FILE};
use zrecord_core::error::Error;

use super::write::{describe, io_at, publish};
use super::DatasetError;

/// What [`concat`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Concatenated {
    /// Samples in the new dataset.
    pub samples: u64,
    /// Its shards.
    pub shards: usize,
    /// Files linked to the sources' (the rest were copied).
    pub linked: u64,
    /// Files copied (another file system).
    pub copied: u64,
}

fn read_manifest(path: &Path) -> Result<Manifest, DatasetError> {
    let manifest_path = path.join(MANIFEST_FILE);
    if !manifest_path.is_file() {
        return Err(DatasetError::at(
            path,
            None,
            Error::InvalidArgument(format!("{} is not a dataset of named fields (no {MANIFEST_FILE})", path.display())),
        ));
    }
    super::write::read_manifest(&manifest_path)
}

/// Makes the dataset `out` (which must not exist) of the samples of `sources`, in order:
/// the first source's fields, codecs and card; every source must have the same fields
/// (names, kinds, dtypes, shapes, in order). See the module docs.
pub fn concat(sources: &[PathBuf], out: &Path) -> Result<Concatenated, DatasetError> {
    let bad = |e: Error| DatasetError::at(out, None, e);
    let Some(first) = sources.first() else {
        return Err(bad(Error::InvalidArgument("concat needs at least one dataset".into())));
    };
    if out.exists() {
        return Err(bad(Error::InvalidArgument(format!("{} exists: concat makes a new dataset", out.display()))));
    }
    let manifests = sources.iter().map(|p| read_manifest(p)).collect::<Result<Vec<_>, _>>()?;
    let mut made = manifests[0].clone();
    for (path, m) in sources.iter().zip(&manifests).skip(1) {
        if !made.accepts(&m.fields) {
            return Err(DatasetError::at(
                path,
                None,
                Error::InvalidArgument(format!(
                    "holds fields {}, {} holds {} ({})",
                    describe(&m.fields),
                    first.display(),
                    describe(&made.fields),
                    made.field_differences(&m.fields)
                )),
            ));
        }
    }
    let total = manifests.iter().try_fold(0u64, |t, m| t.checked_add(m.len()));
    if total.is_none_or(|t| t > zrecord_core::dataset::MAX_SAMPLES) {
        return Err(bad(Error::StoreFull("a dataset holds at most 2^62 samples")));
    }
    made.shards.clear();
    made.next_shard = 0;
    // A fresh dataset: its identity is its stores' again.
    made.rows = None;
    let parent = out.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).map_err(io_at(parent, "create"))?;
    let name = out.file_name().and_then(|n| n.to_str()).unwrap_or("dataset");
    let staging = parent.join(format!(".{name}.concat-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&staging);
    std::fs::create_dir(&staging).map_err(io_at(&staging, "create"))?;
    let mut counts = Concatenated { samples: 0, shards: 0, linked: 0, copied: 0 };
    let result = (|| {
        for (path, m) in sources.iter().zip(&manifests) {
            for shard in m.shards.iter().filter(|s| s.records > 0) {
                let dir = shard_dir(made.next_shard);
                made.next_shard += 1;
                for field in &made.fields {
                    let from = path.join(&shard.dir).join(&field.name);
                    let to = staging.join(&dir).join(&field.name);
                    link_tree(&from, &to, &mut counts)?;
                }
                made.shards.push(ShardEntry { dir, records: shard.records });
            }
        }
        publish(&staging, &made)?;
        std::fs::rename(&staging, out).map_err(io_at(out, "rename into"))
    })();
    if let Err(e) = result {
        let _ = std::fs::remove_dir_all(&staging);
        return Err(e);
    }
    counts.samples = made.len();
    counts.shards = made.shards.len();
    Ok(counts)
}

/// The files of store folder `from` as `to`: hard links, or copies across file systems.
/// Lock files are left out (each dataset has its own).
fn link_tree(from: &Path, to: &Path, counts: &mut Concatenated) -> Result<(), DatasetError> {
    std::fs::create_dir_all(to).map_err(io_at(to, "create"))?;
    for entry in std::fs::read_dir(from).map_err(io_at(from, "list"))? {
        let entry = entry.map_err(io_at(from, "list"))?;
        let src = entry.path();
        let dst = to.join(entry.file_name());
        let kind = entry.file_type().map_err(io_at(&src, "stat"))?;
        if kind.is_dir() {
            link_tree(&src, &dst, counts)?;
        } else if kind.is_file() {
            if entry.file_name().to_string_lossy().ends_with(".lock") {
                continue;
            }
            match std::fs::hard_link(&src, &dst) {
                Ok(()) => counts.linked += 1,
                Err(e) if e.raw_os_error() == Some(libc::EXDEV) => {
                    std::fs::copy(&src, &dst).map_err(io_at(&src, "copy"))?;
                    counts.copied += 1;
                }
                Err(e) => return Err(io_at(&dst, "link")(e)),
            }
        }
    }
    Ok(())
}
