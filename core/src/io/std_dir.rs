//! What every `std::fs` backend shares (the native host and the wasm guest): where each file
//! of a store lives, and the directory-level operations of the [`Backend`] contract — side
//! files replaced atomically and durably, chunk removal, directory sync. The hosts differ only
//! in how they open and access a file (memory maps and `pread` natively; seek-and-read through
//! wasi:filesystem in the guest) and in locking.
//!
//! [`Backend`]: super::Backend

use std::fs::File;
use std::io::{self, ErrorKind, Write};
use std::path::{Path, PathBuf};

use crate::error::IoError;
use crate::format::{chunk_file_name, META_FILE};

/// A store directory on a `std::fs` file system.
#[derive(Clone, Debug)]
pub struct StoreDir {
    root: PathBuf,
    show: fn(&Path) -> alloc::string::String,
}

fn display(p: &Path) -> alloc::string::String {
    alloc::string::ToString::to_string(&p.display())
}

fn io_err(e: io::Error, context: impl Into<alloc::string::String>) -> IoError {
    IoError::from_std(e, context)
}

impl StoreDir {
    /// The store in directory `root`.
    pub fn new(root: impl Into<PathBuf>) -> StoreDir {
        StoreDir { root: root.into(), show: display }
    }

    /// The store in directory `root`, naming paths in errors with `show` (the wasm guest
    /// names the host paths the user typed, not its guest paths).
    pub fn with_names(root: impl Into<PathBuf>, show: fn(&Path) -> alloc::string::String) -> StoreDir {
        StoreDir { root: root.into(), show }
    }

    /// The store directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Path of meta.zr.
    pub fn meta_path(&self) -> PathBuf {
        self.root.join(META_FILE)
    }

    /// Path of chunk file `id`.
    pub fn chunk_path(&self, id: u16) -> PathBuf {
        self.root.join(chunk_file_name(id))
    }

    /// Path of side file `name` (such as the checksum file, opened for positional I/O).
    pub fn side_path(&self, name: &str) -> PathBuf {
        self.root.join(name)
    }

    /// Removes chunk file `id`; a missing one is not an error (compact may be re-run).
    pub fn remove_chunk(&self, id: u16) -> Result<(), IoError> {
        let path = self.chunk_path(id);
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != ErrorKind::NotFound => {
                Err(io_err(e, alloc::format!("remove {}", (self.show)(&path))))
            }
            _ => Ok(()),
        }
    }

    /// Makes the directory's entries durable (creations, renames, removals).
    pub fn sync_dir(&self) -> Result<(), IoError> {
        let sync = || File::open(&self.root)?.sync_all();
        match sync() {
            Ok(()) => Ok(()),
            // Some wasi hosts (and the JS shim) cannot sync a directory descriptor; entries
            // then become durable with the host's next sync, which is all such a host offers.
            // Native Linux never answers so.
            Err(e) if matches!(e.kind(), ErrorKind::Unsupported | ErrorKind::InvalidInput) => Ok(()),
            Err(e) => Err(io_err(e, alloc::format!("sync directory {}", (self.show)(&self.root)))),
        }
    }

    /// The bytes of side file `name`, or `None` if there is none.
    pub fn read_side_file(&self, name: &str) -> Result<Option<alloc::vec::Vec<u8>>, IoError> {
        let path = self.root.join(name);
        match std::fs::read(&path) {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_err(e, alloc::format!("read {}", (self.show)(&path)))),
        }
    }

    /// Replaces side file `name`: written beside, synced, renamed over, and the directory
    /// synced, so a crash leaves the old file or the new one, and the new one is durable when
    /// this returns (the engine commits deletes through a side file).
    pub fn write_side_file(&self, name: &str, bytes: &[u8]) -> Result<(), IoError> {
        let path = self.root.join(name);
        let tmp = self.root.join(alloc::format!(".{name}.tmp"));
        let write = || -> io::Result<()> {
            let mut f = File::create(&tmp)?;
            f.write_all(bytes)?;
            f.sync_all()?;
            std::fs::rename(&tmp, &path)
        };
        write().map_err(|e| io_err(e, alloc::format!("write {}", (self.show)(&path))))?;
        self.sync_dir()
    }

    /// Removes side file `name` durably; a missing one is not an error.
    pub fn remove_side_file(&self, name: &str) -> Result<(), IoError> {
        let path = self.root.join(name);
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != ErrorKind::NotFound => {
                Err(io_err(e, alloc::format!("remove {}", (self.show)(&path))))
            }
            _ => self.sync_dir(),
        }
    }
}

/// Creates `dir` and its missing parents, returning those it created, outermost first, so a
/// failed command can remove exactly what it made. Shared by the `zr` front ends; a failure
/// names the directory that could not be made.
pub fn create_missing_dirs(dir: &Path) -> Result<alloc::vec::Vec<PathBuf>, (PathBuf, io::Error)> {
    let mut missing = alloc::vec::Vec::new();
    let mut d = Some(dir);
    while let Some(p) = d.filter(|p| !p.as_os_str().is_empty() && !p.exists()) {
        missing.push(p.to_path_buf());
        d = p.parent();
    }
    missing.reverse();
    for p in &missing {
        std::fs::create_dir(p).map_err(|e| (p.clone(), e))?;
    }
    Ok(missing)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn side_files_are_replaced_whole_and_leave_no_temporary_behind() {
        let dir = std::env::temp_dir().join(alloc::format!("zrecord-std-dir-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let d = StoreDir::new(&dir);
        assert_eq!(d.read_side_file("x.json").unwrap(), None);
        d.write_side_file("x.json", b"one").unwrap();
        d.write_side_file("x.json", b"two!").unwrap();
        assert_eq!(d.read_side_file("x.json").unwrap().as_deref(), Some(&b"two!"[..]));
        let names: alloc::vec::Vec<_> =
            std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        assert_eq!(names, ["x.json"]);
        d.remove_side_file("x.json").unwrap();
        d.remove_side_file("x.json").unwrap();
        d.remove_chunk(7).unwrap();
        assert_eq!(d.chunk_path(7), dir.join("7.zr"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
