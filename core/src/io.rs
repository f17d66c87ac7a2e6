//! The seams between the core and a host: files, the store directory, and parallelism.
//!
//! A host implements [`StorageFile`] and [`Backend`] over whatever it has (pread/pwrite plus
//! memory maps natively, `std::fs` in the wasm guest, an in-memory image in tests), and
//! [`Parallel`] over its thread pool. The engine never sees a path, a file descriptor or a
//! thread.

use alloc::vec::Vec;

use crate::error::{Error, IoError};

/// One file, addressed by absolute byte offsets. Implementations must be safe to share
/// between threads: concurrent reads, and writes to disjoint ranges, are allowed.
#[allow(clippy::len_without_is_empty)] // a file's length is a size, not a count
pub trait StorageFile: Send + Sync {
    /// Reads exactly `buf.len()` bytes at `offset`; a short file is an error.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), IoError>;
    /// Writes all of `buf` at `offset`, growing the file if needed.
    fn write_at(&self, offset: u64, buf: &[u8]) -> Result<(), IoError>;
    /// Current size in bytes.
    fn len(&self) -> Result<u64, IoError>;
    /// Truncates or extends (sparsely) to `len` bytes.
    fn set_len(&self, len: u64) -> Result<(), IoError>;
    /// Makes every completed write durable.
    fn sync(&self) -> Result<(), IoError>;
    /// A read-only view of the file's first bytes if the host holds it in memory (a memory
    /// map). The engine reads through it instead of calling [`StorageFile::read_at`] when
    /// the range it needs lies inside. The view must stay valid, and its bytes must not be
    /// changed by anyone but this process's own writes, for as long as `&self` lives.
    fn view(&self) -> Option<&[u8]> {
        None
    }
    /// A hint that the bytes at `offset` will be read soon (a cache prefetch on a mapped
    /// file). It must never fail or block; the default does nothing.
    fn prefetch(&self, offset: u64) {
        let _ = offset;
    }
    /// Whether the byte at `offset` is in memory now, so reading it needs no disk I/O;
    /// `true` when the host cannot tell. Must be cheap (one call per gather).
    fn resident(&self, offset: u64) -> bool {
        let _ = offset;
        true
    }
    /// A hint that the `len` bytes at `offset` will be read soon and are likely not in
    /// memory: the host may start reading them from disk now, alongside the other ranges
    /// of the batch. Must never fail or wait for the read; the default does nothing.
    fn will_need(&self, offset: u64, len: u64) {
        let _ = (offset, len);
    }
    /// [`StorageFile::will_need`] for the record `index` of the store (a host that caches by
    /// record, or plans its cache by when each record is needed next, keeps the index);
    /// the default forwards to `will_need`.
    fn will_need_record(&self, offset: u64, len: u64, index: u32) {
        let _ = index;
        self.will_need(offset, len);
    }
    /// [`StorageFile::will_need_record`] for each `(offset, len, index)` of `records`, at
    /// once (a host that locks to take an announcement locks once); the default announces
    /// them one by one.
    fn will_need_records(&self, records: &[(u64, u64, u32)]) {
        for &(offset, len, index) in records {
            self.will_need_record(offset, len, index);
        }
    }
    /// Starts fetching what [`StorageFile::will_need_record`] announced, without waiting
    /// (a read-ahead of batches to come); the default does nothing.
    fn start_reads(&self) {}
    /// True when the host wants every record of a read announced
    /// ([`StorageFile::will_need_record`]) whatever [`StorageFile::resident`] says of the
    /// first (an object store fetching by range); false by default, where one residency
    /// check decides for the whole read. Such a file has only what was announced, so the
    /// engine reads records together from it only when they lie back to back (elsewhere
    /// one read may span small gaps between records).
    fn wants_hints(&self) -> bool {
        false
    }
    /// A hint that the `len` bytes just written at `offset` will be synced later: the host
    /// may start writing them to disk now, so that the sync finds less to wait for. Must
    /// never fail or wait for the write; the default does nothing.
    fn start_writeback(&self, offset: u64, len: u64) {
        let _ = (offset, len);
    }
    /// Brings the `len` bytes at `offset` into memory and returns when they are there (or
    /// when reading them failed: this is a hint, and a failing range is reported by the
    /// read that needs it). Called by [`Store::warm`](crate::engine::Store::warm) from a
    /// background thread, in file order, a few MiB at a time, so the host can read
    /// sequentially what a training loop would otherwise fault in one record at a time.
    /// Hosts without a page cache to fill keep the default, which does nothing.
    fn warm(&self, offset: u64, len: u64) {
        let _ = (offset, len);
    }
}

/// How a handle wants to hold the store directory (see [`Backend::lock`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockMode {
    /// Any number of handles may read; held for the whole life of a handle.
    Shared,
    /// The one handle allowed to append, held from its first append until it closes.
    Appender,
    /// No other handle may exist: taken for delete and compact, released after.
    Exclusive,
}

impl LockMode {
    /// Every mode, in the order a handle takes them.
    pub const ALL: [LockMode; 3] = [LockMode::Shared, LockMode::Appender, LockMode::Exclusive];

    /// The error of a handle refused `self` because another handle (of this process or
    /// another) holds the store: the same words from every host.
    pub fn refused(self) -> Error {
        let what = match self {
            LockMode::Shared => "another handle is deleting from or compacting this store",
            LockMode::Appender => "another handle is appending to this store",
            LockMode::Exclusive => "delete and compact need the only open handle, and another is open",
        };
        Error::Locked(alloc::format!("{what}; close the other handle or wait for it to finish"))
    }

    /// The byte of meta.zr whose lock stands for this mode (`docs/format.md`, "Locks"): a
    /// read lock on byte 0 for [`LockMode::Shared`], a write lock on byte 0 for
    /// [`LockMode::Exclusive`], a write lock on byte 1 for [`LockMode::Appender`].
    pub fn byte(self) -> u64 {
        match self {
            LockMode::Shared | LockMode::Exclusive => 0,
            LockMode::Appender => 1,
        }
    }

    /// Whether the lock on [`LockMode::byte`] is a write lock.
    pub fn writes(self) -> bool {
        self != LockMode::Shared
    }
}

/// What the handles of one process hold on one store, counted: POSIX record locks do not
/// exclude handles of the same process, so a host counts them and lets the counts decide
/// (the native host across its handles, the wasm guest across the handles an embedder such
/// as JavaScript opens in one instance).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LockCounts {
    /// Handles holding presence ([`LockMode::Shared`]).
    pub holders: u32,
    /// One handle is deleting or compacting.
    pub exclusive: bool,
    /// One handle is the appender.
    pub appender: bool,
}

impl LockCounts {
    /// Whether a handle that holds presence (or asks for it) may take `mode` as far as
    /// this process's other handles go; the error to return if not.
    pub fn allows(&self, mode: LockMode) -> Result<(), Error> {
        let free = match mode {
            LockMode::Shared => !self.exclusive,
            LockMode::Exclusive => self.holders == 1,
            LockMode::Appender => !self.appender,
        };
        if free {
            Ok(())
        } else {
            Err(mode.refused())
        }
    }

    /// Records that a handle took (`held` true) or gave back `mode`.
    pub fn set(&mut self, mode: LockMode, held: bool) {
        match mode {
            LockMode::Shared if held => self.holders += 1,
            LockMode::Shared => self.holders = self.holders.saturating_sub(1),
            LockMode::Exclusive => self.exclusive = held,
            LockMode::Appender => self.appender = held,
        }
    }
}

/// The store directory: meta.zr, chunk files, and small side files such as `schema.json`.
pub trait Backend: Send + Sync {
    /// The host's file type.
    type File: StorageFile;

    /// Opens meta.zr, creating it empty if `create` and missing. `Ok(None)` if it is missing
    /// and `create` is false.
    fn open_meta(&self, create: bool) -> Result<Option<Self::File>, IoError>;
    /// Opens chunk file `id`, creating it empty if `create` and missing. `Ok(None)` if it is
    /// missing and `create` is false.
    fn open_chunk(&self, id: u16, create: bool) -> Result<Option<Self::File>, IoError>;
    /// Opens a side file of the store for positional I/O, such as the checksum file
    /// `checksums.zrc`, creating it empty if `create` and missing; `Ok(None)` if it is
    /// missing and `create` is false. A file created here is mapped (where the host maps)
    /// only from its next open, so a caller that sizes a new file opens it again. Hosts
    /// that cannot keep such a file keep the default, `Ok(None)`: their stores then keep no
    /// checksums, and read as a store without them.
    fn open_aux(&self, name: &str, create: bool) -> Result<Option<Self::File>, IoError> {
        let _ = (name, create);
        Ok(None)
    }
    /// Deletes chunk file `id`; a missing file is not an error.
    fn remove_chunk(&self, id: u16) -> Result<(), IoError>;
    /// Makes the directory's entries (new or removed files) durable.
    fn sync_dir(&self) -> Result<(), IoError>;
    /// Reads a side file such as `schema.json`; `Ok(None)` if missing.
    fn read_side_file(&self, name: &str) -> Result<Option<Vec<u8>>, IoError>;
    /// Writes a side file whole, replacing it. When this returns, the new contents must be
    /// durable, and a crash at any point must leave the old file or the new one, never a
    /// mix (write beside, sync, rename over, sync the directory): the engine commits a
    /// delete by writing its journal here.
    fn write_side_file(&self, name: &str, bytes: &[u8]) -> Result<(), IoError>;
    /// Removes a side file; a missing file is not an error. Hosts that cannot remove files
    /// keep the default, which empties it (an empty side file counts as absent).
    fn remove_side_file(&self, name: &str) -> Result<(), IoError> {
        self.write_side_file(name, &[])
    }
    /// 64 bits no other store is likely ever to draw: the creation nonce a new store
    /// records in `generation.zrg` (`docs/format.md`). Hosts draw them from the operating
    /// system's random source; the result need not be secret, only unrepeated.
    fn fresh_nonce(&self) -> u64;
    /// Takes the directory in `mode`, or fails at once with [`Error::Locked`]. The wasm
    /// guest counts its own handles ([`LockCounts`]); the process that runs it (`zr-wasm`)
    /// takes the inter-process locks a command needs on its behalf
    /// (`zrecord_app::cli::Command::locks`). Hosts with no locking at all (tests) keep the
    /// default, which grants everything.
    fn lock(&self, mode: LockMode) -> Result<(), Error> {
        let _ = mode;
        Ok(())
    }
    /// Gives back what [`Backend::lock`] took in `mode` (a no-op if it was not held).
    fn unlock(&self, mode: LockMode) {
        let _ = mode;
    }
}

/// A way to run independent pieces of work, possibly at once.
pub trait Parallel: Sync {
    /// How many pieces are worth making: the number of workers.
    fn workers(&self) -> usize;
    /// Calls `f` on every item, possibly concurrently, and returns the first error.
    fn for_each<T: Send, F>(&self, items: &mut [T], f: F) -> Result<(), Error>
    where
        F: Fn(&mut T) -> Result<(), Error> + Sync + Send;
}

/// Runs everything on the calling thread; what the wasm guest and the tests use.
#[derive(Clone, Copy, Debug, Default)]
pub struct Serial;

impl Parallel for Serial {
    fn workers(&self) -> usize {
        1
    }

    fn for_each<T: Send, F>(&self, items: &mut [T], f: F) -> Result<(), Error>
    where
        F: Fn(&mut T) -> Result<(), Error> + Sync + Send,
    {
        items.iter_mut().try_for_each(f)
    }
}

#[cfg(feature = "std")]
pub mod std_dir;

/// A fresh creation nonce for [`Backend::fresh_nonce`] on a host with an operating system:
/// the standard library's per-process random hash keys (drawn from the system's random
/// source, on WASI too) over the time, a count of the calls in this process and (outside
/// WASI, which has no process ids) the process id, so that two calls never repeat and two
/// processes almost never do.
#[cfg(feature = "std")]
pub fn os_nonce() -> u64 {
    use core::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static CALLS: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(CALLS.fetch_add(1, Ordering::Relaxed));
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    h.write_u128(now.as_nanos());
    #[cfg(not(target_os = "wasi"))]
    h.write_u32(std::process::id());
    h.finish()
}

/// An in-memory [`Backend`] with sparse files: for tests, fuzzing and fault simulation.
#[cfg(feature = "std")]
pub mod mem {
    use alloc::collections::BTreeMap;
    use alloc::string::{String, ToString};
    use alloc::sync::Arc;
    use alloc::vec::Vec;
    use std::sync::{Mutex, MutexGuard};

    use super::{Backend, StorageFile};
    use crate::error::{IoError, IoErrorKind};
    use crate::format::{chunk_file_name, META_FILE};

    const PAGE: usize = 4096;

    #[derive(Default)]
    struct Pages {
        len: u64,
        pages: BTreeMap<u64, Vec<u8>>,
    }

    /// A sparse in-memory file: only pages that were written take memory.
    #[derive(Clone, Default)]
    pub struct MemFile {
        name: String,
        inner: Arc<Mutex<Pages>>,
    }

    impl MemFile {
        fn lock(&self) -> MutexGuard<'_, Pages> {
            self.inner.lock().unwrap_or_else(|p| p.into_inner())
        }

        /// Every byte of the file (sparse holes as zeros).
        pub fn contents(&self) -> Vec<u8> {
            let len = self.lock().len as usize;
            let mut out = alloc::vec![0u8; len];
            self.read_at(0, &mut out).expect("in bounds");
            out
        }
    }

    impl StorageFile for MemFile {
        fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), IoError> {
            let p = self.lock();
            if offset + buf.len() as u64 > p.len {
                return Err(IoError::new(
                    IoErrorKind::UnexpectedEof,
                    alloc::format!("read {}", self.name),
                    "short read",
                ));
            }
            let mut at = offset;
            let mut done = 0;
            while done < buf.len() {
                let (page, within) = (at / PAGE as u64, (at % PAGE as u64) as usize);
                let n = (PAGE - within).min(buf.len() - done);
                match p.pages.get(&page) {
                    Some(bytes) => buf[done..done + n].copy_from_slice(&bytes[within..within + n]),
                    None => buf[done..done + n].fill(0),
                }
                done += n;
                at += n as u64;
            }
            Ok(())
        }

        fn write_at(&self, offset: u64, buf: &[u8]) -> Result<(), IoError> {
            let mut p = self.lock();
            let mut at = offset;
            let mut done = 0;
            while done < buf.len() {
                let (page, within) = (at / PAGE as u64, (at % PAGE as u64) as usize);
                let n = (PAGE - within).min(buf.len() - done);
                let bytes = p.pages.entry(page).or_insert_with(|| alloc::vec![0u8; PAGE]);
                bytes[within..within + n].copy_from_slice(&buf[done..done + n]);
                done += n;
                at += n as u64;
            }
            p.len = p.len.max(offset + buf.len() as u64);
            Ok(())
        }

        fn len(&self) -> Result<u64, IoError> {
            Ok(self.lock().len)
        }

        fn set_len(&self, len: u64) -> Result<(), IoError> {
            let mut p = self.lock();
            let keep = len.div_ceil(PAGE as u64);
            p.pages.retain(|&k, _| k < keep);
            if let Some(last) = p.pages.get_mut(&(len / PAGE as u64)) {
                last[(len % PAGE as u64) as usize..].fill(0);
            }
            p.len = len;
            Ok(())
        }

        fn sync(&self) -> Result<(), IoError> {
            Ok(())
        }
    }

    /// A directory of [`MemFile`]s. Clones share the same files, so a test can "reopen" a
    /// store by opening a clone.
    #[derive(Clone, Default)]
    pub struct MemBackend {
        files: Arc<Mutex<BTreeMap<String, MemFile>>>,
    }

    impl MemBackend {
        /// An empty directory.
        pub fn new() -> Self {
            Self::default()
        }

        /// The file called `name`, if it exists.
        pub fn file(&self, name: &str) -> Option<MemFile> {
            self.files.lock().unwrap_or_else(|p| p.into_inner()).get(name).cloned()
        }

        /// Names of all files.
        pub fn names(&self) -> Vec<String> {
            self.files.lock().unwrap_or_else(|p| p.into_inner()).keys().cloned().collect()
        }

        fn open(&self, name: &str, create: bool) -> Option<MemFile> {
            let mut files = self.files.lock().unwrap_or_else(|p| p.into_inner());
            if create {
                let f = files
                    .entry(name.to_string())
                    .or_insert_with(|| MemFile { name: name.to_string(), ..MemFile::default() });
                return Some(f.clone());
            }
            files.get(name).cloned()
        }
    }

    impl Backend for MemBackend {
        type File = MemFile;

        fn open_meta(&self, create: bool) -> Result<Option<MemFile>, IoError> {
            Ok(self.open(META_FILE, create))
        }

        fn open_chunk(&self, id: u16, create: bool) -> Result<Option<MemFile>, IoError> {
            Ok(self.open(&chunk_file_name(id), create))
        }

        fn open_aux(&self, name: &str, create: bool) -> Result<Option<MemFile>, IoError> {
            Ok(self.open(name, create))
        }

        fn remove_chunk(&self, id: u16) -> Result<(), IoError> {
            self.files.lock().unwrap_or_else(|p| p.into_inner()).remove(&chunk_file_name(id));
            Ok(())
        }

        fn sync_dir(&self) -> Result<(), IoError> {
            Ok(())
        }

        fn fresh_nonce(&self) -> u64 {
            super::os_nonce()
        }

        fn read_side_file(&self, name: &str) -> Result<Option<Vec<u8>>, IoError> {
            Ok(self.open(name, false).map(|f| f.contents()))
        }

        fn write_side_file(&self, name: &str, bytes: &[u8]) -> Result<(), IoError> {
            // Replaced whole under the directory lock: atomic, as the trait requires.
            let f = MemFile { name: name.to_string(), ..MemFile::default() };
            f.write_at(0, bytes)?;
            self.files.lock().unwrap_or_else(|p| p.into_inner()).insert(name.to_string(), f);
            Ok(())
        }

        fn remove_side_file(&self, name: &str) -> Result<(), IoError> {
            self.files.lock().unwrap_or_else(|p| p.into_inner()).remove(name);
            Ok(())
        }
    }
}
