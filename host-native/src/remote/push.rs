//! `zr push` / `zrecord.push`: a local dataset or store into an object store, densely and
//! resumably, with its listing (`remote.json`) written last.
//!
//! A store's files are sparse (chunk files are created 4 GiB long, `meta.zr` 256 MiB):
//! each file is uploaded up to the end of its last data extent (`SEEK_DATA`/`SEEK_HOLE`),
//! and the listing records the file's full size, so a reader sees the file as it was. Each
//! object carries the XXH3-64 of its bytes as user metadata; a second push (after a kill)
//! skips every object whose bytes are already there and uploads the rest. The listing is
//! put last, conditionally (create, or replace the listing this push read), so a prefix
//! holds a dataset only once every object of it is in place.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use object_store::{
    Attribute, AttributeValue, Attributes, GetOptions, PutMode, PutMultipartOptions, PutOptions, PutPayload,
    UpdateVersion, WriteMultipart,
};
use zrecord_core::error::{IoError, IoErrorKind};

use super::objects::{hash_text, Object, Objects, LISTING, LISTING_VERSION};
use super::{io, Remote};

/// The user metadata key holding an object's XXH3-64.
const HASH_KEY: &str = "zrecord-xxh3";
/// Files above this go up in parts of this size.
const PART: usize = 16 << 20;

/// What a push did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pushed {
    /// `dataset` or `store`.
    pub kind: String,
    /// Files in the listing.
    pub files: usize,
    /// Files uploaded by this push (the others were there already).
    pub uploaded: usize,
    /// Bytes uploaded by this push.
    pub bytes: u64,
    /// Bytes the files take in the object store.
    pub stored: u64,
    /// Bytes the files take on disk, as their sizes say (sparse files counted whole).
    pub apparent: u64,
}

/// The files to push under `root`, relative and `/`-separated, sorted; lock files and
/// partial outputs of interrupted commands are left out.
fn files(root: &Path) -> Result<Vec<(String, PathBuf)>, IoError> {
    let mut out = Vec::new();
    let mut dirs = vec![(String::new(), root.to_path_buf())];
    while let Some((rel, dir)) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).map_err(io(&dir, "list"))? {
            let entry = entry.map_err(io(&dir, "list"))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') {
                // .zrecord-write.lock, and partial outputs: every name
                // `zrecord_app::partial::staged_name` gives is hidden.
                continue;
            }
            let path = entry.path();
            let child = if rel.is_empty() { name.clone() } else { format!("{rel}/{name}") };
            let kind = entry.file_type().map_err(io(&path, "stat"))?;
            if kind.is_dir() {
                dirs.push((child, path));
            } else if kind.is_file() {
                out.push((child, path));
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Bytes of `file` up to the end of its last data extent: a sparse file's trailing hole is
/// left out. Where the file system cannot say, the whole file.
pub(crate) fn dense_len(file: &File, size: u64) -> u64 {
    use std::os::fd::AsRawFd;
    let fd = file.as_raw_fd();
    let mut end = 0u64;
    let mut at = 0i64;
    loop {
        // SAFETY: lseek on a descriptor `file` owns; it reads and writes no memory.
        let data = unsafe { libc::lseek(fd, at, libc::SEEK_DATA) };
        if data < 0 {
            let errno = std::io::Error::last_os_error().raw_os_error();
            // ENXIO: no data at or after `at`. Anything else: this file system cannot tell.
            return if errno == Some(libc::ENXIO) { end } else { size };
        }
        // SAFETY: as above.
        let hole = unsafe { libc::lseek(fd, data, libc::SEEK_HOLE) };
        if hole < 0 {
            return size;
        }
        end = hole as u64;
        if end >= size {
            return size;
        }
        at = hole;
    }
}

/// XXH3-64 of the first `len` bytes of `file`, as 16 hex digits.
fn hash_of(file: &File, len: u64, path: &Path) -> Result<String, IoError> {
    let mut hasher = twox_hash::XxHash3_64::new();
    let mut buf = vec![0u8; PART.min(len as usize).max(1)];
    let mut at = 0u64;
    while at < len {
        let n = ((len - at) as usize).min(buf.len());
        file.read_exact_at(&mut buf[..n], at).map_err(io(path, "read"))?;
        hasher.write(&buf[..n]);
        at += n as u64;
    }
    Ok(hash_text(hasher.finish()))
}

use std::hash::Hasher;

/// What [`upload_tree`] did: the objects now in place and the upload's counts.
#[derive(Debug, Clone, Default)]
pub struct Uploaded {
    /// Every file, by its name under the remote prefix.
    pub objects: std::collections::BTreeMap<String, Object>,
    /// Files uploaded (the others were there already).
    pub uploaded: usize,
    /// Bytes uploaded.
    pub bytes: u64,
    /// Bytes the files take in the object store.
    pub stored: u64,
    /// Bytes the files take on disk, as their sizes say.
    pub apparent: u64,
}

/// Uploads every file under the directory `local` to `remote` as `under/RELATIVE` (`under`
/// empty: at the prefix's root), densely, skipping each object whose size and hash already
/// match; `progress(bytes done, bytes to upload)` after each part. Fails if a file changes
/// while it goes up. Writes no listing.
pub fn upload_tree(
    local: &Path,
    remote: &Remote,
    under: &str,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Uploaded, IoError> {
    let list = files(local)?;
    let mut plan = Vec::with_capacity(list.len());
    for (rel, path) in &list {
        let file = File::open(path).map_err(io(path, "open"))?;
        let size = file.metadata().map_err(io(path, "stat"))?.len();
        let stored = dense_len(&file, size);
        let hash = hash_of(&file, stored, path)?;
        let name = if under.is_empty() { rel.clone() } else { format!("{under}/{rel}") };
        plan.push((name, path.clone(), file, size, stored, hash));
    }
    let total: u64 = plan.iter().map(|p| p.4).sum();
    let mut out = Uploaded { stored: total, apparent: plan.iter().map(|p| p.3).sum(), ..Uploaded::default() };
    let mut done = 0u64;
    progress(0, total);
    for (name, path, file, size, stored, hash) in &plan {
        let target = remote.path(name);
        let what = format!("push {} to {}", path.display(), remote.shown(name));
        // Already there, whole (a push cut short, or an unchanged file)?
        let there = remote.block(remote.retrying(&what, || {
            let client = remote.client().clone();
            let target = target.clone();
            async move {
                match client.get_opts(&target, GetOptions { head: true, ..GetOptions::default() }).await {
                    Ok(r) => {
                        let tag = r.attributes.get(&Attribute::Metadata(HASH_KEY.into())).map(|v| v.to_string());
                        Ok(Some((r.meta.size, tag, r.meta.e_tag)))
                    }
                    Err(object_store::Error::NotFound { .. }) => Ok(None),
                    Err(e) => Err(e),
                }
            }
        }))?;
        let etag = match there {
            Some((s, Some(h), etag)) if s == *stored && h == *hash => etag,
            _ => {
                let etag =
                    upload(remote, &target, file, path, *stored, hash, &what, &mut |n| progress(done + n, total))?;
                out.uploaded += 1;
                out.bytes += stored;
                etag
            }
        };
        done += stored;
        progress(done, total);
        out.objects.insert(name.clone(), Object { size: *size, stored: *stored, xxh3: hash.clone(), etag, key: None });
    }
    // The local files must not have changed while they went up.
    for (name, path, file, size, stored, hash) in &plan {
        let now = file.metadata().map_err(io(path, "stat"))?.len();
        if now != *size || dense_len(file, now) != *stored || hash_of(file, *stored, path)? != *hash {
            return Err(IoError::new(
                IoErrorKind::Other,
                format!("push {}", local.display()),
                format!("{name} changed during the push (a writer is at work); push again once it is done"),
            ));
        }
    }
    Ok(out)
}

/// Pushes the dataset or store at `local` to `remote`; `progress(bytes done, bytes to
/// upload)` after each part. Fails if `local` is neither, or if it changes during the push.
pub fn push(local: &Path, remote: &Remote, progress: &mut dyn FnMut(u64, u64)) -> Result<Pushed, IoError> {
    let kind = if local.join(zrecord_core::dataset::MANIFEST_FILE).is_file() {
        "dataset"
    } else if local.join(zrecord_core::format::META_FILE).is_file() {
        "store"
    } else {
        return Err(IoError::new(
            IoErrorKind::Other,
            format!("push {}", local.display()),
            "is neither a dataset (dataset.json) nor a store (meta.zr)",
        ));
    };
    let previous = read_listing(remote)?;
    let up = upload_tree(local, remote, "", progress)?;
    let files = up.objects.len();
    let listing = Objects { version: LISTING_VERSION, kind: kind.into(), objects: up.objects, manifest: None };
    put_listing(remote, &listing, previous)?;
    Ok(Pushed {
        kind: kind.into(),
        files,
        uploaded: up.uploaded,
        bytes: up.bytes,
        stored: up.stored,
        apparent: up.apparent,
    })
}

/// Writes `listing` as the prefix's `remote.json`, conditionally: created when `previous`
/// is `None` (fails if one appeared meanwhile), else replacing exactly the listing read.
pub fn put_listing(remote: &Remote, listing: &Objects, previous: Option<Listing>) -> Result<(), IoError> {
    if try_put_listing(remote, listing, previous)? {
        return Ok(());
    }
    Err(IoError::new(
        IoErrorKind::Other,
        format!("write {}", remote.shown(LISTING)),
        "another push wrote this location's listing meanwhile; push again",
    ))
}

/// [`put_listing`], but `false` when another writer's listing came first (the condition
/// failed), so the caller can read it and try again.
pub fn try_put_listing(remote: &Remote, listing: &Objects, previous: Option<Listing>) -> Result<bool, IoError> {
    let mode = match previous {
        None => PutMode::Create,
        Some((_, e_tag, version)) => PutMode::Update(UpdateVersion { e_tag, version }),
    };
    let target = remote.path(LISTING);
    let body = Bytes::from(listing.to_json());
    let put =
        remote.block(
            remote.retrying(&format!("write {}", remote.shown(LISTING)), || {
                let client = remote.client().clone();
                let (target, body, mode) = (target.clone(), body.clone(), mode.clone());
                async move {
                    client.put_opts(&target, PutPayload::from(body), PutOptions { mode, ..Default::default() }).await
                }
            }),
        );
    match put {
        Ok(_) => Ok(true),
        Err(e)
            if e.message == super::CHANGED
                || e.message.to_ascii_lowercase().contains("precondition")
                || e.message.to_ascii_lowercase().contains("already exists") =>
        {
            Ok(false)
        }
        Err(e) => Err(e),
    }
}

/// Writes the small object `name` with its XXH3-64 as metadata (as [`upload_tree`] does),
/// and returns its listing entry.
pub fn put_small(remote: &Remote, name: &str, bytes: Vec<u8>) -> Result<Object, IoError> {
    let hash = hash_text(zrecord_core::format::sums::checksum(&bytes));
    let size = bytes.len() as u64;
    let etag =
        put_hashed(remote, &remote.path(name), Bytes::from(bytes), &hash, &format!("write {}", remote.shown(name)))?;
    Ok(Object { size, stored: size, xxh3: hash, etag, key: None })
}

/// The object's user metadata: its hash.
fn hash_attribute(hash: &str) -> Attributes {
    let mut attributes = Attributes::new();
    attributes.insert(Attribute::Metadata(HASH_KEY.into()), AttributeValue::from(hash.to_owned()));
    attributes
}

/// Puts `body` at `target` in one request, its hash as metadata; returns the ETag.
fn put_hashed(
    remote: &Remote,
    target: &object_store::path::Path,
    body: Bytes,
    hash: &str,
    what: &str,
) -> Result<Option<String>, IoError> {
    let attributes = hash_attribute(hash);
    let put = remote.block(remote.retrying(what, || {
        let client = remote.client().clone();
        let (target, body) = (target.clone(), body.clone());
        let opts = PutOptions { attributes: attributes.clone(), ..Default::default() };
        async move { client.put_opts(&target, PutPayload::from(body), opts).await }
    }))?;
    Ok(put.e_tag)
}

/// The error for a location where `doing` found no listing, saying why as far as one
/// more request can tell: the bucket does not exist, nothing is stored under the prefix,
/// or objects are there without a listing (a push or write that did not finish).
pub fn missing_listing(remote: &Remote, doing: &str) -> IoError {
    let context = format!("{doing} {}", remote.shown(LISTING));
    let prefix = remote.path("");
    let listed = remote.block(remote.retrying(&format!("list {}", remote.url()), || {
        let client = remote.client().clone();
        let prefix = prefix.clone();
        async move { client.list_with_delimiter(Some(&prefix)).await }
    }));
    let why = match listed {
        Ok(found) if found.objects.is_empty() && found.common_prefixes.is_empty() => {
            "nothing is stored under this prefix: no dataset was pushed or written here (check the URL)".to_owned()
        }
        Ok(found) if found.common_prefixes.iter().any(|p| p.filename() == Some(crate::dataset::SAVED_PARTS)) => {
            "parts written with zrecord.write_part are here, waiting for zrecord.commit_parts to make them a dataset"
                .to_owned()
        }
        Ok(_) => "objects are stored here but no remote.json lists them: a push or write that did not finish \
                  (run it again)"
            .to_owned(),
        Err(e) => match missing_bucket(remote, &e) {
            Some(why) => why,
            None => format!("remote.json is missing, and listing the prefix failed: {}", e.message),
        },
    };
    IoError::new(IoErrorKind::NotFound, context, format!("no pushed dataset here: {why}"))
}

/// "The bucket does not exist", when that is why a request at `remote` failed with `e`.
pub(crate) fn missing_bucket(remote: &Remote, e: &IoError) -> Option<String> {
    e.message.contains("NoSuchBucket").then(|| {
        let bucket = remote.url().split("://").nth(1).and_then(|rest| rest.split('/').next()).unwrap_or("");
        format!("the bucket {bucket:?} does not exist (the server said NoSuchBucket)")
    })
}

/// A listing as read: its bytes, ETag and version.
pub type Listing = (Vec<u8>, Option<String>, Option<String>);

/// The listing at `remote`, if there is one.
pub fn read_listing(remote: &Remote) -> Result<Option<Listing>, IoError> {
    read_object(remote, LISTING)
}

/// The manifest of the dataset `listing` lists: the one it holds (version 2), else its
/// `dataset.json` object, read as the listing pinned it.
pub fn read_listed_manifest(remote: &Remote, listing: &Objects) -> Result<Vec<u8>, IoError> {
    if let Some(bytes) = listing.manifest_bytes() {
        return Ok(bytes);
    }
    let name = zrecord_core::dataset::MANIFEST_FILE;
    super::dir::RemoteDir::new(remote, listing, "").read_whole(name)?.ok_or_else(|| {
        IoError::new(IoErrorKind::NotFound, format!("open {}", remote.shown(name)), "the listing names no manifest")
    })
}

/// The whole object `name` under `remote` as it is now (not pinned by a listing), if there
/// is one: its bytes, ETag and version.
pub fn read_object(remote: &Remote, name: &str) -> Result<Option<Listing>, IoError> {
    let target = remote.path(name);
    remote.block(remote.retrying(&format!("read {}", remote.shown(name)), || {
        let client = remote.client().clone();
        let target = target.clone();
        async move {
            match client.get_opts(&target, GetOptions::default()).await {
                Ok(r) => {
                    let (tag, version) = (r.meta.e_tag.clone(), r.meta.version.clone());
                    Ok(Some((r.bytes().await?.to_vec(), tag, version)))
                }
                Err(object_store::Error::NotFound { .. }) => Ok(None),
                Err(e) => Err(e),
            }
        }
    }))
}

/// Uploads the first `len` bytes of `file` to `target`, with its hash as metadata; returns
/// the object's ETag. `sent(bytes)` reports progress within the file.
#[allow(clippy::too_many_arguments)]
fn upload(
    remote: &Remote,
    target: &object_store::path::Path,
    file: &File,
    path: &Path,
    len: u64,
    hash: &str,
    what: &str,
    sent: &mut dyn FnMut(u64),
) -> Result<Option<String>, IoError> {
    if len <= PART as u64 {
        let mut buf = vec![0u8; len as usize];
        file.read_exact_at(&mut buf, 0).map_err(io(path, "read"))?;
        let etag = put_hashed(remote, target, Bytes::from(buf), hash, what)?;
        sent(len);
        return Ok(etag);
    }
    let attributes = hash_attribute(hash);
    // Large files go up in parts, four in flight; a failed part fails the upload, and the
    // next push starts that file again.
    remote.block(async {
        let upload = remote
            .client()
            .put_multipart_opts(target, PutMultipartOptions { attributes, ..Default::default() })
            .await
            .map_err(|e| super::io_error(e, what))?;
        let mut writer = WriteMultipart::new_with_chunk_size(upload, PART);
        let mut buf = vec![0u8; PART];
        let mut at = 0u64;
        // Positional reads: `dense_len` moved the descriptor's offset with lseek.
        while at < len {
            let n = ((len - at) as usize).min(PART);
            file.read_exact_at(&mut buf[..n], at).map_err(io(path, "read"))?;
            writer.wait_for_capacity(4).await.map_err(|e| super::io_error(e, what))?;
            writer.write(&buf[..n]);
            at += n as u64;
            sent(at);
        }
        let put = writer.finish().await.map_err(|e| super::io_error(e, what))?;
        Ok(put.e_tag)
    })
}

/// `zr pull`: the dataset or store pushed to `remote` into the existing empty directory
/// `out`, file for file as it was pushed (each file at its full size, its stored bytes
/// written and checked against their XXH3-64, the rest left a hole), so loaderx 0.5.4
/// reads a pulled store. `progress(bytes done, bytes to fetch)`. Returns the number of
/// files.
pub fn pull(remote: &Remote, out: &Path, progress: &mut dyn FnMut(u64, u64)) -> Result<u64, IoError> {
    let Some((bytes, _, _)) = read_listing(remote)? else {
        return Err(missing_listing(remote, "pull"));
    };
    let listing = Objects::from_json(&bytes, &remote.shown(LISTING))?;
    let total: u64 = listing.objects.values().map(|o| o.stored).sum();
    let mut done = 0u64;
    progress(0, total);
    if let Some(manifest) = listing.manifest_bytes() {
        // A listing that holds its manifest: the dataset's dataset.json.
        let path = out.join(zrecord_core::dataset::MANIFEST_FILE);
        let file = File::options().write(true).create_new(true).open(&path).map_err(io(&path, "create"))?;
        file.write_all_at(&manifest, 0).map_err(io(&path, "write"))?;
        file.sync_all().map_err(io(&path, "sync"))?;
    }
    for (rel, object) in &listing.objects {
        fetch_object(remote, rel, object, &out.join(rel), &mut |n| {
            done += n;
            progress(done, total);
        })?;
    }
    Ok(listing.objects.len() as u64 + u64::from(listing.manifest.is_some()))
}

/// Fetches the listed object `rel` into the new file `path` (its folders made as needed):
/// the file at its full size, its stored bytes written and checked against the hash the
/// push recorded, the rest left a hole. `fetched(bytes)` after each block.
pub fn fetch_object(
    remote: &Remote,
    rel: &str,
    object: &Object,
    path: &Path,
    fetched: &mut dyn FnMut(u64),
) -> Result<(), IoError> {
    if rel.split('/').any(|part| part.is_empty() || part == "." || part == "..") {
        return Err(IoError::new(
            IoErrorKind::Other,
            format!("pull {}", remote.url()),
            format!("the listing names {rel:?}, which is not a plain relative path"),
        ));
    }
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(io(parent, "create directory"))?;
    }
    let file = File::options().write(true).read(true).create_new(true).open(path).map_err(io(path, "create"))?;
    file.set_len(object.size).map_err(io(path, "resize"))?;
    let source = super::file::RemoteFile::new(
        remote.clone(),
        object.stored_at(rel),
        object.clone(),
        false,
        super::cache::Cache::new(PART as u64 * 2),
        0,
    );
    let mut buf = vec![0u8; PART.min(object.stored as usize).max(1)];
    let mut hasher = twox_hash::XxHash3_64::new();
    let mut at = 0u64;
    while at < object.stored {
        let n = ((object.stored - at) as usize).min(buf.len());
        zrecord_core::io::StorageFile::read_at(&source, at, &mut buf[..n])?;
        hasher.write(&buf[..n]);
        file.write_all_at(&buf[..n], at).map_err(io(path, "write"))?;
        at += n as u64;
        fetched(n as u64);
    }
    if hash_text(hasher.finish()) != object.xxh3 {
        return Err(IoError::new(
            IoErrorKind::Other,
            format!("pull {}", remote.shown(rel)),
            "its bytes do not match the hash the push recorded",
        ));
    }
    file.sync_all().map_err(io(path, "sync"))
}
