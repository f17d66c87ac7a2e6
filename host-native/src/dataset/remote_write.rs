//! A dataset written into an object store by one process (`Dataset.write(url, ...)`,
//! [`write_remote`]): the samples are written into a local folder by the usual writer, then
//! go up as one part and are committed as a part of a distributed write is (`parts.rs`),
//! so there is one commit rule for a bucket whoever writes.
//!
//! The modes are the local ones ([`WriteMode`]): `Create` refuses a prefix that holds a
//! dataset or store (checked before any upload, and again by the commit), `Append` adds the
//! samples after the dataset's own (or creates it), and `Overwrite` replaces the dataset
//! whole: the new listing names only the new shards, replacing the old listing on the
//! condition that it is still there, and then the old objects are deleted, so a reader
//! sees the old dataset or the new one. The uploads of a write that fails before its
//! listing is in place are deleted; a write is all or nothing.

use std::path::Path;

use zrecord_core::dataset::Manifest;
use zrecord_core::error::{Error, IoError, IoErrorKind};

use super::parts::{commit_remote, finish_part, grow, Part};
use super::remote_edit::{discard_uploads, parse_current, replace};
use super::{DatasetError, WriteMode};
use crate::remote::objects::Objects;
use crate::remote::push::read_listing;
use crate::remote::Remote;

/// Uploads the committed local dataset at `local` into `remote` by `mode` (see the module
/// docs) and returns the number of samples written.
pub fn write_remote(local: &Path, remote: &Remote, mode: WriteMode) -> Result<u64, DatasetError> {
    let at = Path::new(remote.url());
    let fail = |e: IoError| DatasetError::at(at, None, Error::Io(e));
    if mode == WriteMode::Create && read_listing(remote).map_err(fail)?.is_some() {
        return Err(fail(IoError::new(
            IoErrorKind::Other,
            format!("write {}", remote.url()),
            "a dataset is already there (remote.json): write with mode=\"append\" to add to it, or \
             mode=\"overwrite\" to replace it",
        )));
    }
    let part = finish_part(local, Some(remote), 0, &super::write_tag())?;
    let uploaded: Vec<String> = part.objects.iter().map(|(k, o)| o.stored_at(k).to_owned()).collect();
    let samples = part.len();
    let result = match mode {
        WriteMode::Create => commit_remote(remote, std::slice::from_ref(&part), false),
        WriteMode::Append => commit_remote(remote, std::slice::from_ref(&part), true),
        WriteMode::Overwrite => overwrite(remote, &part).map(|()| samples),
    };
    if result.is_err() && !listed_now(remote, &uploaded) {
        discard_uploads(remote, &uploaded);
    }
    result
}

/// Replaces the dataset at `remote` by the one `part` holds (a new dataset when there is
/// none).
fn overwrite(remote: &Remote, part: &Part) -> Result<(), DatasetError> {
    let at = Path::new(remote.url());
    let fail = |e: IoError| DatasetError::at(at, None, Error::Io(e));
    let Some(previous) = read_listing(remote).map_err(fail)? else {
        return commit_remote(remote, std::slice::from_ref(part), false).map(|_| ());
    };
    let Some(listed) = parse_current(remote, previous, "overwrite")? else {
        return Err(DatasetError::at(
            at,
            None,
            Error::Locked(format!(
                "another writer changed the dataset at {} while this overwrite ran; nothing was changed: run it again",
                remote.url()
            )),
        ));
    };
    let mut manifest = Manifest::new(part.fields.clone()).map_err(|e| DatasetError::at(at, None, e))?;
    let objects = grow(at, &mut manifest, &[part])?;
    // The uploads are kept by the caller on failure: it deletes them unless listed.
    replace(remote, listed, &manifest, objects, &[], "overwrite")
}

/// Whether the listing at `remote` names any of `names` (a write that failed after its
/// listing went in, say deleting what it replaced, is committed: its uploads stay).
fn listed_now(remote: &Remote, names: &[String]) -> bool {
    let Ok(Some((bytes, _, _))) = read_listing(remote) else { return false };
    let Ok(listing) = Objects::from_json(&bytes, &remote.shown(crate::remote::objects::LISTING)) else {
        return false;
    };
    listing.objects.iter().any(|(k, o)| names.iter().any(|n| n == o.stored_at(k)))
}
