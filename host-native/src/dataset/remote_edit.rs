//! Changes to a dataset of named fields in an object store: samples deleted
//! ([`delete_remote`]), fields dropped ([`drop_field_remote`]) and added
//! ([`super::FieldAdder::open_remote`]).
//!
//! Pushed objects are never rewritten (a reader pins each one by its ETag), so a change
//! works as an append does (`parts.rs`): what is new goes up under new names, then the
//! listing is replaced by one holding the changed manifest (listing version 2), on the
//! condition that the listing it read is still there; only then are the objects it no
//! longer lists deleted. A change that finds another writer's listing in place of the one
//! it read changes nothing (its uploads are removed) and says to run it again.
//!
//! - **Delete.** Each shard holding a deleted sample is fetched into a scratch folder, and
//!   the local delete (`delete.rs`) copies it there without them, field by field; the copy
//!   goes up as a new shard (`shard-N-TAG`, see [`super::write_tag`]), the listing names it
//!   in the old shard's place, and the old shard's objects are deleted: when the call
//!   returns, a deleted sample's bytes are in no object of the dataset. Readers that opened
//!   the dataset before read the objects they pinned until those go, then fail naming them.
//! - **Drop a field.** The listing without the field (and its objects) replaces the old
//!   one; then its objects are deleted.
//! - **Add a field.** Its stores are written in a scratch folder (`columns.rs`), uploaded
//!   under `SHARD/FIELD.TAG/`, and listed at `SHARD/FIELD/` with that name as their
//!   [`Object::key`]: a second adder of the same name, or a re-run after a failure, uploads
//!   under its own tag and never overwrites an object a listing names.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use zrecord_core::dataset::{Field, Manifest, ShardEntry, MANIFEST_FILE};
use zrecord_core::error::{Error, IoError, IoErrorKind};

use super::delete::{delete_samples, sorted_in_range, Deleted};
use super::manifest_io::{publish, read_manifest};
use super::DatasetError;
use crate::remote::objects::{Object, Objects, LISTING, LISTING_VERSION_INLINE};
use crate::remote::push::{
    fetch_object, missing_listing, read_listed_manifest, read_listing, try_put_listing, upload_tree, Listing,
};
use crate::remote::Remote;

/// The dataset listed at a prefix as a change found it.
pub(super) struct Listed {
    /// The listing as read: the condition of the replacing put.
    pub previous: Listing,
    pub objects: Objects,
    pub manifest: Manifest,
}

/// Reads the dataset of named fields listed at `remote`, failing clearly when there is
/// none or it is a single store.
pub(super) fn read_dataset(remote: &Remote, doing: &str) -> Result<Listed, DatasetError> {
    let at = Path::new(remote.url());
    let fail = |e: IoError| DatasetError::at(at, None, Error::Io(e));
    for _ in 0..READ_ATTEMPTS {
        let Some(previous) = read_listing(remote).map_err(fail)? else {
            return Err(fail(missing_listing(remote, doing)));
        };
        if let Some(listed) = parse_current(remote, previous, doing)? {
            return Ok(listed);
        }
    }
    Err(DatasetError::at(
        at,
        None,
        Error::Locked(format!(
            "other writers changed the dataset at {} {READ_ATTEMPTS} times while it was read",
            remote.url()
        )),
    ))
}

/// Reads of a listing that another writer replaced before its manifest was read, in a
/// row, before [`read_dataset`] gives up.
const READ_ATTEMPTS: u32 = 8;

/// [`parse_dataset`], or `None` when reading the manifest failed because another writer
/// replaced the listing meanwhile (the first append to a pushed dataset deletes the
/// `dataset.json` the push wrote): the caller reads the listing again.
pub(super) fn parse_current(remote: &Remote, previous: Listing, doing: &str) -> Result<Option<Listed>, DatasetError> {
    let read = previous.0.clone();
    match parse_dataset(remote, previous, doing) {
        Ok(listed) => Ok(Some(listed)),
        Err(e) => {
            let now =
                read_listing(remote).map_err(|e| DatasetError::at(Path::new(remote.url()), None, Error::Io(e)))?;
            match now {
                Some((bytes, _, _)) if bytes != read => Ok(None),
                _ => Err(e),
            }
        }
    }
}

/// [`read_dataset`] with the listing already read.
pub(super) fn parse_dataset(remote: &Remote, previous: Listing, doing: &str) -> Result<Listed, DatasetError> {
    let at = Path::new(remote.url());
    let fail = |e: IoError| DatasetError::at(at, None, Error::Io(e));
    let objects = Objects::from_json(&previous.0, &remote.shown(LISTING)).map_err(fail)?;
    if objects.kind != "dataset" {
        return Err(fail(IoError::new(
            IoErrorKind::Other,
            format!("{doing} {}", remote.url()),
            "a single store (loaderx layout) is there, not a dataset of named fields: change it locally and push it",
        )));
    }
    let text = read_listed_manifest(remote, &objects).map_err(fail)?;
    let manifest = Manifest::from_json(&text).map_err(|e| DatasetError::in_metadata(&at.join(MANIFEST_FILE), e))?;
    Ok(Listed { previous, objects, manifest })
}

/// The listing of version 2 that holds `manifest` over `objects` (never `dataset.json`).
pub(super) fn inline_listing(
    at: &Path,
    manifest: &Manifest,
    mut objects: BTreeMap<String, Object>,
) -> Result<Objects, DatasetError> {
    objects.remove(MANIFEST_FILE);
    let value = serde_json::from_str(&manifest.to_json())
        .map_err(|e| DatasetError::at(at, None, Error::InvalidArgument(format!("the changed manifest: {e}"))))?;
    Ok(Objects { version: LISTING_VERSION_INLINE, kind: "dataset".into(), objects, manifest: Some(value) })
}

/// Deletes the objects this change uploaded, when it fails or is overtaken: best effort
/// (an object left behind is listed by no one and costs only its bytes).
pub(super) fn discard_uploads(remote: &Remote, keys: &[String]) {
    for key in keys {
        let _ = remote.delete(key);
    }
}

/// Replaces the listing `listed` was read from with `manifest` over `objects`; on success
/// deletes every object the old listing named and the new one does not. When another
/// writer's listing came first, deletes `uploaded` and fails.
pub(super) fn replace(
    remote: &Remote,
    listed: Listed,
    manifest: &Manifest,
    objects: BTreeMap<String, Object>,
    uploaded: &[String],
    doing: &str,
) -> Result<(), DatasetError> {
    let at = Path::new(remote.url());
    let fail = |e: IoError| DatasetError::at(at, None, Error::Io(e));
    manifest.check().map_err(|e| DatasetError::at(at, None, e))?;
    let listing = inline_listing(at, manifest, objects)?;
    if !try_put_listing(remote, &listing, Some(listed.previous)).map_err(fail)? {
        discard_uploads(remote, uploaded);
        return Err(DatasetError::at(
            at,
            None,
            Error::Locked(format!(
                "another writer changed the dataset at {} while this {doing} ran; nothing was changed: run it again",
                remote.url()
            )),
        ));
    }
    // By where they are stored: a file listed anew may have kept its object.
    let kept: std::collections::BTreeSet<&str> = listing.objects.iter().map(|(k, o)| o.stored_at(k)).collect();
    let gone: Vec<&str> =
        listed.objects.objects.iter().map(|(k, o)| o.stored_at(k)).filter(|k| !kept.contains(k)).collect();
    for name in gone {
        remote.delete(name).map_err(|e| {
            fail(IoError::new(
                e.kind,
                e.context.clone(),
                format!(
                    "{}; the {doing} is committed, but this object, no longer listed, is still there: delete it \
                     by hand (running the {doing} again would change the dataset again)",
                    e.message
                ),
            ))
        })?;
    }
    Ok(())
}

/// Uploads the shard `entry` of the local dataset at `local` under a name of this change's
/// (`DIR-TAG`, never one a listing names), adds its objects to `objects` and their names to
/// `uploaded`, and returns its entry as the new listing names it. On failure deletes every
/// object in `uploaded` (this change's uploads so far).
pub(super) fn upload_shard(
    remote: &Remote,
    local: &Path,
    entry: &ShardEntry,
    tag: &str,
    objects: &mut BTreeMap<String, Object>,
    uploaded: &mut Vec<String>,
) -> Result<ShardEntry, DatasetError> {
    let name = format!("{}-{tag}", entry.dir);
    let up = match upload_tree(&local.join(&entry.dir), remote, &name, &mut |_, _| {}) {
        Ok(up) => up,
        Err(e) => {
            discard_uploads(remote, uploaded);
            return Err(DatasetError::at(Path::new(remote.url()), None, Error::Io(e)));
        }
    };
    uploaded.extend(up.objects.keys().cloned());
    objects.extend(up.objects);
    Ok(ShardEntry { dir: name, records: entry.records, long: entry.long.clone() })
}

/// A scratch folder removed when dropped.
pub(super) struct Scratch(PathBuf);

impl Scratch {
    /// The folder.
    pub(super) fn path(&self) -> &Path {
        &self.0
    }

    pub(super) fn new(doing: &str) -> Result<Scratch, DatasetError> {
        let dir = std::env::temp_dir().join(format!("zrecord-{doing}-{}", super::write_tag()));
        std::fs::create_dir(&dir).map_err(super::manifest_io::io_at(&dir, "create"))?;
        Ok(Scratch(dir))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Deletes samples `indices` (in any order, repeats allowed) from the dataset of named
/// fields at `remote`; see the module docs. `progress(done, total)` counts records copied.
/// An index out of range is an error naming it, before anything is written.
pub fn delete_remote(
    remote: &Remote,
    indices: &[u64],
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Deleted, DatasetError> {
    let at = Path::new(remote.url());
    let fail = |e: IoError| DatasetError::at(at, None, Error::Io(e));
    let listed = read_dataset(remote, "delete from")?;
    let manifest = &listed.manifest;
    let sorted = sorted_in_range(at, indices, manifest.len())?;
    if sorted.is_empty() {
        return Ok(Deleted { samples: 0, shards: 0, remaining: manifest.len() });
    }
    let layout = manifest.layout();
    let groups = layout.group(&sorted).expect("every index was checked to be in range");

    // The touched shards alone, as a local dataset whose sample k is the k-th of theirs.
    let scratch = Scratch::new("delete")?;
    let mut local = manifest.clone();
    local.shards = groups.iter().map(|(s, _, _)| manifest.shards[*s].clone()).collect();
    local.grown_from.clear();
    let mut local_indices = Vec::with_capacity(sorted.len());
    let mut start = 0u64;
    for (s, gone, _) in &groups {
        local_indices.extend(gone.iter().map(|r| start + r));
        start += manifest.shards[*s].records;
        let prefix = format!("{}/", manifest.shards[*s].dir);
        for (name, object) in listed.objects.objects.iter().filter(|(k, _)| k.starts_with(&prefix)) {
            fetch_object(remote, name, object, &scratch.0.join(name), &mut |_| {}).map_err(fail)?;
        }
    }
    publish(&scratch.0, &local)?;
    let done = delete_samples(&scratch.0, &local_indices, progress)?;
    let after = read_manifest(&scratch.0.join(MANIFEST_FILE))?;

    // Each copy goes up as a new shard; the listing names it in the old one's place.
    let tag = super::write_tag();
    let mut objects = listed.objects.objects.clone();
    for (s, _, _) in &groups {
        let prefix = format!("{}/", manifest.shards[*s].dir);
        objects.retain(|k, _| !k.starts_with(&prefix));
    }
    let mut copies = after.shards.iter();
    let mut uploaded: Vec<String> = Vec::new();
    let mut changed = manifest.clone();
    let mut shards = Vec::with_capacity(manifest.shards.len());
    for (s, entry) in manifest.shards.iter().enumerate() {
        let Some((_, gone, _)) = groups.iter().find(|(t, _, _)| *t == s) else {
            shards.push(entry.clone());
            continue;
        };
        if gone.len() as u64 == entry.records {
            continue;
        }
        let copy = copies.next().expect("the local delete keeps one shard per touched shard with samples left");
        shards.push(upload_shard(remote, scratch.path(), copy, &tag, &mut objects, &mut uploaded)?);
    }
    changed.shards = shards;
    changed.next_shard = after.next_shard.max(manifest.next_shard);
    // The rows changed: no earlier identity is a prefix of them, and the new stores'
    // generations went into `rows` (when it is kept) as in a local delete.
    changed.rows = after.rows;
    changed.grown_from.clear();
    replace(remote, listed, &changed, objects, &uploaded, "delete")?;
    Ok(Deleted { samples: done.samples, shards: done.shards, remaining: changed.len() })
}

/// Removes field `name` from the dataset of named fields at `remote`: the listing without
/// it replaces the old one, then its objects are deleted. Refuses the last field.
pub fn drop_field_remote(remote: &Remote, name: &str) -> Result<Field, DatasetError> {
    let at = Path::new(remote.url());
    let listed = read_dataset(remote, "drop a field of")?;
    let rows = super::identity::remote_identity(remote, &listed.manifest, None)?.generation;
    let mut changed = listed.manifest.clone();
    let field = changed
        .drop_field(name, rows)
        .map_err(|e| DatasetError::at(at, Some(name), Error::InvalidArgument(e.to_string())))?;
    let mut objects = listed.objects.objects.clone();
    for shard in &changed.shards {
        let prefix = format!("{}/{name}/", shard.dir);
        objects.retain(|k, _| !k.starts_with(&prefix));
    }
    replace(remote, listed, &changed, objects, &[], "drop_field")?;
    Ok(field)
}
