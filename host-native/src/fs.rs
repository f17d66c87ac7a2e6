//! The native [`Backend`]: files in a directory, positional I/O for writes, memory maps for
//! reads, and advisory locks (see [`crate::lock`]) so that processes sharing a store cannot
//! corrupt it.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use crate::lock::{HandleLocks, MetaFile};
use crate::remote::file::{RemoteDir, RemoteFile};

use memmap2::Mmap;
use zrecord_core::error::{Error, IoError};
use zrecord_core::io::std_dir::{open_regular, StoreDir};
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
    /// A file of a pushed dataset in an object store ([`crate::remote`]).
    Remote(Box<RemoteFile>),
}

/// One file of the store, optionally mapped read-only for fast reads.
pub struct NativeFile {
    fd: Fd,
    name: String,
    map: Option<Mmap>,
    /// How [`StorageFile::resident`] has answered lately ([`Warmth`]).
    warmth: Warmth,
}

/// A file's recent answers to "is this page in memory?", so that a file found in memory
/// again and again is not asked with a syscall each time. Readers ask before each gather
/// and each planner lookup (whether to hint the kernel to read ahead), and one `mincore`
/// per ask was 22% of a packed loader's time over a dataset in the page cache. After
/// [`Warmth::STREAK`] answers of "resident" in a row, the next [`Warmth::TRUSTED`] asks are
/// answered "resident" without a syscall; a page found absent starts the count again. A
/// wrong "resident" costs a page fault where a hint would have started the read a little
/// earlier: the answer is a hint's trigger, never a correctness question.
#[derive(Default)]
struct Warmth(std::sync::atomic::AtomicU32);

impl Warmth {
    const STREAK: u32 = 4;
    const TRUSTED: u32 = 60;

    /// `Some(true)` when recent answers stand in for a check; `None`: ask the kernel.
    fn trusted(&self) -> Option<bool> {
        use std::sync::atomic::Ordering::Relaxed;
        // Racy by design: two threads may both take the last trusted answer.
        let n = self.0.load(Relaxed);
        (n > Self::STREAK).then(|| {
            self.0.store(n - 1, Relaxed);
            true
        })
    }

    /// Records the kernel's answer.
    fn record(&self, resident: bool) {
        use std::sync::atomic::Ordering::Relaxed;
        let n = self.0.load(Relaxed);
        let next = match (resident, n >= Self::STREAK) {
            (false, _) => 0,
            (true, true) => Self::STREAK + Self::TRUSTED,
            (true, false) => n + 1,
        };
        self.0.store(next, Relaxed);
    }
}

impl NativeFile {
    /// Opens `path` read-write (creating it if `create`), or read-only, and maps it.
    pub fn open(path: &Path, create: bool, writable: bool, map: bool) -> Result<Option<Self>, IoError> {
        let name = path.display().to_string();
        let opts = OpenOptions::new().read(true).write(writable).create(create && writable).clone();
        let file = match open_regular(&opts, path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound && !create => return Ok(None),
            Err(e) => return Err(io_err(e, format!("open {name}"))),
        };
        let mut f = NativeFile { fd: Fd::Own(file), name, map: None, warmth: Warmth::default() };
        if map {
            f.remap()?;
        }
        Ok(Some(f))
    }

    fn file(&self) -> &File {
        match &self.fd {
            Fd::Own(f) => f,
            Fd::Meta(m) => m.file(),
            Fd::Remote(_) => unreachable!("a remote file is read through RemoteFile, never as a local file"),
        }
    }

    /// The remote file this is, if it is one.
    fn remote(&self) -> Option<&RemoteFile> {
        match &self.fd {
            Fd::Remote(r) => Some(r),
            _ => None,
        }
    }

    /// A file of a pushed dataset ([`crate::remote`]).
    pub fn from_remote(file: RemoteFile) -> NativeFile {
        Self::of_remote(file)
    }

    fn of_remote(file: RemoteFile) -> NativeFile {
        NativeFile { name: String::new(), fd: Fd::Remote(Box::new(file)), map: None, warmth: Warmth::default() }
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
        Ok(NativeFile { fd: Fd::Own(file), name, map: None, warmth: Warmth::default() })
    }

    fn remap(&mut self) -> Result<(), IoError> {
        self.warmth = Warmth::default();
        let len = self.file().metadata().map_err(|e| io_err(e, format!("stat {}", self.name)))?.len();
        self.map = if len == 0 {
            None
        } else {
            // SAFETY: `Mmap::map` is unsafe because the bytes behind the map can change (or
            // vanish) while a `&[u8]` into it is live. The contract that makes our use sound:
            // - The map is read-only and shared. Readers only ever look at the bytes of records
            //   whose entries are published (length stored last, Release/Acquire), and a
            //   published record's bytes are never written again by an appender, in this
            //   process or another: appends, ours or loaderx's, only write past the tail.
            // - Bytes of live records move only in delete/compact, which need `&mut Store` in
            //   this handle and the exclusive lock, and that lock cannot be had while any other
            //   zrecord handle, in any process, holds its presence lock (docs/format.md,
            //   "Locks"). A handle inherited through fork() re-takes its own presence lock
            //   before it reads again (crate::lock).
            // - No zrecord writer shrinks a file under another handle's live map, and no read
            //   runs past the length mapped here. A sparse store's chunk files are always
            //   CHUNK_FILE_LEN long while it is open (compact cuts the tail and restores the
            //   size). A dense store's files only grow while other handles may be open
            //   (appends write past the end); they shrink only under the exclusive lock
            //   (compact, `set_layout`), which no other handle can hold beside it. The handle
            //   that shrinks keeps its own maps, longer than the files now, but it reads only
            //   published records, their entries and their checksum slots, all of which lie
            //   inside the cut files (a file is cut at the end of what live records use), so
            //   no page past a file's end is touched (which would raise SIGBUS).
            // - The checksum file checksums.zrc is different: `Store::seal` (appender lock
            //   only) and compact/delete rewrite 32-byte slots of live records, and seal may
            //   run in another process while this one reads. The engine never hands out a
            //   reference into that map: it copies a slot out (32 bytes) and trusts it only if
            //   its seal and entry copy hold, so a slot read while another process writes it
            //   is at worst "unchecked" (format::sums). The file is created at its full size
            //   and never truncated by zrecord.
            // What this cannot cover: a writer that takes no locks. loaderx 0.5.4's delete or
            // compact running while a zrecord handle is open may rewrite record bytes under
            // a reader (wrong data or a decode error) or shrink a chunk file, which turns the
            // next read of a page past the new end into SIGBUS. Running loaderx's delete or
            // compact on a store zrecord has open is unsupported (docs/python.md, "Sharing a store
            // between processes").
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
        if let Some(r) = self.remote() {
            return r.read_at(offset, buf);
        }
        self.file().read_exact_at(buf, offset).map_err(|e| io_err(e, format!("read {} at {offset}", self.name)))
    }

    fn write_at(&self, offset: u64, buf: &[u8]) -> Result<(), IoError> {
        if let Some(r) = self.remote() {
            return r.write_at(offset, buf);
        }
        self.file().write_all_at(buf, offset).map_err(|e| io_err(e, format!("write {} at {offset}", self.name)))
    }

    fn len(&self) -> Result<u64, IoError> {
        if let Some(r) = self.remote() {
            return r.len();
        }
        Ok(self.file().metadata().map_err(|e| io_err(e, format!("stat {}", self.name)))?.len())
    }

    fn set_len(&self, len: u64) -> Result<(), IoError> {
        if let Some(r) = self.remote() {
            return r.set_len(len);
        }
        self.file().set_len(len).map_err(|e| io_err(e, format!("resize {} to {len}", self.name)))
    }

    fn sync(&self) -> Result<(), IoError> {
        if self.remote().is_some() {
            return Ok(());
        }
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

    #[cfg(unix)]
    fn resident(&self, offset: u64) -> bool {
        if let Some(r) = self.remote() {
            return r.resident(offset);
        }
        if let Some(answer) = self.warmth.trusted() {
            return answer;
        }
        let resident = self.residency(offset, 1).unwrap_or(true);
        self.warmth.record(resident);
        resident
    }

    #[cfg(unix)]
    fn will_need(&self, offset: u64, len: u64) {
        if let Some(r) = self.remote() {
            return r.will_need(offset, len);
        }
        let Some(map) = self.map.as_ref() else { return };
        let end = offset.saturating_add(len).min(map.len() as u64) as usize;
        let page = page_size();
        let start = (offset as usize) & !(page - 1);
        if start < end {
            // A hint: the kernel starts reading and returns; an error changes nothing.
            let _ = map.advise_range(memmap2::Advice::WillNeed, start, end - start);
        }
    }

    fn will_need_record(&self, offset: u64, len: u64, index: u32) {
        match self.remote() {
            // The remote cache keeps the record's index for its plan.
            Some(r) => r.will_need_record(offset, len, index),
            None => self.will_need(offset, len),
        }
    }

    fn will_need_records(&self, records: &[(u64, u64, u32)]) {
        match self.remote() {
            Some(r) => r.will_need_records(records),
            None => records.iter().for_each(|&(offset, len, _)| self.will_need(offset, len)),
        }
    }

    fn start_reads(&self) {
        if let Some(r) = self.remote() {
            r.start_reads();
        }
    }

    fn wants_hints(&self) -> bool {
        // A remote file fetches whatever is not announced one record at a time: it wants
        // every read announced, not only those whose first record is cold.
        self.remote().is_some_and(|r| r.wants_hints())
    }

    /// Starts writing the range back to disk without waiting (`sync_file_range` with
    /// `SYNC_FILE_RANGE_WRITE`); the barrier's `fdatasync` still makes it durable.
    #[cfg(target_os = "linux")]
    fn start_writeback(&self, offset: u64, len: u64) {
        use std::os::fd::AsRawFd;
        if self.remote().is_some() {
            return;
        }
        let (Ok(off), Ok(n)) = (i64::try_from(offset), i64::try_from(len)) else { return };
        // SAFETY: a plain syscall on a descriptor this file owns for its whole life; it
        // reads and writes no memory of ours. Its result is ignored: this is a hint.
        let _ = unsafe { libc::sync_file_range(self.file().as_raw_fd(), off, n, libc::SYNC_FILE_RANGE_WRITE) };
    }

    /// Reads the range through the page cache with `pread`, unless every page of it is
    /// resident already. Plain reads, not the map: the map is `MADV_RANDOM` (a fault reads
    /// one page), while sequential `pread`s get the kernel's readahead, and a hint such as
    /// `POSIX_FADV_WILLNEED` is capped by the kernel at the readahead window.
    #[cfg(unix)]
    fn warm(&self, offset: u64, len: u64) {
        if self.remote().is_some() {
            return; // the loader plans remote reads itself
        }
        if len == 0 || self.residency(offset, len).unwrap_or(false) {
            return;
        }
        std::thread_local! {
            // One piece's worth, kept by the warming thread between calls.
            static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        SCRATCH.with(|scratch| {
            let mut buf = scratch.borrow_mut();
            let want = len.min(zrecord_core::engine::WARM_PIECE) as usize;
            if buf.len() < want {
                buf.resize(want, 0);
            }
            let end = offset.saturating_add(len);
            let mut at = offset;
            while at < end {
                let n = ((end - at) as usize).min(buf.len());
                match self.file().read_at(&mut buf[..n], at) {
                    Ok(0) | Err(_) => break, // past the end, or a failure the real read will report
                    Ok(k) => at += k as u64,
                }
            }
        });
    }
}

impl NativeFile {
    /// Whether every page of the mapped range `offset..offset + len` (clamped to the map)
    /// is in memory, by mincore; `None` when the file is not mapped or the kernel cannot say.
    #[cfg(unix)]
    fn residency(&self, offset: u64, len: u64) -> Option<bool> {
        let map = self.map.as_deref()?;
        let end = offset.saturating_add(len).min(map.len() as u64) as usize;
        let page = page_size();
        let mut start = (offset.min(end as u64) as usize) & !(page - 1);
        let mut pages = [0u8; 256];
        while start < end {
            let n = (end - start).min(pages.len() * page);
            // SAFETY: `start` is page-aligned and `start..start + n` lies inside our live
            // mapping (`end` is clamped to it); mincore writes one byte per page of that
            // range, at most `pages.len()` of them. It reads no mapped memory and cannot
            // fault.
            let rc = unsafe { libc::mincore(map.as_ptr().add(start) as *mut libc::c_void, n, pages.as_mut_ptr()) };
            if rc != 0 {
                return None;
            }
            if !pages[..n.div_ceil(page)].iter().all(|p| p & 1 == 1) {
                return Some(false);
            }
            start += n;
        }
        Some(true)
    }
}

#[cfg(unix)]
fn page_size() -> usize {
    static PAGE: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    // SAFETY: sysconf has no preconditions.
    *PAGE.get_or_init(|| match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
        n if n > 0 && (n as usize).is_power_of_two() => n as usize,
        _ => 4096,
    })
}

/// A store directory on the local file system, or (read-only) in an object store.
pub struct DirBackend {
    dir: StoreDir,
    writable: bool,
    locks: HandleLocks,
    /// Set for a pushed store read from an object store ([`DirBackend::remote`]).
    remote: Option<RemoteDir>,
}

impl DirBackend {
    /// A backend for the store in `dir`, creating the directory if `writable`.
    pub fn new(dir: &Path, writable: bool) -> Result<Self, IoError> {
        if writable {
            std::fs::create_dir_all(dir).map_err(|e| io_err(e, format!("create directory {}", dir.display())))?;
        }
        Ok(DirBackend { dir: StoreDir::new(dir), writable, locks: HandleLocks::default(), remote: None })
    }

    /// A backend for a pushed store in an object store: read-only, no locks to take.
    pub fn remote(dir: RemoteDir) -> Self {
        let shown = std::path::PathBuf::from(dir.remote().url());
        DirBackend { dir: StoreDir::new(&shown), writable: false, locks: HandleLocks::default(), remote: Some(dir) }
    }

    /// Whether store files that are symbolic links leading out of the directory are
    /// opened (the default) or refused (`zr` without `--follow-symlinks`); see
    /// [`StoreDir::follow_links`].
    pub fn follow_links(mut self, follow: bool) -> Self {
        self.dir = self.dir.follow_links(follow);
        self
    }

    /// Refuses `path` if it leads out of the store and links are not followed.
    fn inside(&self, path: &Path) -> Result<(), IoError> {
        self.dir.check_inside(path).map_err(|e| io_err(e, format!("open {}", path.display())))
    }

    /// The object store directory this backend reads, if it is remote.
    pub fn remote_dir(&self) -> Option<&RemoteDir> {
        self.remote.as_ref()
    }

    /// The store directory.
    pub fn dir(&self) -> &Path {
        self.dir.root()
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
        if let Some(r) = &self.remote {
            return Ok(r.open_meta(create)?.map(NativeFile::of_remote));
        }
        let path = self.dir.meta_path();
        self.inside(&path)?;
        let name = path.display().to_string();
        let Some(meta) = MetaFile::open(&path, create, self.writable).map_err(|e| io_err(e, format!("open {name}")))?
        else {
            return Ok(None);
        };
        self.locks.attach(meta.clone());
        let mut f = NativeFile { fd: Fd::Meta(meta), name, map: None, warmth: Warmth::default() };
        f.remap()?;
        Ok(Some(f))
    }

    fn open_chunk(&self, id: u16, create: bool) -> Result<Option<NativeFile>, IoError> {
        if let Some(r) = &self.remote {
            return Ok(r.open_chunk(id, create)?.map(NativeFile::of_remote));
        }
        let path = self.dir.chunk_path(id);
        self.inside(&path)?;
        NativeFile::open(&path, create, self.writable, true)
    }

    fn open_aux(&self, name: &str, create: bool) -> Result<Option<NativeFile>, IoError> {
        if let Some(r) = &self.remote {
            return Ok(r.open_aux(name, create)?.map(NativeFile::of_remote));
        }
        let path = self.dir.side_path(name);
        self.inside(&path)?;
        NativeFile::open(&path, create, self.writable, true)
    }

    fn remove_chunk(&self, id: u16) -> Result<(), IoError> {
        if let Some(r) = &self.remote {
            return r.remove_chunk(id);
        }
        self.dir.remove_chunk(id)
    }

    fn fresh_nonce(&self) -> u64 {
        zrecord_core::io::os_nonce()
    }

    fn sync_dir(&self) -> Result<(), IoError> {
        if self.remote.is_some() {
            return Ok(());
        }
        self.dir.sync_dir()
    }

    fn read_side_file(&self, name: &str) -> Result<Option<Vec<u8>>, IoError> {
        if let Some(r) = &self.remote {
            return r.read_side_file(name);
        }
        self.dir.read_side_file(name)
    }

    fn write_side_file(&self, name: &str, bytes: &[u8]) -> Result<(), IoError> {
        if let Some(r) = &self.remote {
            return r.write_side_file(name, bytes);
        }
        self.dir.write_side_file(name, bytes)
    }

    fn remove_side_file(&self, name: &str) -> Result<(), IoError> {
        if let Some(r) = &self.remote {
            return r.remove_side_file(name);
        }
        self.dir.remove_side_file(name)
    }

    fn lock(&self, mode: LockMode) -> Result<(), Error> {
        if let Some(r) = &self.remote {
            return r.lock(mode);
        }
        self.locks.lock(mode)
    }

    fn unlock(&self, mode: LockMode) {
        if self.remote.is_some() {
            return;
        }
        self.locks.unlock(mode)
    }
}
