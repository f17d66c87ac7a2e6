//! The datasets under a folder or an object store prefix (`zrecord.list`).
//!
//! What marks one: on local disk, a directory holding `dataset.json` (a dataset of named
//! fields) or `meta.zr` (a store, with or without a loaderx `schema.json`); in an object
//! store, a prefix holding `remote.json` (what a push or a remote write commits last, so a
//! push that did not finish is not found). The search does not descend into what it found
//! (a dataset's shards are not datasets of their own), nor into hidden directories (staged
//! outputs, `.zr-partial-*`).

use std::path::{Path, PathBuf};

use zrecord_core::dataset::MANIFEST_FILE;
use zrecord_core::error::{Error, IoError, IoErrorKind};
use zrecord_core::format::META_FILE;

use crate::remote::objects::LISTING;
use crate::remote::Remote;

/// Every dataset or store in `dir` or below it, sorted (`dir` itself when it is one).
pub fn find_local(dir: &Path) -> Result<Vec<PathBuf>, Error> {
    let io = |p: &Path| {
        let p = p.to_path_buf();
        move |e: std::io::Error| Error::Io(IoError::from_std(e, format!("list {}", p.display())))
    };
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        if d.join(MANIFEST_FILE).is_file() || d.join(META_FILE).is_file() {
            found.push(d);
            continue;
        }
        for entry in std::fs::read_dir(&d).map_err(io(&d))? {
            let entry = entry.map_err(io(&d))?;
            let hidden = entry.file_name().to_string_lossy().starts_with('.');
            // Not through symbolic links: a link back up would loop.
            if !hidden && entry.file_type().map_err(io(&d))?.is_dir() {
                pending.push(entry.path());
            }
        }
    }
    found.sort();
    Ok(found)
}

/// The URL of every pushed dataset or store at `remote` or below it, sorted: one listing
/// request per prefix searched, none inside what was found.
pub fn find_remote(remote: &Remote) -> Result<Vec<String>, IoError> {
    let mut found = Vec::new();
    let mut pending = vec![String::new()];
    while let Some(rel) = pending.pop() {
        let at = if rel.is_empty() { remote.clone() } else { remote.child(&rel) };
        let prefix = at.path("");
        let listed = at
            .block(at.retrying(&format!("list {}", at.url()), || {
                let client = at.client().clone();
                let prefix = prefix.clone();
                async move { client.list_with_delimiter(Some(&prefix)).await }
            }))
            .map_err(|e| match crate::remote::push::missing_bucket(&at, &e) {
                Some(why) => IoError::new(IoErrorKind::NotFound, e.context.clone(), why),
                None => e,
            })?;
        if listed.objects.iter().any(|o| o.location.filename() == Some(LISTING)) {
            found.push(at.url().to_owned());
            continue;
        }
        for p in &listed.common_prefixes {
            if let Some(name) = p.filename().filter(|n| !n.starts_with('.')) {
                pending.push(if rel.is_empty() { name.to_owned() } else { format!("{rel}/{name}") });
            }
        }
    }
    found.sort();
    Ok(found)
}
