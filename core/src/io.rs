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
    /// Deletes chunk file `id`; a missing file is not an error.
    fn remove_chunk(&self, id: u16) -> Result<(), IoError>;
    /// Makes the directory's entries (new or removed files) durable.
    fn sync_dir(&self) -> Result<(), IoError>;
    /// Reads a side file such as `schema.json`; `Ok(None)` if missing.
    fn read_side_file(&self, name: &str) -> Result<Option<Vec<u8>>, IoError>;
    /// Writes a side file whole, replacing it.
    fn write_side_file(&self, name: &str, bytes: &[u8]) -> Result<(), IoError>;
    /// Takes the directory in `mode`, or fails at once with [`Error::Locked`]. Hosts without
    /// inter-process locking (the wasm guest) keep the default, which grants everything.
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
