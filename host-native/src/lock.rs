//! Inter-process locks on a store, and what happens to them across `fork()` and `exec`.
//!
//! Every open handle holds a read lock on byte 0 of meta.zr ("presence"); delete and
//! compact convert it to a write lock, which fails while any other handle exists; the one
//! appending handle holds a write lock on byte 1. The locks are POSIX record locks
//! (`fcntl(F_SETLK)`), chosen over `flock` for one property: they belong to the process,
//! so a child never inherits them. A `flock` belongs to the open file description, which a
//! forked child shares until it closes its copy of the descriptor or execs: a child that
//! only sleeps (a DataLoader worker, a `multiprocessing` pool) kept a closed handle's lock
//! alive, and so did every process spawned by another thread in the instant between its
//! `clone` and its `exec` (the flaky `delete_and_compact_need_the_only_handle`).
//!
//! Process-owned locks have two sharp edges, and this module is where they are handled:
//! - They do not exclude other handles of the same process, so the handles of one process
//!   are counted here ([`Slot`]) and the counts decide what the process may do.
//! - Closing *any* descriptor of a file drops every lock the process holds on it. So meta.zr
//!   is opened through this module only, once per process and store ([`MetaFile`]), shared
//!   by all handles, and closed only when the last of them is gone, under the registry
//!   lock, so that no new handle can lock the file between the close and its own open.
//!
//! Across `fork()`: the child holds none of the parent's locks. A handle inherited by the
//! child notices on its next use ([`HandleLocks::revive`], via a fork generation bumped by a
//! `pthread_atfork` child handler) and takes its own read lock in the child before it
//! reads; it re-takes the appender lock on its next append, which fails while the parent
//! (or anyone else) appends, and the engine re-reads the header under that lock, so a child
//! never writes over records it did not know about. A child that never uses the store
//! holds nothing, so the parent's delete and compact are not blocked by it.
//! Across `exec`: every descriptor is opened close-on-exec and the locks are not inherited
//! anyway, so an exec'd program holds nothing.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Once, OnceLock, Weak};

use zrecord_core::error::Error;

/// The byte of meta.zr whose read lock means "a handle is open" and whose write lock means
/// "a delete or compact is running". Locks past end of file are allowed; meta.zr is large.
const PRESENCE: i64 = 0;
/// The byte whose write lock means "this process is the store's appender".
const APPENDER: i64 = 1;

/// The identity of a file: device and inode.
type Key = (u64, u64);

/// What this process holds on one store, counted over its handles.
#[derive(Default)]
struct Slot {
    meta: Weak<MetaFile>,
    /// Fork generation the counts below belong to; older counts are the parent's.
    generation: u64,
    /// Handles holding presence.
    holders: u32,
    /// One handle is deleting or compacting.
    exclusive: bool,
    /// One handle is the appender.
    appender: bool,
}

impl Slot {
    /// The counts, forgotten if they were inherited from a parent process (the parent's
    /// locks are not ours).
    fn current(&mut self) -> &mut Self {
        let generation = fork_generation();
        if self.generation != generation {
            *self = Slot { meta: self.meta.clone(), generation, ..Slot::default() };
        }
        self
    }
}

/// Every store this process has open, by meta.zr's identity.
static REGISTRY: Mutex<BTreeMap<Key, Slot>> = Mutex::new(BTreeMap::new());
/// Signalled when a [`MetaFile`] has closed its descriptors and left the registry.
static RELEASED: Condvar = Condvar::new();
/// Bumped in every forked child.
static FORK_GENERATION: AtomicU64 = AtomicU64::new(0);

fn registry() -> MutexGuard<'static, BTreeMap<Key, Slot>> {
    // The registry's data stays consistent across a panic: every update is a few plain
    // assignments after the fallible system call.
    REGISTRY.lock().unwrap_or_else(|p| p.into_inner())
}

fn fork_generation() -> u64 {
    FORK_GENERATION.load(Ordering::Acquire)
}

thread_local! {
    /// The registry guard held by the forking thread from `prepare` until `parent`/`child`.
    static FORK_GUARD: std::cell::RefCell<Option<MutexGuard<'static, BTreeMap<Key, Slot>>>> =
        const { std::cell::RefCell::new(None) };
}

extern "C" fn before_fork() {
    // Holding the registry across fork() means the child's copy is never mid-update and its
    // mutex is never held by a thread that does not exist in the child.
    let guard = registry();
    FORK_GUARD.with(|g| *g.borrow_mut() = Some(guard));
}

extern "C" fn after_fork_parent() {
    FORK_GUARD.with(|g| g.borrow_mut().take());
}

extern "C" fn after_fork_child() {
    FORK_GENERATION.fetch_add(1, Ordering::AcqRel);
    FORK_GUARD.with(|g| g.borrow_mut().take());
}

fn watch_forks() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: the three handlers are `extern "C"` functions with static lifetime that
        // never unwind (they only take or drop a mutex guard kept in a thread-local of the
        // forking thread and bump an atomic). In the child, only the forking thread exists,
        // and it is the one whose thread-local holds the guard, so the child handler drops
        // the very guard `before_fork` stored, leaving the child's copy of the mutex free.
        let rc = unsafe { libc::pthread_atfork(Some(before_fork), Some(after_fork_parent), Some(after_fork_child)) };
        // Only ENOMEM is possible; without the handlers a forked child would still hold no
        // locks (they are process-owned), it would just not re-take them before reading.
        debug_assert_eq!(rc, 0);
    });
}

/// Sets or clears one byte-range lock of this process without waiting. `Ok(false)` if
/// another process holds a conflicting lock.
fn set_lock(file: &File, kind: libc::c_int, byte: i64) -> io::Result<bool> {
    zrecord_core::io::std_dir::set_lock(file, libc::F_SETLK, kind, byte as u64)
}

/// meta.zr, opened once per process and store and shared by every handle of the store in
/// this process; its descriptors close only when the last handle is gone.
pub struct MetaFile {
    key: Key,
    /// Opened read-write if the first opener could write, else read-only.
    first: Option<File>,
    /// A read-write descriptor opened later for a writable handle, if `first` is read-only.
    writable: OnceLock<File>,
    first_writable: bool,
}

impl MetaFile {
    /// The process's meta.zr of the store whose meta file is `path`, opening it if no
    /// handle of this process has. `Ok(None)` if it does not exist and `create` is false.
    pub fn open(path: &Path, create: bool, writable: bool) -> io::Result<Option<Arc<MetaFile>>> {
        watch_forks();
        let mut reg = registry();
        loop {
            let key = match std::fs::metadata(path) {
                Ok(m) => Some((m.dev(), m.ino())),
                Err(e) if e.kind() == io::ErrorKind::NotFound => None,
                Err(e) => return Err(e),
            };
            if let Some(key) = key {
                if let Some(slot) = reg.get(&key) {
                    match slot.meta.upgrade() {
                        Some(meta) => {
                            drop(reg);
                            if writable {
                                meta.open_writable(path)?;
                            }
                            return Ok(Some(meta));
                        }
                        // The last handle is closing it right now: wait until its
                        // descriptors are gone, or closing them would drop our new locks.
                        None => {
                            reg = RELEASED.wait(reg).unwrap_or_else(|p| p.into_inner());
                            continue;
                        }
                    }
                }
            }
            // No handle of this process has it open: nothing we close can drop a lock of ours.
            let opts = OpenOptions::new().read(true).write(writable).create(create && writable).clone();
            let file = match zrecord_core::io::std_dir::open_regular(&opts, path) {
                Ok(f) => f,
                Err(e) if e.kind() == io::ErrorKind::NotFound && !create => return Ok(None),
                Err(e) => return Err(e),
            };
            let m = file.metadata()?;
            let key = (m.dev(), m.ino());
            if reg.get(&key).is_some_and(|s| s.meta.strong_count() > 0) {
                // Replaced between the stat and the open (or created by us just now while
                // another thread did too): go round and share the registered one.
                drop(file);
                continue;
            }
            let meta =
                Arc::new(MetaFile { key, first: Some(file), writable: OnceLock::new(), first_writable: writable });
            let slot = reg.entry(key).or_default();
            *slot = Slot { meta: Arc::downgrade(&meta), generation: fork_generation(), ..Slot::default() };
            return Ok(Some(meta));
        }
    }

    fn open_writable(&self, path: &Path) -> io::Result<()> {
        if self.first_writable || self.writable.get().is_some() {
            return Ok(());
        }
        let f = OpenOptions::new().read(true).write(true).open(path)?;
        // Racing openers: the loser's descriptor is closed, which is harmless only because
        // it never reaches a lock call; keep that so (no lock is taken before this returns).
        let _ = self.writable.set(f);
        Ok(())
    }

    /// The descriptor for reads (and writes, if this process may write).
    pub fn file(&self) -> &File {
        self.writable.get().or(self.first.as_ref()).expect("meta.zr descriptor is open until drop")
    }

    /// A descriptor opened for writing, if any handle of this process opened it so.
    fn write_file(&self) -> Option<&File> {
        if self.first_writable {
            self.first.as_ref()
        } else {
            self.writable.get()
        }
    }
}

impl Drop for MetaFile {
    fn drop(&mut self) {
        let mut reg = registry();
        if reg.get(&self.key).is_some_and(|s| s.meta.strong_count() == 0) {
            reg.remove(&self.key);
        }
        // Closed while the registry is held: a new handle of this process can only open and
        // lock meta.zr once these are gone (see `MetaFile::open`).
        drop(self.first.take());
        drop(self.writable.take());
        drop(reg);
        RELEASED.notify_all();
    }
}

/// What one handle holds.
#[derive(Default)]
struct Held {
    shared: bool,
    exclusive: bool,
    appender: bool,
}

/// One handle's locks on its store.
pub struct HandleLocks {
    meta: Mutex<Option<Arc<MetaFile>>>,
    held: Mutex<Held>,
    /// The fork generation `held` belongs to.
    generation: AtomicU64,
}

fn locked(what: &str) -> Error {
    Error::Locked(format!("{what}; close the other handle or wait for it to finish"))
}

fn refused(mode: Mode) -> Error {
    mode.refused()
}

fn lock_io(e: io::Error) -> Error {
    Error::Io(zrecord_core::error::IoError::from_std(e, "lock meta.zr"))
}

impl Default for HandleLocks {
    fn default() -> Self {
        HandleLocks { meta: Mutex::new(None), held: Mutex::new(Held::default()), generation: AtomicU64::new(0) }
    }
}

impl HandleLocks {
    /// Remembers the handle's meta.zr (from [`MetaFile::open`]); locks are taken on it.
    pub fn attach(&self, meta: Arc<MetaFile>) {
        *self.meta.lock().unwrap_or_else(|p| p.into_inner()) = Some(meta);
    }

    fn held(&self) -> MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn meta(&self) -> Result<Arc<MetaFile>, Error> {
        self.meta.lock().unwrap_or_else(|p| p.into_inner()).clone().ok_or_else(|| locked("the store handle is closed"))
    }

    /// In a process forked after this handle took its locks, takes the handle's presence
    /// lock in this process (the parent's is not inherited). `Ok(true)` if it did: the store
    /// may have changed while nothing protected this handle, and the caller re-reads the
    /// header before trusting its view.
    pub fn revive(&self) -> Result<bool, Error> {
        let generation = fork_generation();
        if self.generation.load(Ordering::Acquire) == generation {
            return Ok(false);
        }
        let mut held = self.held();
        if self.generation.load(Ordering::Acquire) == generation {
            return Ok(false);
        }
        let had_presence = held.shared;
        *held = Held::default();
        if had_presence {
            self.take(&mut held, Mode::Shared)?;
        }
        self.generation.store(generation, Ordering::Release);
        Ok(had_presence)
    }

    /// Takes `mode` for this handle (a no-op if it holds it already). Before a write (the
    /// appender and exclusive modes, taken at every append, delete and compact), also
    /// checks that meta.zr is still linked: once the store's directory is removed, an open
    /// handle's descriptors still accept writes, which would vanish with the last of them.
    pub fn lock(&self, mode: Mode) -> Result<(), Error> {
        self.revive()?;
        let mut held = self.held();
        self.take(&mut held, mode)?;
        if matches!(mode, Mode::Appender | Mode::Exclusive) {
            let meta = self.meta()?;
            let stat = meta.file().metadata().map_err(lock_io)?;
            if stat.nlink() == 0 {
                return Err(Error::Io(zrecord_core::error::IoError::new(
                    zrecord_core::error::IoErrorKind::NotFound,
                    "write to the store",
                    "its meta.zr was deleted while this handle was open (the store directory was removed); \
                     nothing was written",
                )));
            }
        }
        Ok(())
    }

    fn take(&self, held: &mut Held, mode: Mode) -> Result<(), Error> {
        let meta = self.meta()?;
        let mut reg = registry();
        let slot = reg.get_mut(&meta.key).expect("a live MetaFile is registered").current();
        match mode {
            Mode::Shared => {
                if held.shared {
                    return Ok(());
                }
                if slot.exclusive {
                    return Err(refused(Mode::Shared));
                }
                if slot.holders == 0 && !set_lock(meta.file(), libc::F_RDLCK, PRESENCE).map_err(lock_io)? {
                    return Err(refused(Mode::Shared));
                }
                slot.holders += 1;
                held.shared = true;
            }
            Mode::Exclusive => {
                if held.exclusive {
                    return Ok(());
                }
                if !held.shared {
                    return Err(locked("the store handle is closed"));
                }
                let only = slot.holders == 1;
                let file =
                    meta.write_file().ok_or_else(|| Error::InvalidArgument("store was opened read-only".into()))?;
                // Converting our read lock fails, leaving it in place, while any other
                // process holds its own.
                if !only || !set_lock(file, libc::F_WRLCK, PRESENCE).map_err(lock_io)? {
                    return Err(refused(Mode::Exclusive));
                }
                slot.exclusive = true;
                held.exclusive = true;
            }
            Mode::Appender => {
                if held.appender {
                    return Ok(());
                }
                let file =
                    meta.write_file().ok_or_else(|| Error::InvalidArgument("store was opened read-only".into()))?;
                if slot.appender || !set_lock(file, libc::F_WRLCK, APPENDER).map_err(lock_io)? {
                    return Err(refused(Mode::Appender));
                }
                slot.appender = true;
                held.appender = true;
            }
        }
        Ok(())
    }

    /// Gives back `mode` (a no-op if this handle does not hold it in this process).
    pub fn unlock(&self, mode: Mode) {
        let mut held = self.held();
        if self.generation.load(Ordering::Acquire) != fork_generation() {
            // Inherited from the parent and never revived here: the locks are the parent's.
            *held = Held::default();
            return;
        }
        let Ok(meta) = self.meta() else { return };
        let mut reg = registry();
        let Some(slot) = reg.get_mut(&meta.key) else { return };
        let slot = slot.current();
        // Unlocking cannot fail in a way a caller could act on: F_UNLCK and a downgrade to a
        // read lock we already hold are never refused.
        match mode {
            Mode::Shared => {
                if held.shared {
                    held.shared = false;
                    slot.holders -= 1;
                    if slot.holders == 0 {
                        let _ = set_lock(meta.file(), libc::F_UNLCK, PRESENCE);
                    }
                }
            }
            Mode::Exclusive => {
                if held.exclusive {
                    held.exclusive = false;
                    slot.exclusive = false;
                    let _ = set_lock(meta.file(), libc::F_RDLCK, PRESENCE);
                }
            }
            Mode::Appender => {
                if held.appender {
                    held.appender = false;
                    slot.appender = false;
                    let _ = set_lock(meta.file(), libc::F_UNLCK, APPENDER);
                }
            }
        }
    }
}

pub use zrecord_core::io::LockMode as Mode;

/// Opens (creating) the empty lock file `path` and takes an exclusive `flock` on it without
/// waiting: `Ok(None)` when another open file holds it (another process, or another handle
/// here). The lock lasts as long as the returned file. Dataset writers use it; stores use
/// the byte-range locks above (cache directories share theirs: `remote::disk`).
pub fn try_exclusive(path: &Path) -> io::Result<Option<File>> {
    let file = OpenOptions::new().create(true).truncate(false).write(true).open(path)?;
    match file.try_lock() {
        Ok(()) => Ok(Some(file)),
        Err(std::fs::TryLockError::WouldBlock) => Ok(None),
        Err(std::fs::TryLockError::Error(e)) => Err(e),
    }
}
