//! A pushed store directory as the engine's [`Backend`] ([`RemoteDir`]): its files as the
//! listing names them, each opened as a [`RemoteFile`], read-only.
//!
//! Every file of a directory shares the dataset's [`Cache`] (its own one, if opened
//! alone); a store's metadata files are asked for as the directory opens
//! ([`RemoteDir::start_metadata`]). This file uses [`super::file`] and [`super::cache`];
//! neither uses it (`file.rs` only re-exports [`RemoteDir`] under its old path).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use zrecord_core::error::{Error, IoError};
use zrecord_core::io::{Backend, LockMode, StorageFile};

use super::cache::{Cache, CACHE_BYTES};
use super::file::{read_only, RemoteFile};
use super::objects::{Object, Objects};
use super::{lock, Remote};

/// A pushed store directory: its files as the listing names them.
pub struct RemoteDir {
    remote: Remote,
    /// The dataset's root, where an object's [`Object::key`] is.
    root: Remote,
    /// The directory's files, by name.
    files: HashMap<String, Object>,
    cache: Arc<Cache>,
    base: u64,
    /// Metadata files whose first block is on its way ([`RemoteDir::start_metadata`]),
    /// handed to the first open of each.
    early: Mutex<HashMap<String, RemoteFile>>,
}

impl RemoteDir {
    /// The store directory `dir` (`""` for the root) of the pushed `listing` at `remote`,
    /// with a cache of its own.
    pub fn new(remote: &Remote, listing: &Objects, dir: &str) -> RemoteDir {
        let cache = Cache::new(CACHE_BYTES);
        cache.set_data(listing.stored_bytes());
        Self::cached(remote, listing, dir, cache, 0)
    }

    /// [`RemoteDir::new`], keeping record data in `cache`, where the store's record `i` is
    /// the dataset's sample `base + i`.
    pub fn cached(remote: &Remote, listing: &Objects, dir: &str, cache: Arc<Cache>, base: u64) -> RemoteDir {
        let files = listing.under(dir).into_iter().collect();
        let root = remote.clone();
        let remote = if dir.is_empty() { remote.clone() } else { remote.child(dir) };
        RemoteDir { remote, root, files, cache, base, early: Mutex::new(HashMap::new()) }
    }

    /// The directory's location.
    pub fn remote(&self) -> &Remote {
        &self.remote
    }

    /// Whether the directory holds file `name`.
    pub fn has(&self, name: &str) -> bool {
        self.files.contains_key(name)
    }

    /// File `name` of the directory, read in whole blocks (a side file, a manifest).
    pub fn file(&self, name: &str) -> Option<RemoteFile> {
        self.open(name, true)
    }

    /// Starts fetching the first block of the store's table (`meta.zr`) and of its
    /// checksums (`checksums.zrc`) at once. Opening a store reads the one, then the other:
    /// started together, the two arrive in one round trip instead of two.
    pub fn start_metadata(&self) {
        let mut early = lock(&self.early);
        for name in [zrecord_core::format::META_FILE, zrecord_core::format::sums::SUMS_FILE] {
            let Some(file) = self.new_file(name, true) else { continue };
            if file.start_first_block() {
                early.insert(name.to_owned(), file);
            }
        }
    }

    fn open(&self, name: &str, metadata: bool) -> Option<RemoteFile> {
        let started = if metadata { lock(&self.early).remove(name) } else { None };
        started.or_else(|| self.new_file(name, metadata))
    }

    fn new_file(&self, name: &str, metadata: bool) -> Option<RemoteFile> {
        self.files.get(name).map(|o| match &o.key {
            Some(key) => RemoteFile::new(self.root.clone(), key, o.clone(), metadata, self.cache.clone(), self.base),
            None => RemoteFile::new(self.remote.clone(), name, o.clone(), metadata, self.cache.clone(), self.base),
        })
    }

    /// Reads file `name` whole, if the directory holds it.
    pub fn read_whole(&self, name: &str) -> Result<Option<Vec<u8>>, IoError> {
        let Some(file) = self.open(name, true) else { return Ok(None) };
        let mut bytes = vec![0u8; file.len()? as usize];
        file.read_at(0, &mut bytes)?;
        Ok(Some(bytes))
    }
}

impl Backend for RemoteDir {
    type File = RemoteFile;

    fn open_meta(&self, create: bool) -> Result<Option<RemoteFile>, IoError> {
        if create && !self.has(zrecord_core::format::META_FILE) {
            return Err(read_only(&format!("create {}", self.remote.shown(zrecord_core::format::META_FILE))));
        }
        Ok(self.open(zrecord_core::format::META_FILE, true))
    }

    fn open_chunk(&self, id: u16, create: bool) -> Result<Option<RemoteFile>, IoError> {
        let name = format!("{id}.zr");
        if create && !self.has(&name) {
            return Err(read_only(&format!("create {}", self.remote.shown(&name))));
        }
        Ok(self.open(&name, false))
    }

    fn open_aux(&self, name: &str, create: bool) -> Result<Option<RemoteFile>, IoError> {
        if create && !self.has(name) {
            return Err(read_only(&format!("create {}", self.remote.shown(name))));
        }
        Ok(self.open(name, true))
    }

    fn remove_chunk(&self, id: u16) -> Result<(), IoError> {
        Err(read_only(&format!("remove {}", self.remote.shown(&format!("{id}.zr")))))
    }

    fn fresh_nonce(&self) -> u64 {
        zrecord_core::io::os_nonce()
    }

    fn sync_dir(&self) -> Result<(), IoError> {
        Ok(())
    }

    fn read_side_file(&self, name: &str) -> Result<Option<Vec<u8>>, IoError> {
        self.read_whole(name)
    }

    fn write_side_file(&self, name: &str, _bytes: &[u8]) -> Result<(), IoError> {
        Err(read_only(&format!("write {}", self.remote.shown(name))))
    }

    fn remove_side_file(&self, name: &str) -> Result<(), IoError> {
        Err(read_only(&format!("remove {}", self.remote.shown(name))))
    }

    fn lock(&self, mode: LockMode) -> Result<(), Error> {
        match mode {
            LockMode::Shared => Ok(()),
            _ => Err(Error::Io(read_only(&format!("change {}", self.remote.url())))),
        }
    }
}
