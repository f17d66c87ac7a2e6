//! The native [`Backend`]: files in a directory, positional I/O for writes, memory maps for
//! reads, and advisory locks (see [`crate::lock`]) so that processes sharing a store cannot
//! corrupt it.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::lock::{HandleLocks, MetaFile};

use memmap2::Mmap;
use zrecord_core::error::{Error, IoError};
use zrecord_core::format::{chunk_file_name, META_FILE};
use zrecord_core::io::{Backend, LockMode, StorageFile};

/// Converts a std I/O error, naming what was being done.
pub(crate) fn io_err(e: io::Error, context: impl Into<String>) -> IoError {
    IoError::from_std(e, context)
}

/// A descriptor of our own, or the process's shared meta.zr (which must never be closed
/// while another handle of this process holds locks on it).
enum Fd {
    Own(File),
    Meta(Arc<MetaFile>),
}

/// One file of the store, optionally mapped read-only for fast reads.
pub struct NativeFile {
    fd: Fd,
    name: String,
    map: Option<Mmap>,
}

impl NativeFile {
    /// Opens `path` read-write (creating it if `create`), or read-only, and maps it.
    pub fn open(path: &Path, create: bool, writable: bool, map: bool) -> Result<Option<Self>, IoError> {
        let name = path.display().to_string();
        let file = match OpenOptions::new().read(true).write(writable).create(create && writable).open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound && !create => return Ok(None),
            Err(e) => return Err(io_err(e, format!("open {name}"))),
        };
        let mut f = NativeFile { fd: Fd::Own(file), name, map: None };
        if map {
            f.remap()?;
        }
        Ok(Some(f))
    }

    fn file(&self) -> &File {
        match &self.fd {
            Fd::Own(f) => f,
            Fd::Meta(m) => m.file(),
        }
    }

    /// Creates or truncates a plain output file (for `export`).
    pub fn create(path: &Path) -> Result<Self, IoError> {
        let name = path.display().to_string();
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
            .map_err(|e| io_err(e, format!("create {name}")))?;
        Ok(NativeFile { fd: Fd::Own(file), name, map: None })
    }

    fn remap(&mut self) -> Result<(), IoError> {
        let len = self.file().metadata().map_err(|e| io_err(e, format!("stat {}", self.name)))?.len();
        self.map = if len == 0 {
            None
        } else {
            // SAFETY: the map is read-only and private to this handle. Its bytes can change
            // under it only through writes to the file: this process's own appends, which
            // never touch bytes a reader has been given (records are immutable once their
            // length is published), and delete/compact, which need `&mut Store` here and an
            // exclusive flock that no other zrecord handle can hold while this one lives.
            // Truncation by a foreign process would turn reads into SIGBUS; the engine
            // bounds every read by the mapped length taken here, so our own truncation in
            // compact (under `&mut`) never leaves a stale range in use.
            let map = unsafe { Mmap::map(self.file()) }.map_err(|e| io_err(e, format!("map {}", self.name)))?;
            #[cfg(unix)]
            let _ = map.advise(memmap2::Advice::Random);
            Some(map)
        };
        Ok(())
    }
}

impl StorageFile for NativeFile {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), IoError> {
        self.file().read_exact_at(buf, offset).map_err(|e| io_err(e, format!("read {} at {offset}", self.name)))
    }

    fn write_at(&self, offset: u64, buf: &[u8]) -> Result<(), IoError> {
        self.file().write_all_at(buf, offset).map_err(|e| io_err(e, format!("write {} at {offset}", self.name)))
    }

    fn len(&self) -> Result<u64, IoError> {
        Ok(self.file().metadata().map_err(|e| io_err(e, format!("stat {}", self.name)))?.len())
    }

    fn set_len(&self, len: u64) -> Result<(), IoError> {
        self.file().set_len(len).map_err(|e| io_err(e, format!("resize {} to {len}", self.name)))
    }

    fn sync(&self) -> Result<(), IoError> {
        self.file().sync_data().map_err(|e| io_err(e, format!("sync {}", self.name)))
    }

    fn view(&self) -> Option<&[u8]> {
        self.map.as_deref()
    }

    fn prefetch(&self, offset: u64) {
        #[cfg(target_arch = "x86_64")]
        if let Some(byte) = self.map.as_deref().and_then(|m| m.get(offset as usize)) {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            // SAFETY: `_mm_prefetch` is a hint (SSE, baseline on x86_64): it reads nothing
            // architecturally, never faults, and the address is inside our live mapping.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(byte as *const u8 as *const i8) };
        }
        let _ = offset;
    }
}

/// A store directory on the local file system.
pub struct DirBackend {
    dir: PathBuf,
    writable: bool,
    locks: HandleLocks,
}

impl DirBackend {
    /// A backend for the store in `dir`, creating the directory if `writable`.
    pub fn new(dir: &Path, writable: bool) -> Result<Self, IoError> {
        if writable {
            std::fs::create_dir_all(dir).map_err(|e| io_err(e, format!("create directory {}", dir.display())))?;
        }
        Ok(DirBackend { dir: dir.to_path_buf(), writable, locks: HandleLocks::default() })
    }

    /// The store directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// In a process forked after this handle was opened, takes the handle's locks again in
    /// this process; `Ok(true)` if it did (the caller re-reads the header).
    pub fn revive(&self) -> Result<bool, Error> {
        self.locks.revive()
    }
}

impl Backend for DirBackend {
    type File = NativeFile;

    fn open_meta(&self, create: bool) -> Result<Option<NativeFile>, IoError> {
        let path = self.dir.join(META_FILE);
        let name = path.display().to_string();
        let Some(meta) = MetaFile::open(&path, create, self.writable).map_err(|e| io_err(e, format!("open {name}")))?
        else {
            return Ok(None);
        };
        self.locks.attach(meta.clone());
        let mut f = NativeFile { fd: Fd::Meta(meta), name, map: None };
        f.remap()?;
        Ok(Some(f))
    }

    fn open_chunk(&self, id: u16, create: bool) -> Result<Option<NativeFile>, IoError> {
        NativeFile::open(&self.dir.join(chunk_file_name(id)), create, self.writable, true)
    }

    fn open_aux(&self, name: &str, create: bool) -> Result<Option<NativeFile>, IoError> {
        NativeFile::open(&self.dir.join(name), create, self.writable, true)
    }

    fn remove_chunk(&self, id: u16) -> Result<(), IoError> {
        let path = self.dir.join(chunk_file_name(id));
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(io_err(e, format!("remove {}", path.display()))),
            _ => Ok(()),
        }
    }

    fn sync_dir(&self) -> Result<(), IoError> {
        File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| io_err(e, format!("sync directory {}", self.dir.display())))
    }

    fn read_side_file(&self, name: &str) -> Result<Option<Vec<u8>>, IoError> {
        let path = self.dir.join(name);
        match std::fs::read(&path) {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_err(e, format!("read {}", path.display()))),
        }
    }

    fn write_side_file(&self, name: &str, bytes: &[u8]) -> Result<(), IoError> {
        // Written beside, synced, renamed over and the directory synced: a crash leaves the
        // old file or the new one, and the new one is durable when this returns (the engine
        // commits deletes through a side file).
        let path = self.dir.join(name);
        let tmp = self.dir.join(format!(".{name}.tmp"));
        let write = || -> io::Result<()> {
            let mut f = File::create(&tmp)?;
            io::Write::write_all(&mut f, bytes)?;
            f.sync_all()?;
            std::fs::rename(&tmp, &path)
        };
        write().map_err(|e| io_err(e, format!("write {}", path.display())))?;
        self.sync_dir()
    }

    fn remove_side_file(&self, name: &str) -> Result<(), IoError> {
        let path = self.dir.join(name);
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(io_err(e, format!("remove {}", path.display()))),
            _ => self.sync_dir(),
        }
    }

    fn lock(&self, mode: LockMode) -> Result<(), Error> {
        self.locks.lock(mode)
    }

    fn unlock(&self, mode: LockMode) {
        self.locks.unlock(mode)
    }
}
