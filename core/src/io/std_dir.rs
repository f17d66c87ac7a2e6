//! What every `std::fs` backend shares (the native host and the wasm guest): where each file
//! of a store lives, and the directory-level operations of the [`Backend`] contract — side
//! files replaced atomically and durably, chunk removal, directory sync. The hosts differ only
//! in how they open and access a file (memory maps and `pread` natively; seek-and-read through
//! wasi:filesystem in the guest) and in locking.
//!
//! [`Backend`]: super::Backend

use std::fs::{File, OpenOptions};
use std::io::{self, ErrorKind, Read, Write};
use std::path::{Path, PathBuf};

use crate::error::{IoError, IoErrorKind};
use crate::format::{chunk_file_name, META_FILE};

/// A store directory on a `std::fs` file system.
#[derive(Clone, Debug)]
pub struct StoreDir {
    root: PathBuf,
    show: fn(&Path) -> alloc::string::String,
    /// Open store files that are symbolic links leading out of the directory.
    follow_links: bool,
}

/// Opens `path` with `opts` if it is a regular file, and refuses anything else (a FIFO, a
/// device, a socket) with [`IoErrorKind::NotRegularFile`] without waiting on it: opening a
/// FIFO for reading blocks until a writer comes, and reading one can wait forever. Every
/// store file and every input is opened through here, on every std host.
///
/// Natively the file is opened `O_NONBLOCK` (which does nothing to a regular file) and
/// checked with `fstat`; under WASI, which has no such flag, the path is checked before it
/// is opened, and the descriptor again after.
pub fn open_regular(opts: &OpenOptions, path: &Path) -> io::Result<File> {
    #[cfg(unix)]
    let file = {
        use std::os::unix::fs::OpenOptionsExt;
        let mut o = opts.clone();
        o.custom_flags(libc::O_NONBLOCK);
        o.open(path)?
    };
    #[cfg(not(unix))]
    let file = {
        match std::fs::metadata(path) {
            Ok(m) if !m.is_file() => return Err(IoError::std_error(IoErrorKind::NotRegularFile)),
            _ => {}
        }
        opts.open(path)?
    };
    if !file.metadata()?.is_file() {
        return Err(IoError::std_error(IoErrorKind::NotRegularFile));
    }
    Ok(file)
}

/// Sets (`F_RDLCK`, `F_WRLCK`) or clears (`F_UNLCK`) a lock on one byte of `file` without
/// waiting, with `cmd` `F_SETLK` (a lock of the process: the native host) or `F_OFD_SETLK`
/// (a lock of this descriptor, which closing another descriptor of the file does not drop:
/// `zr-wasm`, whose guest opens and closes meta.zr through descriptors of its own).
/// `Ok(false)` if another holds a conflicting lock.
///
/// The core's one system call of its own (hence its one `unsafe`): both hosts that take
/// locks (the native one, and `zr-wasm` for its guest) must take exactly the same ones, so
/// they share this function rather than each keeping a copy.
#[cfg(unix)]
#[allow(unsafe_code)]
pub fn set_lock(file: &File, cmd: libc::c_int, kind: libc::c_int, byte: u64) -> io::Result<bool> {
    use std::os::fd::AsRawFd;
    // SAFETY: `flock` is a plain C struct of integers; all-zero is a valid value.
    let mut fl: libc::flock = unsafe { core::mem::zeroed() };
    fl.l_type = kind as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = byte as libc::off_t;
    fl.l_len = 1;
    loop {
        // SAFETY: F_SETLK and F_OFD_SETLK read the `flock` we pass by pointer and nothing
        // else (OFD locks need `l_pid` zero, as it is); the descriptor is owned by `file`,
        // which outlives the call.
        let rc = unsafe { libc::fcntl(file.as_raw_fd(), cmd, &fl) };
        if rc == 0 {
            return Ok(true);
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EAGAIN) | Some(libc::EACCES) => return Ok(false),
            _ => return Err(e),
        }
    }
}

/// The most bytes a side file read whole ([`StoreDir::read_side_file`],
/// [`crate::io::Backend::read_side_file`]) may have: a larger one is refused before it is
/// read, so a hostile `schema.json` of gigabytes costs nothing. `schema.json` describes one
/// sample's dtype and shape in a few hundred bytes: 1 MiB
/// ([`crate::schema::MAX_SCHEMA_LEN`]). The delete journal holds at most one move per record
/// (`32 + 20 * 2^24` bytes). Every other side file is a few bytes; 1 MiB for them too.
pub fn side_file_limit(name: &str) -> u64 {
    match name {
        crate::format::DELETE_JOURNAL => crate::format::journal::MAX_JOURNAL_LEN,
        _ => crate::schema::MAX_SCHEMA_LEN,
    }
}

/// Reads the file at `path` whole if it is a regular file of at most `limit` bytes.
/// `Ok(None)` if it does not exist.
pub fn read_capped(path: &Path, limit: u64) -> io::Result<Option<alloc::vec::Vec<u8>>> {
    let file = match open_regular(OpenOptions::new().read(true), path) {
        Ok(f) => f,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let len = file.metadata()?.len();
    if len > limit {
        return Err(io::Error::other(alloc::format!("{len} bytes is over the {limit}-byte limit of this file")));
    }
    let mut bytes = alloc::vec::Vec::with_capacity(len as usize);
    file.take(limit + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(io::Error::other(alloc::format!("it grew past the {limit}-byte limit of this file")));
    }
    Ok(Some(bytes))
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
        StoreDir { root: root.into(), show: display, follow_links: true }
    }

    /// The store in directory `root`, naming paths in errors with `show` (the wasm guest
    /// names the host paths the user typed, not its guest paths).
    pub fn with_names(root: impl Into<PathBuf>, show: fn(&Path) -> alloc::string::String) -> StoreDir {
        StoreDir { root: root.into(), show, follow_links: true }
    }

    /// Whether store files that are symbolic links leading out of the directory are opened
    /// (the default, as for any library call) or refused with
    /// [`IoErrorKind::OutsideStore`] (the native `zr` without `--follow-symlinks`: a
    /// store copied from elsewhere must not make it read, and print or export, any file the
    /// user can read).
    pub fn follow_links(mut self, follow: bool) -> StoreDir {
        self.follow_links = follow;
        self
    }

    /// Opens the store file `path` (meta.zr, a chunk, a side file) with `opts`: a regular
    /// file ([`open_regular`]), and, unless links are followed, not a symbolic link leading
    /// out of the store.
    pub fn open_file(&self, opts: &OpenOptions, path: &Path) -> io::Result<File> {
        self.check_inside(path)?;
        open_regular(opts, path)
    }

    /// Refuses `path` if it is a symbolic link (or under one) whose target lies outside the
    /// store directory, unless links are followed. A missing path passes: the open that
    /// follows says so.
    pub fn check_inside(&self, path: &Path) -> io::Result<()> {
        if self.follow_links {
            return Ok(());
        }
        match std::fs::symlink_metadata(path) {
            Ok(m) if m.file_type().is_symlink() => {}
            _ => return Ok(()),
        }
        let target = std::fs::canonicalize(path)?;
        if target.starts_with(std::fs::canonicalize(&self.root)?) {
            Ok(())
        } else {
            Err(IoError::std_error(IoErrorKind::OutsideStore))
        }
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

    /// The bytes of side file `name`, or `None` if there is none; a file past
    /// [`side_file_limit`] is refused unread.
    pub fn read_side_file(&self, name: &str) -> Result<Option<alloc::vec::Vec<u8>>, IoError> {
        let path = self.root.join(name);
        self.check_inside(&path)
            .and_then(|()| read_capped(&path, side_file_limit(name)))
            .map_err(|e| io_err(e, alloc::format!("read {}", (self.show)(&path))))
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

    /// Runs `f` on a thread and fails if it has not finished in 10 s: a call that blocks on
    /// a FIFO must show as a failure, not hang the suite.
    #[cfg(unix)]
    fn within_10s<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(f());
        });
        rx.recv_timeout(std::time::Duration::from_secs(10)).expect("blocked on a FIFO for 10 s")
    }

    #[cfg(unix)]
    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(alloc::format!("zrecord-std-dir-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[cfg(unix)]
    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let dir = scratch("fifo");
        let fifo = dir.join("schema.json");
        let ok = std::process::Command::new("mkfifo").arg(&fifo).status().expect("mkfifo runs");
        assert!(ok.success());
        let d = StoreDir::new(&dir);
        let err = within_10s(move || d.read_side_file("schema.json")).unwrap_err();
        assert_eq!(err.kind, IoErrorKind::NotRegularFile, "{err}");
        let err = within_10s(move || open_regular(OpenOptions::new().read(true), &fifo)).unwrap_err();
        assert_eq!(IoError::from_std(err, "open").kind, IoErrorKind::NotRegularFile);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn an_oversized_side_file_is_refused_unread() {
        let dir = scratch("cap");
        let f = std::fs::File::create(dir.join("schema.json")).unwrap();
        f.set_len(crate::schema::MAX_SCHEMA_LEN + 1).unwrap(); // sparse: costs nothing
        let err = StoreDir::new(&dir).read_side_file("schema.json").unwrap_err();
        assert!(err.message.contains("over the 1048576-byte limit"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn links_out_of_the_store_are_refused_unless_followed() {
        let dir = scratch("links");
        let (store, outside) = (dir.join("store"), dir.join("outside.json"));
        std::fs::create_dir(&store).unwrap();
        std::fs::write(&outside, b"secret").unwrap();
        std::fs::write(store.join("inner.json"), b"ok").unwrap();
        std::os::unix::fs::symlink(&outside, store.join("schema.json")).unwrap();
        std::os::unix::fs::symlink("inner.json", store.join("x.json")).unwrap();
        std::os::unix::fs::symlink("loop.json", store.join("loop.json")).unwrap();
        let strict = StoreDir::new(&store).follow_links(false);
        let err = strict.read_side_file("schema.json").unwrap_err();
        assert_eq!(err.kind, IoErrorKind::OutsideStore, "{err}");
        assert_eq!(strict.read_side_file("x.json").unwrap().as_deref(), Some(&b"ok"[..]));
        assert_eq!(StoreDir::new(&store).read_side_file("schema.json").unwrap().as_deref(), Some(&b"secret"[..]));
        let err = StoreDir::new(&store).read_side_file("loop.json").unwrap_err();
        assert_eq!((err.kind, err.message.as_str()), (IoErrorKind::SymlinkLoop, "too many levels of symbolic links"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

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
