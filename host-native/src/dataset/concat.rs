//! One dataset made of others with the same fields, without copying a record
//! ([`concat`]).
//!
//! The new dataset's shards are the sources' shards, in order, their files hard links to
//! the sources' (a listed shard's files are never written again: appends add shards,
//! deletes copy shards, so the sources and the new dataset cannot change each other's
//! records). Across file systems, where no hard link can be made, the files are copied.
//! Everything is made in a folder beside the destination and renamed into place at the
//! end: the destination appears whole or not at all.
//!
//! In an object store ([`concat_remote`]) an object cannot be listed under another
//! prefix than its dataset's, so each source object is copied by the server (a copy
//! request: its bytes do not pass through this process) under the new prefix, then the
//! listing (version 2, holding the manifest) is put there if none is: the new dataset
//! appears whole or not at all, and copies a failed run left unlisted are made again.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use zrecord_core::dataset::{shard_dir, Manifest, ShardEntry, MANIFEST_FILE};
use zrecord_core::error::{Error, IoError, IoErrorKind};

use super::manifest_io::{describe, io_at, publish};
use super::remote_edit::{discard_uploads, inline_listing, read_dataset};
use super::DatasetError;
use object_store::ObjectStoreExt;

use crate::remote::objects::Object;
use crate::remote::push::{read_listing, try_put_listing};
use crate::remote::Remote;

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
    super::manifest_io::read_manifest(&manifest_path)
}

/// The manifest of a concatenation of datasets with `manifests` (at `paths`), with no
/// shard yet: the first one's fields, codecs and card, once every other was checked to have
/// the same fields; `out` is where the errors about the whole are reported.
fn joined(paths: &[&Path], manifests: &[Manifest], out: &Path) -> Result<Manifest, DatasetError> {
    let mut made = manifests[0].clone();
    for (path, m) in paths.iter().zip(manifests).skip(1) {
        if !made.accepts(&m.fields) {
            return Err(DatasetError::at(
                path,
                None,
                Error::InvalidArgument(format!(
                    "holds fields {}, {} holds {} ({})",
                    describe(&m.fields),
                    paths[0].display(),
                    describe(&made.fields),
                    made.field_differences(&m.fields)
                )),
            ));
        }
    }
    let total = manifests.iter().try_fold(0u64, |t, m| t.checked_add(m.len()));
    if total.is_none_or(|t| t > zrecord_core::dataset::MAX_SAMPLES) {
        return Err(DatasetError::at(out, None, Error::StoreFull("a dataset holds at most 2^62 samples")));
    }
    made.shards.clear();
    made.next_shard = 0;
    // A fresh dataset: its identity is its stores' again.
    made.rows = None;
    Ok(made)
}

/// Makes the dataset `out` (which must not exist) of the samples of `sources`, in order:
/// the first source's fields, codecs and card; every source must have the same fields
/// (names, kinds, dtypes, shapes, in order). See the module docs.
pub fn concat(sources: &[PathBuf], out: &Path) -> Result<Concatenated, DatasetError> {
    let bad = |e: Error| DatasetError::at(out, None, e);
    if sources.is_empty() {
        return Err(bad(Error::InvalidArgument("concat needs at least one dataset".into())));
    }
    if out.exists() {
        return Err(bad(Error::InvalidArgument(format!("{} exists: concat makes a new dataset", out.display()))));
    }
    let manifests = sources.iter().map(|p| read_manifest(p)).collect::<Result<Vec<_>, _>>()?;
    let paths: Vec<&Path> = sources.iter().map(PathBuf::as_path).collect();
    let mut made = joined(&paths, &manifests, out)?;
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
                made.shards.push(ShardEntry { dir, records: shard.records, long: shard.long.clone() });
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

/// [`concat`] in an object store: the dataset at `out` (where nothing may be listed yet)
/// of the samples of the datasets of named fields at `sources`, in order, each object
/// copied by the server (every location in the same bucket; see the module docs). The
/// counts say `copied` objects, none `linked`.
pub fn concat_remote(sources: &[Remote], out: &Remote) -> Result<Concatenated, DatasetError> {
    let at = Path::new(out.url());
    let fail = |e: IoError| DatasetError::at(at, None, Error::Io(e));
    if sources.is_empty() {
        return Err(DatasetError::at(at, None, Error::InvalidArgument("concat needs at least one dataset".into())));
    }
    let bucket = |url: &str| url.split("://").nth(1).and_then(|rest| rest.split('/').next()).map(str::to_owned);
    let scheme = |url: &str| url.split("://").next().map(str::to_owned);
    for source in sources {
        if (scheme(source.url()), bucket(source.url())) != (scheme(out.url()), bucket(out.url())) {
            return Err(DatasetError::at(
                Path::new(source.url()),
                None,
                Error::InvalidArgument(format!(
                    "concat in an object store copies objects within one bucket; {} is in another than {} \
                     (pull it and push it there first)",
                    source.url(),
                    out.url()
                )),
            ));
        }
    }
    if read_listing(out).map_err(fail)?.is_some() {
        return Err(DatasetError::at(
            at,
            None,
            Error::InvalidArgument(format!("a dataset is already at {}: concat makes a new dataset", out.url())),
        ));
    }
    let listed = sources.iter().map(|r| read_dataset(r, "concat")).collect::<Result<Vec<_>, _>>()?;
    let manifests: Vec<Manifest> = listed.iter().map(|l| l.manifest.clone()).collect();
    let paths: Vec<&Path> = sources.iter().map(|r| Path::new(r.url())).collect();
    let mut made = joined(&paths, &manifests, at)?;
    let mut objects: BTreeMap<String, Object> = BTreeMap::new();
    let mut copied: Vec<String> = Vec::new();
    let result = (|| {
        for (source, l) in sources.iter().zip(&listed) {
            for shard in l.manifest.shards.iter().filter(|s| s.records > 0) {
                let dir = shard_dir(made.next_shard);
                made.next_shard += 1;
                for field in &made.fields {
                    let under = format!("{}/{}/", shard.dir, field.name);
                    for (rel, object) in
                        l.objects.objects.range(under.clone()..).take_while(|(k, _)| k.starts_with(&under))
                    {
                        let name = format!("{dir}/{}/{}", field.name, &rel[under.len()..]);
                        let etag = copy_object(source, object.stored_at(rel), out, &name, object.stored)?;
                        copied.push(name.clone());
                        objects.insert(name, Object { etag, key: None, ..object.clone() });
                    }
                }
                made.shards.push(ShardEntry { dir, records: shard.records, long: shard.long.clone() });
            }
        }
        made.check().map_err(|e| DatasetError::at(at, None, e))?;
        let listing = inline_listing(at, &made, std::mem::take(&mut objects))?;
        if !try_put_listing(out, &listing, None).map_err(fail)? {
            return Err(DatasetError::at(
                at,
                None,
                Error::Locked(format!(
                    "another writer put a dataset at {} while concat ran; nothing was made",
                    out.url()
                )),
            ));
        }
        Ok(())
    })();
    if let Err(e) = result {
        discard_uploads(out, &copied);
        return Err(e);
    }
    Ok(Concatenated { samples: made.len(), shards: made.shards.len(), linked: 0, copied: copied.len() as u64 })
}

/// Copies object `from` of `source` to `to` under `out` (one bucket: the server copies)
/// and returns the copy's ETag, which the new listing pins (a copy of an object uploaded
/// in parts has another ETag than the original).
fn copy_object(
    source: &Remote,
    from: &str,
    out: &Remote,
    to: &str,
    stored: u64,
) -> Result<Option<String>, DatasetError> {
    let (src, dst) = (source.path(from), out.path(to));
    let what = format!("copy {} to {}", source.shown(from), out.shown(to));
    let fail = |e: IoError| DatasetError::at(Path::new(out.url()), None, Error::Io(e));
    out.block(out.retrying(&what, || {
        let (client, src, dst) = (out.client().clone(), src.clone(), dst.clone());
        async move { client.copy(&src, &dst).await }
    }))
    .map_err(fail)?;
    let head = out
        .block(out.retrying(&format!("read {}", out.shown(to)), || {
            let (client, dst) = (out.client().clone(), dst.clone());
            async move { client.head(&dst).await }
        }))
        .map_err(fail)?;
    if head.size != stored {
        return Err(fail(IoError::new(
            IoErrorKind::Other,
            what,
            format!("the copy holds {} bytes where the source's listing says {stored}", head.size),
        )));
    }
    Ok(head.e_tag)
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
