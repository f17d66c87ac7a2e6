//! The guest's [`Backend`]: a store directory through `std::fs`, which wasip2 turns into
//! wasi:filesystem calls on the host's preopened directories. Nothing here knows about the
//! sandbox: a path outside the preopens simply fails to open, as the host decides.
//!
//! WASI has no positional read/write in stable std (`std::os::wasi::fs::FileExt` is still
//! unstable), so each file keeps its cursor behind a mutex and seeks before every access.
//! The guest runs one thread, so the mutex is never contended; it is there to make the
//! file `Sync` as the core's trait demands.
//!
//! Locks: WASI has no file locks, so the guest counts the handles it has open on each store
//! directory ([`LockCounts`], the native host's rule for the handles of one process): a
//! delete or compact needs the only handle, one handle appends at a time. That keeps the
//! handles one embedder opens in one instance (JavaScript's `Store.open` twice) from
//! rewriting records under each other. Between processes, `zr-wasm` takes the native
//! host's locks on the guest's behalf before it runs a command
//! (`zrecord_app::cli::Command::locks`); other embedders take none (README, "zr-wasm").

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Read, Seek, SeekFrom, Write};
use std::path::{Component, Path, PathBuf};
use std::sync::Mutex;

use zrecord_core::io::std_dir::{open_regular, StoreDir};
use zrecord_core::io::{Backend, LockCounts, LockMode, StorageFile};
use zrecord_core::{Error, IoError};

fn io_err(e: std::io::Error, context: impl Into<String>) -> IoError {
    IoError::from_std(e, context)
}

/// `p` as the user knows it (the host path `zr-wasm` preopened, not the guest path).
fn shown(p: &Path) -> String {
    crate::cli::shown(&p.display().to_string())
}

/// One open file of the store (or an input/output file of a tool).
pub struct FsFile {
    file: Mutex<File>,
    name: String,
}

impl FsFile {
    /// Opens `path` for reading, and for writing too if `write`; `create` makes it if missing.
    pub fn open(path: PathBuf, write: bool, create: bool) -> Result<Option<FsFile>, IoError> {
        let name = shown(&path);
        match open_regular(OpenOptions::new().read(true).write(write).create(create && write), &path) {
            Ok(file) => Ok(Some(FsFile { file: Mutex::new(file), name })),
            Err(e) if e.kind() == ErrorKind::NotFound && !create => Ok(None),
            Err(e) => Err(io_err(e, format!("open {name}"))),
        }
    }

    /// Creates or truncates `path` for writing.
    pub fn create(path: PathBuf) -> Result<FsFile, IoError> {
        let name = shown(&path);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .map_err(|e| io_err(e, format!("create {name}")))?;
        Ok(FsFile { file: Mutex::new(file), name })
    }

    fn with<T>(
        &self,
        f: impl FnOnce(&mut File) -> std::io::Result<T>,
        what: impl FnOnce() -> String,
    ) -> Result<T, IoError> {
        // A poisoned mutex only means an earlier call panicked; with panic=abort it cannot
        // happen, and the file itself is still usable.
        let mut file = self.file.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut file).map_err(|e| io_err(e, what()))
    }
}

impl StorageFile for FsFile {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), IoError> {
        let n = buf.len();
        self.with(
            |f| {
                f.seek(SeekFrom::Start(offset))?;
                f.read_exact(buf)
            },
            || format!("read {n} bytes of {} at {offset}", self.name),
        )
    }

    fn write_at(&self, offset: u64, buf: &[u8]) -> Result<(), IoError> {
        self.with(
            |f| {
                f.seek(SeekFrom::Start(offset))?;
                f.write_all(buf)
            },
            || format!("write {} bytes of {} at {offset}", buf.len(), self.name),
        )
    }

    fn len(&self) -> Result<u64, IoError> {
        self.with(|f| Ok(f.metadata()?.len()), || format!("stat {}", self.name))
    }

    fn set_len(&self, len: u64) -> Result<(), IoError> {
        self.with(|f| f.set_len(len), || format!("resize {} to {len}", self.name))
    }

    fn sync(&self) -> Result<(), IoError> {
        self.with(|f| f.sync_all(), || format!("sync {}", self.name))
    }
}

/// A store directory: file placement and the directory-level operations are the core's
/// [`StoreDir`], shared with the native host; only opening a file is the guest's own.
pub struct FsDir {
    dir: StoreDir,
    writable: bool,
    /// The modes this handle holds, in [`LockMode::ALL`] order.
    held: Mutex<[bool; 3]>,
}

/// Every store directory this instance has open, with what its handles hold.
static OPEN: Mutex<BTreeMap<PathBuf, LockCounts>> = Mutex::new(BTreeMap::new());

fn open_stores() -> std::sync::MutexGuard<'static, BTreeMap<PathBuf, LockCounts>> {
    // Every update is a few plain assignments; a panic aborts the guest anyway.
    OPEN.lock().unwrap_or_else(|p| p.into_inner())
}

fn slot(mode: LockMode) -> usize {
    LockMode::ALL.iter().position(|&m| m == mode).unwrap_or(0)
}

impl FsDir {
    /// The store at `root`; files are opened for writing only if `writable`, so a store in a
    /// read-only preopen can still be read.
    pub fn new(root: impl Into<PathBuf>, writable: bool) -> FsDir {
        FsDir { dir: StoreDir::with_names(root, shown), writable, held: Mutex::new([false; 3]) }
    }

    /// The directory as one spelling (`/d/./s/` and `/d/x/../s` are `/d/s`), so that two
    /// handles of one store are counted together.
    fn key(&self) -> PathBuf {
        let mut out = PathBuf::new();
        for c in self.dir.root().components() {
            match c {
                Component::CurDir => {}
                Component::ParentDir => {
                    out.pop();
                }
                c => out.push(c),
            }
        }
        out
    }
}

impl Backend for FsDir {
    type File = FsFile;

    fn open_meta(&self, create: bool) -> Result<Option<FsFile>, IoError> {
        FsFile::open(self.dir.meta_path(), self.writable, create)
    }

    fn open_chunk(&self, id: u16, create: bool) -> Result<Option<FsFile>, IoError> {
        FsFile::open(self.dir.chunk_path(id), self.writable, create)
    }

    fn open_aux(&self, name: &str, create: bool) -> Result<Option<FsFile>, IoError> {
        FsFile::open(self.dir.side_path(name), self.writable, create)
    }

    fn remove_chunk(&self, id: u16) -> Result<(), IoError> {
        self.dir.remove_chunk(id)
    }

    fn fresh_nonce(&self) -> u64 {
        zrecord_core::io::os_nonce()
    }

    fn sync_dir(&self) -> Result<(), IoError> {
        self.dir.sync_dir()
    }

    fn read_side_file(&self, name: &str) -> Result<Option<Vec<u8>>, IoError> {
        self.dir.read_side_file(name)
    }

    fn write_side_file(&self, name: &str, bytes: &[u8]) -> Result<(), IoError> {
        // Synced, renamed over, and the directory synced, as the Backend contract requires.
        self.dir.write_side_file(name, bytes)
    }

    fn remove_side_file(&self, name: &str) -> Result<(), IoError> {
        self.dir.remove_side_file(name)
    }

    fn lock(&self, mode: LockMode) -> Result<(), Error> {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        if held[slot(mode)] {
            return Ok(());
        }
        let mut open = open_stores();
        let counts = open.entry(self.key()).or_default();
        counts.allows(mode)?;
        counts.set(mode, true);
        held[slot(mode)] = true;
        Ok(())
    }

    fn unlock(&self, mode: LockMode) {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        if !std::mem::take(&mut held[slot(mode)]) {
            return;
        }
        let key = self.key();
        let mut open = open_stores();
        if let Some(counts) = open.get_mut(&key) {
            counts.set(mode, false);
            if *counts == LockCounts::default() {
                open.remove(&key);
            }
        }
    }
}
