//! Parts written by separate processes (a `multiprocessing` pool, a Slurm array job, hosts
//! that share nothing but the destination), kept at the destination until one process
//! commits them all (`zrecord.write_part`, `zrecord.commit_parts`).
//!
//! `parts.rs` hands a part to its commit through the engine that ran it (Ray returns it);
//! here no engine carries it, so the destination keeps it:
//!
//! - **Local destination.** Part `TASK` is the dataset `DEST/.zrecord-part-TASK` (as a Ray
//!   task's), written by its own process; its `dataset.json` is what says it finished.
//! - **Object store.** Part `TASK`'s shards go up as `shard-TASK-TAG` (a fresh tag per
//!   attempt, so no attempt overwrites an object another attempt or the dataset lists), then
//!   its [`Part`] as the object `.zrecord-parts/part-TASK.json`. A later attempt of the same
//!   task replaces that record and deletes the earlier attempt's objects (never one that a
//!   listing names). Readers never see any of this: they read what `remote.json` lists.
//!
//! The commit finds every part there, checks them against the tasks the caller expected
//! (a task that did not finish is named, not skipped), commits them as `parts.rs` does, and
//! then removes the records. A commit that stopped after the listing was replaced and before
//! the records were removed is finished by running it again: parts whose shards the dataset
//! lists already are counted as committed, not added twice.

use std::collections::BTreeSet;
use std::path::Path;

use zrecord_core::dataset::MANIFEST_FILE;
use zrecord_core::error::{Error, IoError};

use super::parts::{commit_local, commit_remote, finish_part, part_dir, write_tag, Part};
use super::remote_edit::{discard_uploads, parse_current};
use super::{DatasetError, WriteOptions};
use crate::remote::push::{read_listing, read_object};
use crate::remote::Remote;

/// The folder, under a destination prefix, that holds the saved parts.
pub const SAVED_PARTS: &str = ".zrecord-parts";

/// The object that holds task `task`'s part.
fn record_name(task: u64) -> String {
    format!("{SAVED_PARTS}/part-{task:06}.json")
}

/// Uploads the part dataset at `local` (committed) as task `task`'s part of the dataset at
/// `remote`, and saves it there for [`commit_saved`]. Returns the part.
pub fn save_part(local: &Path, remote: &Remote, task: u64) -> Result<Part, DatasetError> {
    let at = Path::new(remote.url());
    let fail = |e: IoError| DatasetError::at(at, None, Error::Io(e));
    let part = finish_part(local, Some(remote), task, &write_tag())?;
    let name = record_name(task);
    let earlier = read_object(remote, &name).map_err(fail)?;
    remote.put(&name, part.to_json().into_bytes()).map_err(fail)?;
    if let Some(earlier) = earlier.and_then(|(bytes, _, _)| Part::from_json(&String::from_utf8_lossy(&bytes)).ok()) {
        // The earlier attempt's shards, unless a listing names them (a commit took that
        // attempt and stopped before removing its record).
        let listed = listed_names(remote)?;
        let stale: Vec<String> = earlier
            .objects
            .keys()
            .filter(|k| !part.objects.contains_key(*k) && !listed.contains(*k))
            .cloned()
            .collect();
        discard_uploads(remote, &stale);
    }
    Ok(part)
}

/// The names of the objects the listing at `remote` names (none when there is no listing).
fn listed_names(remote: &Remote) -> Result<BTreeSet<String>, DatasetError> {
    let at = Path::new(remote.url());
    for _ in 0..8 {
        let Some(previous) = read_listing(remote).map_err(|e| DatasetError::at(at, None, Error::Io(e)))? else {
            return Ok(BTreeSet::new());
        };
        // None: another writer replaced the listing while it was read; read it again.
        if let Some(listed) = parse_current(remote, previous, "commit parts to")? {
            return Ok(listed.objects.objects.keys().cloned().collect());
        }
    }
    Err(DatasetError::at(
        at,
        None,
        Error::Locked(format!("other writers kept changing {} while it was read", remote.url())),
    ))
}

/// What [`commit_saved`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CommittedParts {
    /// The tasks whose parts this commit added, in order.
    pub tasks: Vec<u64>,
    /// The samples they added.
    pub samples: u64,
    /// Tasks whose parts an earlier commit had added already (it stopped before cleaning up).
    pub earlier: Vec<u64>,
}

/// Where the parts wait: a local destination or an object store prefix.
pub enum PartsAt<'a> {
    /// A local destination directory.
    Local(&'a Path),
    /// A destination in an object store.
    Remote(&'a Remote),
}

/// Commits every part saved at `dest` as one dataset (created, or, with `append`, added to
/// the dataset there), in task order. With `expected`, exactly those tasks must have
/// finished parts: a missing one is an error naming it, and so is a part nobody expected.
pub fn commit_saved(dest: PartsAt<'_>, expected: Option<&[u64]>, append: bool) -> Result<CommittedParts, DatasetError> {
    match dest {
        PartsAt::Local(path) => {
            let parts = local_parts(path)?;
            let tasks: Vec<u64> = parts.iter().map(|p| p.task).collect();
            check_expected(path, &tasks, expected)?;
            if !append && path.join(MANIFEST_FILE).exists() {
                return Err(DatasetError::at(
                    path,
                    None,
                    Error::InvalidArgument("a dataset is already there; mode=\"append\" adds the parts to it".into()),
                ));
            }
            let samples = parts.iter().map(|p| p.len()).sum();
            commit_local(path, &parts, WriteOptions::default())?;
            Ok(CommittedParts { tasks, samples, earlier: Vec::new() })
        }
        PartsAt::Remote(remote) => {
            let at = Path::new(remote.url());
            let parts = remote_parts(remote)?;
            let all: Vec<u64> = parts.iter().map(|p| p.task).collect();
            check_expected(at, &all, expected)?;
            let listed = listed_names(remote)?;
            let (earlier, new): (Vec<Part>, Vec<Part>) =
                parts.into_iter().partition(|p| !p.objects.is_empty() && p.objects.keys().all(|k| listed.contains(k)));
            let mut done = CommittedParts {
                tasks: new.iter().map(|p| p.task).collect(),
                samples: new.iter().map(|p| p.len()).sum(),
                earlier: earlier.iter().map(|p| p.task).collect(),
            };
            if !new.is_empty() {
                // A part that a dataset there already lists is refused by the commit itself.
                done.samples = commit_remote(remote, &new, append)?;
            }
            for task in all {
                remote.delete(&record_name(task)).map_err(|e| DatasetError::at(at, None, Error::Io(e)))?;
            }
            Ok(done)
        }
    }
}

/// Every part written under the local destination `dest`, in task order; a part folder
/// without a committed dataset (its writer failed, or is still running) is an error.
fn local_parts(dest: &Path) -> Result<Vec<Part>, DatasetError> {
    let io = |e: std::io::Error| DatasetError::at(dest, None, Error::Io(IoError::from_std(e, "list the parts")));
    let mut parts = Vec::new();
    for entry in std::fs::read_dir(dest).map_err(io)? {
        let name = entry.map_err(io)?.file_name().to_string_lossy().into_owned();
        let Some(task) = name.strip_prefix(".zrecord-part-").and_then(|t| t.parse::<u64>().ok()) else {
            continue;
        };
        if name != part_dir(task) {
            continue;
        }
        let dir = dest.join(&name);
        if !dir.join(MANIFEST_FILE).is_file() {
            return Err(DatasetError::at(
                &dir,
                None,
                Error::InvalidArgument(format!(
                    "part {task} did not finish (no {MANIFEST_FILE}): its writer failed or is still running; \
                     write it again"
                )),
            ));
        }
        parts.push(finish_part(&dir, None, task, "")?);
    }
    parts.sort_by_key(|p| p.task);
    Ok(parts)
}

/// Every part saved at `remote`, in task order.
pub(super) fn remote_parts(remote: &Remote) -> Result<Vec<Part>, DatasetError> {
    let at = Path::new(remote.url());
    let fail = |e: IoError| DatasetError::at(at, None, Error::Io(e));
    let folder = remote.child(SAVED_PARTS);
    let prefix = folder.path("");
    let listed = remote
        .block(remote.retrying(&format!("list {}", folder.url()), || {
            let client = remote.client().clone();
            let prefix = prefix.clone();
            async move { client.list_with_delimiter(Some(&prefix)).await }
        }))
        .map_err(fail)?;
    let mut parts = Vec::new();
    for object in &listed.objects {
        let Some(name) = object.location.filename() else { continue };
        if !name.starts_with("part-") || !name.ends_with(".json") {
            continue;
        }
        let Some((bytes, _, _)) = read_object(&folder, name).map_err(fail)? else {
            continue;
        };
        let part = Part::from_json(&String::from_utf8_lossy(&bytes))
            .map_err(|e| DatasetError::at(Path::new(&folder.shown(name)), None, e.source))?;
        parts.push(part);
    }
    parts.sort_by_key(|p| p.task);
    Ok(parts)
}

/// Fails unless the finished `tasks` are exactly the `expected` ones (when given).
fn check_expected(at: &Path, tasks: &[u64], expected: Option<&[u64]>) -> Result<(), DatasetError> {
    let Some(expected) = expected else {
        return Ok(());
    };
    let have: BTreeSet<u64> = tasks.iter().copied().collect();
    let want: BTreeSet<u64> = expected.iter().copied().collect();
    let missing: Vec<String> = want.difference(&have).map(u64::to_string).collect();
    let extra: Vec<String> = have.difference(&want).map(u64::to_string).collect();
    let mut why = Vec::new();
    if !missing.is_empty() {
        why.push(format!(
            "part(s) {} were not written (their tasks failed or have not run): write them, then commit",
            missing.join(", ")
        ));
    }
    if !extra.is_empty() {
        why.push(format!(
            "part(s) {} are there but were not expected (left by an earlier write?): delete them or expect them",
            extra.join(", ")
        ));
    }
    if why.is_empty() {
        Ok(())
    } else {
        Err(DatasetError::at(at, None, Error::InvalidArgument(why.join("; "))))
    }
}
