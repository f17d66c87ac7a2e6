//! Objects under a dataset's prefix in an object store that its listing does not name
//! ([`remote_leftovers`]), and their removal ([`remove_remote_leftovers`], `zr clean URL`):
//! what a change killed between its uploads and its new listing leaves (the bytes are
//! paid for and nobody reads them), the remote counterpart of the local leftovers in
//! `manifest_io.rs`.
//!
//! A bucket has no writer lock, so an object missing from the listing may also be a change
//! in flight: the uploads of an append, a delete or a compaction that has not replaced the
//! listing yet, or a part that `write_part` saved for a later `commit_parts`. Parts saved
//! at the destination (`.zrecord-parts/`) and every object one of them names are never
//! leftovers. For the rest only age tells: removal takes objects last written at least
//! `older_than` ago ([`LEFTOVER_AGE`] by default, a day: far longer than any one change's
//! uploads), as Delta's vacuum and Lance's clean-up keep files younger than a retention
//! period. The objects are listed before the listing is read, so an object that a change
//! committed meanwhile is found in the newer listing, not taken for a leftover.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, SystemTime};

use zrecord_core::error::{Error, IoError};

use super::saved_parts::{remote_parts, SAVED_PARTS};
use super::DatasetError;
use crate::remote::objects::{Objects, LISTING};
use crate::remote::push::{missing_listing, read_listing};
use crate::remote::Remote;

/// How long an unlisted object must have been left alone before
/// [`remove_remote_leftovers`] removes it by default: one day.
pub const LEFTOVER_AGE: Duration = Duration::from_secs(24 * 3600);

/// An object the dataset's listing does not name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leftover {
    /// Its name under the dataset's prefix.
    pub name: String,
    /// Its size in bytes.
    pub size: u64,
    /// How long ago it was last written (zero when the store's clock is ahead of ours).
    pub age: Duration,
}

/// The objects under `remote` (a dataset's prefix) that its listing, and the parts saved
/// there, do not name, by name.
pub fn remote_leftovers(remote: &Remote) -> Result<Vec<Leftover>, DatasetError> {
    let at = Path::new(remote.url());
    let fail = |e: IoError| DatasetError::at(at, None, Error::Io(e));
    // Listed first: see the module docs.
    let found = remote.list_all().map_err(fail)?;
    let Some((bytes, _, _)) = read_listing(remote).map_err(fail)? else {
        return Err(fail(missing_listing(remote, "look for leftovers in")));
    };
    let listing = Objects::from_json(&bytes, &remote.shown(LISTING)).map_err(fail)?;
    let mut kept: BTreeSet<String> = listing.objects.iter().map(|(k, o)| o.stored_at(k).to_owned()).collect();
    kept.insert(LISTING.to_owned());
    for part in remote_parts(remote)? {
        kept.extend(part.objects.iter().map(|(k, o)| o.stored_at(k).to_owned()));
    }
    let now = SystemTime::now();
    let saved = format!("{SAVED_PARTS}/");
    Ok(found
        .into_iter()
        .filter(|o| !kept.contains(&o.name) && !o.name.starts_with(&saved))
        .map(|o| Leftover { age: now.duration_since(o.modified).unwrap_or_default(), name: o.name, size: o.size })
        .collect())
}

/// Deletes the [`remote_leftovers`] of `remote` last written at least `older_than` ago.
/// Returns those it deleted and those it kept, younger (they may be a change in flight).
pub fn remove_remote_leftovers(
    remote: &Remote,
    older_than: Duration,
) -> Result<(Vec<Leftover>, Vec<Leftover>), DatasetError> {
    let at = Path::new(remote.url());
    let (old, young): (Vec<Leftover>, Vec<Leftover>) =
        remote_leftovers(remote)?.into_iter().partition(|l| l.age >= older_than);
    for leftover in &old {
        remote.delete(&leftover.name).map_err(|e| DatasetError::at(at, None, Error::Io(e)))?;
    }
    Ok((old, young))
}
