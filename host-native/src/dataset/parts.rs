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
//!   failed conversion, sends only what changed. The commit writes `dataset.json`, then
//!   `remote.json` listing every part's objects, created only if no listing is there: until
//!   then the prefix is not a dataset (docs/format.md, "remote.json").

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use zrecord_core::dataset::{Field, Manifest, ShardEntry, MANIFEST_FILE};
use zrecord_core::error::{Error, IoError, IoErrorKind};

use super::write::describe;
use super::{Dataset, DatasetError, DatasetOptions, DatasetWriter, WriteOptions};
use crate::remote::objects::{Object, Objects, LISTING, LISTING_VERSION};
use crate::remote::push::{put_listing, put_small, read_listing, upload_tree};
use crate::remote::Remote;

/// What a finished part hands to the commit (as JSON, through the engine that ran it).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Part {
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
}

impl Part {
    /// The part as JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a part always serialises")
    }

    /// A part from [`Part::to_json`]'s text.
    pub fn from_json(text: &str) -> Result<Part, DatasetError> {
        serde_json::from_str(text).map_err(|e| {
            DatasetError::at(Path::new("."), None, Error::InvalidArgument(format!("not a zrecord part: {e}")))
        })
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

/// The name of the `j`-th shard of task `task`'s part in an object store.
fn uploaded_shard(task: u64, j: usize) -> String {
    if j == 0 {
        format!("shard-{task:06}")
    } else {
        format!("shard-{task:06}.{j}")
    }
}

/// The manifest of the committed part at `path`, after opening it (which checks every
/// store against it); a part must be a dataset of named fields.
pub(super) fn part_manifest(path: &Path) -> Result<Manifest, DatasetError> {
    let dataset = Dataset::open_with(path, DatasetOptions { read_only: Some(true), ..DatasetOptions::default() })?;
    dataset.manifest().cloned().ok_or_else(|| {
        DatasetError::at(
            path,
            None,
            Error::InvalidArgument("a part must be a dataset of named fields (dataset.json)".into()),
        )
    })
}

/// Finishes task `task`'s part once its dataset at `local` is committed: for an object
/// store (`remote`), uploads its shards; for a local destination, `local` must be the
/// destination's [`part_dir`] and nothing moves until the commit.
pub fn finish_part(local: &Path, remote: Option<&Remote>, task: u64) -> Result<Part, DatasetError> {
    let manifest = part_manifest(local)?;
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
            task,
            fields: manifest.fields,
            shards: manifest.shards,
            dir: Some(expected),
            objects: BTreeMap::new(),
        });
    };
    let mut shards = Vec::with_capacity(manifest.shards.len());
    let mut objects = BTreeMap::new();
    for (j, shard) in manifest.shards.iter().enumerate() {
        let name = uploaded_shard(task, j);
        let up = upload_tree(&local.join(&shard.dir), remote, &name, &mut |_, _| {})
            .map_err(|e| DatasetError::at(&local.join(&shard.dir), None, e))?;
        objects.extend(up.objects);
        shards.push(ShardEntry { dir: name, records: shard.records });
    }
    Ok(Part { task, fields: manifest.fields, shards, dir: None, objects })
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

/// Commits `parts`, uploaded to `remote`, as one dataset: `dataset.json`, then the listing,
/// created only if the prefix holds no dataset yet. Returns the number of samples.
pub fn commit_remote(remote: &Remote, parts: &[Part]) -> Result<u64, DatasetError> {
    let at = Path::new(remote.url());
    let (sorted, fields) = in_order(at, parts)?;
    if read_listing(remote).map_err(|e| DatasetError::at(at, None, e))?.is_some() {
        return Err(DatasetError::at(
            at,
            None,
            Error::Io(IoError::new(
                IoErrorKind::Other,
                format!("write {}", remote.url()),
                "a dataset is already there (remote.json); write to a new prefix",
            )),
        ));
    }
    let mut manifest = Manifest::new(fields).map_err(|e| DatasetError::at(at, None, e))?;
    let mut objects = BTreeMap::new();
    for p in &sorted {
        if p.dir.is_some() {
            return Err(DatasetError::at(
                at,
                None,
                Error::InvalidArgument(format!("task {}'s part was written locally, not uploaded", p.task)),
            ));
        }
        manifest.shards.extend(p.shards.iter().cloned());
        objects.extend(p.objects.iter().map(|(k, v)| (k.clone(), v.clone())));
        manifest.next_shard = manifest.next_shard.max(p.task + 1);
    }
    manifest.check().map_err(|e| DatasetError::at(at, None, e))?;
    let entry =
        put_small(remote, MANIFEST_FILE, manifest.to_json().into_bytes()).map_err(|e| DatasetError::at(at, None, e))?;
    objects.insert(MANIFEST_FILE.to_owned(), entry);
    let listing = Objects { version: LISTING_VERSION, kind: "dataset".into(), objects };
    put_listing(remote, &listing, None).map_err(|e| DatasetError::at(Path::new(&remote.shown(LISTING)), None, e))?;
    Ok(manifest.len())
}
