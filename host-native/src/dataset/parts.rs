//! A dataset written in parts: many workers (Ray Data's write tasks, `zrecord.ray`) each
//! write one part, a small dataset of their own, and one process commits them all at once.
//!
//! A part is named by its task number, and the commit lists exactly one part per task: a
//! task that Ray runs again (its worker died, or it raised and was retried) replaces its
//! own part, so every sample is listed once whatever was retried.
//!
//! - **Local destination.** A task writes its part as the dataset `DEST/.zrecord-part-TASK`
//!   (a dot folder: readers, pushes and writers' leftover sweeps skip it). The commit takes
//!   the destination's writer lock, moves each part's shards in as new shards (renames, in
//!   task order) and writes `dataset.json` once ([`DatasetWriter::adopt`]); an existing
//!   dataset of the same fields gains the samples, as `Dataset.write` appends.
//! - **Object store.** A task writes its part in a local scratch folder and uploads each of
//!   its shards as `shard-TASK` (`shard-TASK.J` past its first): [`upload_tree`] skips the
//!   objects already there with the same bytes, so a retried task, or the re-run of a
//!   failed conversion, sends only what changed. The commit writes `remote.json` listing
//!   every part's objects with the manifest inside it (listing version 2), created only if
//!   no listing is there: until then the prefix is not a dataset (docs/format.md,
//!   "remote.json"). No `dataset.json` object goes up beside it: two writers creating the
//!   dataset at once would both write it, and the loser's would replace the one the
//!   winner's listing names.
//! - **Appending in an object store.** Each write has a random tag, and its parts' shards
//!   go up as `shard-TASK-TAG`, so they never meet the dataset's shards or another write's.
//!   The commit then replaces the listing alone with one that holds the grown manifest
//!   (listing version 2), on the condition that the listing it read is still there; when
//!   another writer's commit came first, it reads the new listing and tries again. Two
//!   appenders both land, in some order, and a reader sees each write whole or not at all.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use zrecord_core::dataset::{Field, Manifest, ShardEntry, MANIFEST_FILE};
use zrecord_core::error::{Error, IoError, IoErrorKind};

use super::identity::{fold_rows, remote_identity, store_generations};
use super::manifest_io::describe;
use super::remote_edit::{inline_listing, parse_current};
use super::{Dataset, DatasetError, DatasetWriter, WriteOptions};
use crate::remote::objects::Object;
use crate::remote::push::{read_listing, try_put_listing, upload_tree};
use crate::remote::Remote;

/// Commits that lose the race for the listing to another writer's this many times in a
/// row give up.
const COMMIT_ATTEMPTS: u32 = 32;

/// What a finished part hands to the commit (as JSON, through the engine that ran it).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Part {
    /// The description's version, [`PART_VERSION`] (it outlives the job when kept at the
    /// destination, `saved_parts.rs`).
    #[serde(default = "part_version")]
    pub version: u32,
    /// The task that wrote it; one part per task is committed.
    pub task: u64,
    /// Its fields (every part's must agree).
    pub fields: Vec<Field>,
    /// Its shards: on a local destination as they are named in the part's folder, in an
    /// object store as uploaded (`shard-TASK...`).
    pub shards: Vec<ShardEntry>,
    /// The part's folder in the local destination (`.zrecord-part-TASK`), or none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dir: Option<String>,
    /// The uploaded objects, by name under the destination prefix (object stores only).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub objects: BTreeMap<String, Object>,
    /// The generations of its stores, shard by shard in field order (object stores only):
    /// an append folds them into a dataset's row identity, as a local append does.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub generations: Vec<u64>,
}

/// The version of a part description this build writes and reads.
pub const PART_VERSION: u32 = 1;

fn part_version() -> u32 {
    PART_VERSION
}

impl Part {
    /// The part as JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a part always serialises")
    }

    /// A part from [`Part::to_json`]'s text.
    pub fn from_json(text: &str) -> Result<Part, DatasetError> {
        let bad = |why: String| DatasetError::at(Path::new("."), None, Error::InvalidArgument(why));
        let part: Part = serde_json::from_str(text).map_err(|e| bad(format!("not a zrecord part: {e}")))?;
        if part.version != PART_VERSION {
            return Err(bad(format!(
                "a part of version {} (this build reads version {PART_VERSION}): commit with the zrecord that wrote it",
                part.version
            )));
        }
        Ok(part)
    }

    /// Samples in the part.
    pub fn len(&self) -> u64 {
        self.shards.iter().map(|s| s.records).sum()
    }

    /// True when the part holds no sample.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The folder task `task` writes its part into, inside a local destination.
pub fn part_dir(task: u64) -> String {
    format!(".zrecord-part-{task:06}")
}

/// The name of the `j`-th shard of task `task`'s part in an object store: `shard-TASK`
/// (`.J` past the first), with `-TAG` for a write that appends ([`write_tag`]).
fn uploaded_shard(task: u64, j: usize, tag: &str) -> String {
    let mut name = format!("shard-{task:06}");
    if !tag.is_empty() {
        name = format!("{name}-{tag}");
    }
    if j > 0 {
        name = format!("{name}.{j}");
    }
    name
}

/// A fresh tag for a write that appends to a dataset in an object store: 16 random hex
/// digits, so two writers (two hosts, two processes, two writes) never name their shards
/// alike.
pub fn write_tag() -> String {
    format!("{:016x}", crate::remote::random_u64())
}

/// Finishes task `task`'s part once its dataset at `local` is committed: for an object
/// store (`remote`), uploads its shards (named with `tag` when the write appends, see
/// [`write_tag`]; empty otherwise); for a local destination, `local` must be the
/// destination's [`part_dir`] and nothing moves until the commit.
pub fn finish_part(local: &Path, remote: Option<&Remote>, task: u64, tag: &str) -> Result<Part, DatasetError> {
    let manifest = super::manifest_io::part_manifest(local)?;
    let Some(remote) = remote else {
        let expected = part_dir(task);
        if local.file_name().and_then(|n| n.to_str()) != Some(expected.as_str()) {
            return Err(DatasetError::at(
                local,
                None,
                Error::InvalidArgument(format!("task {task}'s part belongs in the destination's {expected}")),
            ));
        }
        return Ok(Part {
            version: PART_VERSION,
            task,
            fields: manifest.fields,
            shards: manifest.shards,
            dir: Some(expected),
            objects: BTreeMap::new(),
            generations: Vec::new(),
        });
    };
    if !tag.is_empty() && (tag.len() > 32 || !tag.bytes().all(|b| b.is_ascii_alphanumeric())) {
        return Err(DatasetError::at(
            local,
            None,
            Error::InvalidArgument(format!("write tag {tag:?}: at most 32 letters and digits")),
        ));
    }
    let dirs: Vec<String> = manifest.shards.iter().map(|s| s.dir.clone()).collect();
    let generations = store_generations(local, &manifest.fields, &dirs)?;
    let mut shards = Vec::with_capacity(manifest.shards.len());
    let mut objects = BTreeMap::new();
    for (j, shard) in manifest.shards.iter().enumerate() {
        let name = uploaded_shard(task, j, tag);
        let up = upload_tree(&local.join(&shard.dir), remote, &name, &mut |_, _| {})
            .map_err(|e| DatasetError::at(&local.join(&shard.dir), None, e))?;
        objects.extend(up.objects);
        shards.push(ShardEntry { dir: name, records: shard.records, long: shard.long.clone() });
    }
    Ok(Part { version: PART_VERSION, task, fields: manifest.fields, shards, dir: None, objects, generations })
}

/// The parts in task order, after checking that each task has one part and that all
/// agree on their fields.
fn in_order<'a>(at: &Path, parts: &'a [Part]) -> Result<(Vec<&'a Part>, Vec<Field>), DatasetError> {
    let bad = |what: String| DatasetError::at(at, None, Error::InvalidArgument(what));
    let Some(first) = parts.first() else {
        return Err(bad("no part was written (the input held no samples)".into()));
    };
    let mut sorted: Vec<&Part> = parts.iter().collect();
    sorted.sort_by_key(|p| p.task);
    for w in sorted.windows(2) {
        if w[0].task == w[1].task {
            return Err(bad(format!("task {} handed in two parts", w[0].task)));
        }
    }
    let reference = Manifest::new(first.fields.clone()).map_err(|e| bad(e.to_string()))?;
    for p in &sorted {
        if !reference.accepts(&p.fields) {
            return Err(bad(format!(
                "task {}'s fields {} differ from task {}'s {}: every block must have the same columns and types",
                p.task,
                describe(&p.fields),
                first.task,
                describe(&first.fields)
            )));
        }
    }
    Ok((sorted, first.fields.clone()))
}

/// Commits `parts` into the local dataset `dest` (created, or appended to when it holds the
/// same fields), all at once; the parts' folders are removed. Returns the dataset.
pub fn commit_local(dest: &Path, parts: &[Part], options: WriteOptions) -> Result<Dataset, DatasetError> {
    let (sorted, fields) = in_order(dest, parts)?;
    let mut writer = DatasetWriter::open(dest, fields, options)?;
    for p in &sorted {
        let Some(dir) = &p.dir else {
            return Err(DatasetError::at(
                dest,
                None,
                Error::InvalidArgument(format!(
                    "task {}'s part was uploaded, not written under {}",
                    p.task,
                    dest.display()
                )),
            ));
        };
        writer.adopt(&dest.join(dir))?;
    }
    let dataset = writer.commit()?;
    for p in &sorted {
        if let Some(dir) = &p.dir {
            let _ = std::fs::remove_dir_all(dest.join(dir));
        }
    }
    Ok(dataset)
}

/// Commits `parts`, uploaded to `remote`, as one dataset: a new one (a listing holding the
/// manifest, created only if the prefix holds no dataset yet), or, with `append`, added
/// to the dataset there when there is one (its fields must be the parts'): the listing
/// replaced by one holding the grown manifest, conditionally, again after another writer's
/// commit came first. Returns the number of samples committed.
pub fn commit_remote(remote: &Remote, parts: &[Part], append: bool) -> Result<u64, DatasetError> {
    let at = Path::new(remote.url());
    let fail = |e: IoError| DatasetError::at(at, None, Error::Io(e));
    let (sorted, fields) = in_order(at, parts)?;
    if let Some(p) = sorted.iter().find(|p| p.dir.is_some()) {
        return Err(DatasetError::at(
            at,
            None,
            Error::InvalidArgument(format!("task {}'s part was written locally, not uploaded", p.task)),
        ));
    }
    let added: u64 = sorted.iter().map(|p| p.len()).sum();
    for _ in 0..COMMIT_ATTEMPTS {
        let previous = read_listing(remote).map_err(fail)?;
        let Some(previous) = previous else {
            // A new dataset: the manifest inside the listing (version 2). A dataset.json
            // object beside it would be overwritten by a second writer creating the
            // dataset at the same moment, under the first one's listing.
            let mut manifest = Manifest::new(fields.clone()).map_err(|e| DatasetError::at(at, None, e))?;
            let objects = grow(at, &mut manifest, &sorted)?;
            let listing = inline_listing(at, &manifest, objects)?;
            if try_put_listing(remote, &listing, None).map_err(fail)? {
                return Ok(added);
            }
            // Another writer created the dataset meanwhile.
            continue;
        };
        if !append {
            return Err(fail(IoError::new(
                IoErrorKind::Other,
                format!("write {}", remote.url()),
                "a dataset is already there (remote.json); write to a new prefix, or add to it with mode=\"append\"",
            )));
        }
        let Some(listed) = parse_current(remote, previous, "append to")? else {
            // Another writer replaced the listing before its manifest was read.
            continue;
        };
        let mut manifest = listed.manifest.clone();
        if !manifest.accepts(&fields) {
            return Err(DatasetError::at(
                at,
                None,
                Error::InvalidArgument(format!(
                    "the dataset there has fields {}; the samples to append differ: {}",
                    describe(&manifest.fields),
                    manifest.field_differences(&fields)
                )),
            ));
        }
        // A state saved on the dataset as it is resumes on it grown (`Manifest::grown_from`).
        let before = remote_identity(remote, &manifest, None)?;
        manifest.grew_from(before);
        super::identity::keep_rows(&mut manifest, before);
        let mut objects = listed.objects.objects.clone();
        let stale = objects.remove(MANIFEST_FILE).is_some();
        objects.extend(grow(at, &mut manifest, &sorted)?);
        let grown = inline_listing(at, &manifest, objects)?;
        if try_put_listing(remote, &grown, Some(listed.previous)).map_err(fail)? {
            if stale {
                // The listing holds the manifest now: the dataset.json a push wrote is
                // nobody's, and a copy made around zr pull must not find it.
                remote.delete(MANIFEST_FILE).map_err(fail)?;
            }
            return Ok(added);
        }
    }
    Err(fail(IoError::new(
        IoErrorKind::Other,
        format!("write {}", remote.url()),
        format!(
            "other writers' commits came first {COMMIT_ATTEMPTS} times in a row; the parts are uploaded, commit again"
        ),
    )))
}

/// Adds the parts' shards to `manifest` (their names must be new to it), folds their
/// stores into its row identity, and returns their objects.
pub(super) fn grow(
    at: &Path,
    manifest: &mut Manifest,
    parts: &[&Part],
) -> Result<BTreeMap<String, Object>, DatasetError> {
    let mut objects = BTreeMap::new();
    for p in parts {
        if let Some(shard) = p.shards.iter().find(|s| manifest.shards.iter().any(|t| t.dir == s.dir)) {
            return Err(DatasetError::at(
                at,
                None,
                Error::InvalidArgument(format!(
                    "task {}'s shard {} is in the dataset already: an append names its shards with a write tag",
                    p.task, shard.dir
                )),
            ));
        }
        manifest.shards.extend(p.shards.iter().cloned());
        objects.extend(p.objects.iter().map(|(k, v)| (k.clone(), v.clone())));
        manifest.next_shard = manifest.next_shard.max(p.task + 1);
        fold_rows(manifest, &p.generations);
    }
    manifest.check().map_err(|e| DatasetError::at(at, None, e))?;
    Ok(objects)
}
