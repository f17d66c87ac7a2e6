//! The cache directory (`cache_dir=`): record ranges fetched from an object store, kept on
//! local disk up to a byte budget and found again by the next run.
//!
//! Each pushed object has one sparse file here, `XXH3-SIZE.data`, named by the hash and
//! size its listing gives for the stored bytes (content-addressed: another version of the
//! object, or another dataset with the same bytes, is another file or the same one), holding
//! fetched ranges at their own offsets, and a log beside it, `XXH3-SIZE.log`, of 25-byte
//! entries: `op` (1 = added record data, 2 = added metadata, 0 = dropped), `start` and `end`
//! (u64 LE), and the XXH3-64 of the range's bytes (u64 LE; 0 for a drop). The data is written before its entry; every range
//! read back is checked against its hash, so a torn write, a crash between the two or a
//! changed file is a miss (the range is fetched again), never wrong bytes. A torn last entry
//! is ignored.
//!
//! Over budget, ranges go in the order the memory cache uses ([`super::cache::Cache`]): the
//! one the loader's plan needs furthest ahead first; ranges found on disk at open, whose
//! records this run has not named, go before those. A dropped range's blocks are given
//! back to the file system (`FALLOC_FL_PUNCH_HOLE`). The budget counts record data;
//! metadata blocks (record tables, checksums, manifests: some 24 bytes a record) are kept
//! besides and never dropped, so a warm directory opens a dataset without fetching them.
//!
//! `cache.json` (`{"format": "zrecord-cache", "version": 1}`) says what the directory holds;
//! a directory of another version, or a non-empty one without it, is refused rather than
//! read.
//!
//! Several processes may use one directory at once (the workers of a torch DataLoader, which
//! each open the dataset again; ranks on one machine): each holds a shared `flock` on
//! `.zrecord-cache.lock` while it uses the directory (the first takes it exclusively for a
//! moment to write `cache.json`). Every change to an object's file and log (a range added,
//! a range dropped) is made under an exclusive `flock` on that log, after reading what the
//! others appended since; a process also reads the others' entries before it calls a range
//! a miss. So each process sees every range any of them fetched, and the budget counts
//! them all. A reader may still meet a range another process is dropping: its hash fails,
//! and it is a miss like any other. Ranges another process fetched are ones this process's
//! plan does not know; like ranges of an earlier run, they go first when over budget.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use zrecord_core::error::{IoError, IoErrorKind};

use super::objects::Object;
use super::plan::{NextUse, ReadPlan};
use super::traffic::Traffic;
use super::{io, lock, RemoteCounts, RemoteStats};
use zrecord_core::format::sums::checksum;

/// The lock file inside a cache directory.
pub const LOCK_FILE: &str = ".zrecord-cache.lock";
/// The file naming a cache directory's layout and version.
pub const VERSION_FILE: &str = "cache.json";
/// This layout's version.
pub const VERSION: u32 = 1;
/// The most bytes [`VERSION_FILE`] may hold.
const VERSION_FILE_CAP: u64 = 64 << 10;
const ENTRY: usize = 25;

/// A range on disk: its end, hash, and the dataset samples it holds (when this run knows).
struct Extent {
    end: u64,
    hash: u64,
    /// Dataset sample numbers of the records inside, for the plan.
    samples: Vec<u64>,
    /// The soonest next use of those samples, as the plan last said.
    next: NextUse,
    seq: u64,
    /// Metadata: kept whatever the budget.
    pinned: bool,
}

/// An object's log and how far this process has applied it.
struct Log {
    file: File,
    /// Bytes of whole entries applied to the object's extents.
    applied: u64,
}

/// One object's file and log. Lock order: `log`, then `extents`.
struct DiskObject {
    data: File,
    log: Mutex<Log>,
    extents: Mutex<BTreeMap<u64, Extent>>,
}

/// A cache directory in use (see the module docs).
pub struct DiskCache {
    dir: PathBuf,
    _lock: File,
    limit: u64,
    held: AtomicU64,
    seq: AtomicU64,
    objects: Mutex<HashMap<String, Arc<DiskObject>>>,
    evicting: Mutex<()>,
    /// Reads served from disk.
    pub hits: AtomicU64,
    /// Bytes served from disk.
    pub hit_bytes: AtomicU64,
    /// This process's counts as the other processes see them ([`super::traffic`]).
    traffic: Traffic,
}

impl DiskCache {
    /// Opens (creating) the cache directory `dir` with a budget of `limit` bytes; drops
    /// ranges at once if the directory holds more.
    pub fn open(dir: &Path, limit: u64) -> Result<Arc<DiskCache>, IoError> {
        std::fs::create_dir_all(dir).map_err(io(dir, "create cache directory"))?;
        let lock_file = share(dir)?;
        let cache = Arc::new(DiskCache {
            dir: dir.to_path_buf(),
            _lock: lock_file,
            limit,
            held: AtomicU64::new(0),
            seq: AtomicU64::new(0),
            objects: Mutex::new(HashMap::new()),
            evicting: Mutex::new(()),
            hits: AtomicU64::new(0),
            hit_bytes: AtomicU64::new(0),
            traffic: Traffic::claim(dir)?,
        });
        // Load every object's log now, so the budget counts what earlier runs left.
        let entries = std::fs::read_dir(dir).map_err(io(dir, "list"))?;
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Some(key) = name.strip_suffix(".log") {
                cache.object(key)?;
            }
        }
        cache.evict(None);
        Ok(cache)
    }

    /// `counts` (a remote location's) with this process's reads from the directory.
    pub fn with_hits(&self, mut counts: RemoteCounts) -> RemoteCounts {
        counts.disk_hits = self.hits.load(Ordering::Relaxed);
        counts.disk_bytes = self.hit_bytes.load(Ordering::Relaxed);
        counts
    }

    /// Writes this process's counts where other processes add them up
    /// ([`super::traffic::total`]): after each request and each read from disk.
    pub fn publish(&self, stats: &RemoteStats) {
        self.traffic.publish(&self.with_hits(stats.counts()));
    }

    /// The budget, in bytes.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Bytes of record data on disk now (metadata not counted).
    pub fn held(&self) -> u64 {
        self.held.load(Ordering::Relaxed)
    }

    /// The key of the pushed object `object`.
    pub fn key(object: &Object) -> String {
        format!("{}-{}", object.xxh3, object.stored)
    }

    fn object(&self, key: &str) -> Result<Arc<DiskObject>, IoError> {
        let mut objects = lock(&self.objects);
        if let Some(o) = objects.get(key) {
            return Ok(o.clone());
        }
        let data_path = self.dir.join(format!("{key}.data"));
        let log_path = self.dir.join(format!("{key}.log"));
        let data = File::options()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&data_path)
            .map_err(io(&data_path, "open"))?;
        let log = File::options()
            .create(true)
            .truncate(false)
            .read(true)
            .append(true)
            .open(&log_path)
            .map_err(io(&log_path, "open"))?;
        let o = Arc::new(DiskObject {
            data,
            log: Mutex::new(Log { file: log, applied: 0 }),
            extents: Mutex::new(BTreeMap::new()),
        });
        self.catch_up(&o, &mut lock(&o.log), false).map_err(io(&log_path, "read"))?;
        objects.insert(key.to_owned(), o.clone());
        Ok(o)
    }

    /// Applies the entries appended to `o`'s log since this process last read it (by an
    /// earlier run, or another process now). `locked`: the caller holds the log's `flock`,
    /// so a part of an entry at the end is a write torn by a crash, and is cut off (entries
    /// appended after it would be read out of step); unlocked, it may be an entry being
    /// written, and is left for later.
    fn catch_up(&self, o: &DiskObject, log: &mut Log, locked: bool) -> std::io::Result<()> {
        let len = log.file.metadata()?.len();
        if len <= log.applied {
            return Ok(());
        }
        let mut text = vec![0u8; (len - log.applied) as usize];
        log.file.read_exact_at(&mut text, log.applied)?;
        let whole = text.len() - text.len() % ENTRY;
        let mut extents = lock(&o.extents);
        for e in text[..whole].chunks_exact(ENTRY) {
            let start = u64::from_le_bytes(e[1..9].try_into().expect("8 bytes"));
            let end = u64::from_le_bytes(e[9..17].try_into().expect("8 bytes"));
            let hash = u64::from_le_bytes(e[17..25].try_into().expect("8 bytes"));
            let old = if (e[0] == 1 || e[0] == 2) && start < end {
                let seq = self.seq.fetch_add(1, Ordering::Relaxed);
                let pinned = e[0] == 2;
                if !pinned {
                    self.held.fetch_add(end - start, Ordering::Relaxed);
                }
                extents.insert(start, Extent { end, hash, samples: Vec::new(), next: NextUse::default(), seq, pinned })
            } else {
                extents.remove(&start)
            };
            if let Some(old) = old.filter(|old| !old.pinned) {
                self.held.fetch_sub(old.end - start, Ordering::Relaxed);
            }
        }
        log.applied += whole as u64;
        if locked && whole < text.len() {
            log.file.set_len(log.applied)?;
        }
        Ok(())
    }

    /// Runs `change` on `o` under the exclusive `flock` of its log, after catching up with
    /// what other processes appended; `None` if the lock or the log's read fails.
    fn change<R>(&self, o: &DiskObject, change: impl FnOnce(&mut Log) -> R) -> Option<R> {
        let mut log = lock(&o.log);
        log.file.lock().ok()?;
        let out = self.catch_up(o, &mut log, true).ok().map(|()| change(&mut log));
        let _ = log.file.unlock();
        out
    }

    /// Appends `entry` to the log of an object this process has caught up with under its
    /// `flock` (so the entry lands where `applied` ends).
    fn append(log: &mut Log, entry: &[u8; ENTRY]) -> bool {
        let ok = log.file.write_all(entry).is_ok();
        if ok {
            log.applied += ENTRY as u64;
        }
        ok
    }

    /// The bytes `start..end` of the object `key`, if ranges on disk hold them all (one, or
    /// several back to back) and each still matches its hash.
    pub fn get(&self, key: &str, start: u64, end: u64) -> Option<Bytes> {
        let o = self.object(key).ok()?;
        let pieces = Self::pieces(&o, start, end).or_else(|| {
            // Not here when last looked: perhaps another process has fetched it since. (Not
            // behind a write of this process: that one is news to nobody here.)
            self.catch_up(&o, &mut *o.log.try_lock().ok()?, false).ok()?;
            Self::pieces(&o, start, end)
        })?;
        let mut out = Vec::new();
        let single = pieces.len() == 1;
        for (s, e, hash, seq) in pieces {
            let mut buf = vec![0u8; (e - s) as usize];
            if o.data.read_exact_at(&mut buf, s).is_err() || checksum(&buf) != hash {
                // Torn, changed, or being dropped by another process: fetch it again.
                self.drop_extent(&o, s, seq);
                return None;
            }
            let (from, to) = (s.max(start), e.min(end));
            if single {
                // One range holds it all: its buffer is the answer, no second copy.
                self.count_hit(end - start);
                return Some(Bytes::from(buf).slice((from - s) as usize..(to - s) as usize));
            }
            out.resize((end - start) as usize, 0);
            out[(from - start) as usize..(to - start) as usize]
                .copy_from_slice(&buf[(from - s) as usize..(to - s) as usize]);
        }
        self.count_hit(end - start);
        Some(Bytes::from(out))
    }

    /// The ranges (start, end, hash, seq) that hold `start..end` back to back, if any do.
    fn pieces(o: &DiskObject, start: u64, end: u64) -> Option<Vec<(u64, u64, u64, u64)>> {
        let extents = lock(&o.extents);
        let mut pieces = Vec::new();
        let mut at = start;
        while at < end {
            // The range holding `at`: usually the last to start at or before it, but ranges
            // merged differently in two runs overlap, and a short one may sit inside a
            // longer one that started earlier.
            let (&s, x) = extents.range(..=at).rev().take(64).find(|(_, x)| x.end > at)?;
            pieces.push((s, x.end, x.hash, x.seq));
            at = x.end;
        }
        Some(pieces)
    }

    fn count_hit(&self, bytes: u64) {
        self.hits.fetch_add(1, Ordering::Relaxed);
        self.hit_bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Keeps `bytes`, fetched at `start` of object `key`, holding dataset samples `samples`
    /// (`pinned`: metadata, never dropped); then keeps the budget by `plan`. A failure to
    /// write only means the range is not kept.
    pub fn put(&self, key: &str, start: u64, bytes: &[u8], samples: Vec<u64>, pinned: bool, plan: Option<&ReadPlan>) {
        let end = start + bytes.len() as u64;
        if bytes.is_empty() || bytes.len() as u64 > self.limit {
            return;
        }
        let Ok(o) = self.object(key) else { return };
        let covered = |o: &DiskObject| lock(&o.extents).range(..=start).next_back().is_some_and(|(_, x)| x.end >= end);
        if covered(&o) {
            return;
        }
        let hash = checksum(bytes);
        self.change(&o, |log| {
            // Another process may have kept it meanwhile.
            if covered(&o) || o.data.write_all_at(bytes, start).is_err() {
                return;
            }
            if !Self::append(log, &entry(if pinned { 2 } else { 1 }, start, end, hash)) {
                return;
            }
            let seq = self.seq.fetch_add(1, Ordering::Relaxed);
            let replaced =
                lock(&o.extents).insert(start, Extent { end, hash, samples, next: NextUse::default(), seq, pinned });
            if let Some(old) = replaced.filter(|old| !old.pinned) {
                self.held.fetch_sub(old.end - start, Ordering::SeqCst);
            }
            if !pinned {
                self.held.fetch_add(end - start, Ordering::SeqCst);
            }
        });
        self.evict(plan);
    }

    /// Drops the range at `start` of `o` if it is still the one numbered `seq` here (not
    /// dropped or kept again meanwhile, by this process or another).
    fn drop_extent(&self, o: &DiskObject, start: u64, seq: u64) -> bool {
        let mut dropped = false;
        self.change(o, |log| {
            let mut extents = lock(&o.extents);
            if extents.get(&start).is_none_or(|x| x.seq != seq) {
                return;
            }
            dropped = true;
            let x = extents.remove(&start).expect("just found");
            drop(extents);
            if !x.pinned {
                self.held.fetch_sub(x.end - start, Ordering::Relaxed);
            }
            // Blocks first, entry second: a crash between leaves a listed range that fails
            // its hash (a miss), never blocks that nothing lists.
            punch_hole(&o.data, start, x.end - start);
            Self::append(log, &entry(0, start, x.end, 0));
        });
        dropped
    }

    /// Drops ranges until 10% under budget: furthest next use by `plan` first (ranges whose
    /// samples this run does not know before all), oldest first without a plan.
    ///
    /// One thread evicts at a time; a `put` that finds another evicting leaves its range to
    /// that one, which chose what to drop before the range was there. So the evicting
    /// thread looks again once it has let go, as long as a pass drops something: without
    /// that, ranges kept during a pass stayed over the budget (a remote test under load
    /// ended with 26,871 bytes held on a 20,000-byte budget).
    fn evict(&self, plan: Option<&ReadPlan>) {
        while self.held.load(Ordering::SeqCst) > self.limit {
            let Ok(one) = self.evicting.try_lock() else { return };
            let dropped = self.evict_once(plan);
            drop(one);
            if !dropped {
                return;
            }
        }
    }

    /// One pass of [`DiskCache::evict`]; true if it dropped a range.
    fn evict_once(&self, plan: Option<&ReadPlan>) -> bool {
        let objects: Vec<Arc<DiskObject>> = lock(&self.objects).values().cloned().collect();
        let mut candidates: Vec<(u64, usize, u64, u64)> = Vec::new();
        let now = plan.map(ReadPlan::now);
        for (k, o) in objects.iter().enumerate() {
            for (&start, x) in lock(&o.extents).iter_mut().filter(|(_, x)| !x.pinned) {
                let key = match (plan, now) {
                    (Some(p), Some(now)) => x.next.get(p, now, &x.samples, |s| s),
                    _ => u64::MAX - x.seq,
                };
                candidates.push((key, k, start, x.seq));
            }
        }
        candidates.sort_unstable_by_key(|c| std::cmp::Reverse(c.0));
        let target = self.limit - self.limit / 10;
        let mut dropped = false;
        for (_, k, start, seq) in candidates {
            if self.held() <= target {
                break;
            }
            dropped |= self.drop_extent(&objects[k], start, seq);
        }
        dropped
    }
}

/// A log entry (module docs): `op`, then `start`, `end` and `hash` little-endian.
fn entry(op: u8, start: u64, end: u64, hash: u64) -> [u8; ENTRY] {
    let mut e = [0u8; ENTRY];
    e[0] = op;
    e[1..9].copy_from_slice(&start.to_le_bytes());
    e[9..17].copy_from_slice(&end.to_le_bytes());
    e[17..25].copy_from_slice(&hash.to_le_bytes());
    e
}

/// Takes the shared `flock` a process holds on `dir` while it uses it (see the module docs),
/// after checking `cache.json`: the first process writes it, holding the lock exclusively
/// for that moment; a process that finds the lock shared finds `cache.json` written.
fn share(dir: &Path) -> Result<File, IoError> {
    let path = dir.join(LOCK_FILE);
    let file = File::options().create(true).truncate(false).write(true).open(&path).map_err(io(&path, "open"))?;
    let busy = || {
        IoError::new(
            IoErrorKind::Other,
            format!("open cache directory {}", dir.display()),
            "another process holds it for itself (a zrecord that does not share cache directories); \
             wait for it, or use another directory",
        )
    };
    // An exclusive holder is a process writing cache.json (a moment) or an older zrecord
    // that keeps the directory to itself (as long as it runs): wait a little, not for ever.
    for _ in 0..500 {
        match file.try_lock() {
            Ok(()) => {
                check_version(dir, true)?;
                // Converting is not atomic (flock(2)): another process may take the lock
                // exclusively between; it then finds cache.json written.
                file.lock_shared().map_err(io(&path, "lock"))?;
                return Ok(file);
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(io(&path, "lock")(e)),
            Err(std::fs::TryLockError::WouldBlock) => {}
        }
        match file.try_lock_shared() {
            // Shared by others: they checked cache.json first.
            Ok(()) if check_version(dir, false)? => return Ok(file),
            // Nobody held it after all, and cache.json is not written yet: take it exclusively.
            Ok(()) => file.unlock().map_err(io(&path, "unlock"))?,
            Err(std::fs::TryLockError::Error(e)) => return Err(io(&path, "lock")(e)),
            Err(std::fs::TryLockError::WouldBlock) => std::thread::sleep(std::time::Duration::from_millis(10)),
        }
    }
    Err(busy())
}

/// Checks `cache.json`: `Ok(true)` if it names this layout. Without one, in an empty
/// directory, writes it when `create` (else `Ok(false)`); refuses one of another version,
/// or a directory holding other files and no `cache.json` (not a cache directory: nothing
/// there is touched).
fn check_version(dir: &Path, create: bool) -> Result<bool, IoError> {
    let path = dir.join(VERSION_FILE);
    let refuse = |why: String| IoError::new(IoErrorKind::Other, format!("open cache directory {}", dir.display()), why);
    // A tiny JSON file: anything larger (or not a regular file) is not one of ours.
    match zrecord_core::io::std_dir::read_capped(&path, VERSION_FILE_CAP).map_err(io(&path, "read"))? {
        Some(bytes) => {
            let v: serde_json::Value = serde_json::from_slice(&bytes)
                .map_err(|e| refuse(format!("{VERSION_FILE} is damaged ({e}); remove the directory")))?;
            if v.get("format").and_then(|f| f.as_str()) != Some("zrecord-cache") {
                return Err(refuse(format!("{VERSION_FILE} does not describe a zrecord cache")));
            }
            match v.get("version").and_then(serde_json::Value::as_u64) {
                Some(n) if n == u64::from(VERSION) => Ok(true),
                n => Err(refuse(format!(
                    "written by another zrecord (cache version {n:?}, this one uses {VERSION}); remove it or use another"
                ))),
            }
        }
        None => {
            let others = std::fs::read_dir(dir).map_err(io(dir, "list"))?.flatten().any(|e| e.file_name() != LOCK_FILE);
            if others {
                return Err(refuse("holds other files and no cache.json: not a zrecord cache directory".into()));
            }
            if !create {
                return Ok(false);
            }
            std::fs::write(&path, format!("{{\"format\": \"zrecord-cache\", \"version\": {VERSION}}}\n"))
                .map_err(io(&path, "write"))?;
            Ok(true)
        }
    }
}

/// Gives the blocks of `len` bytes at `offset` back to the file system; the file keeps its
/// size. Best effort: where the file system cannot, the bytes stay (unlisted).
fn punch_hole(file: &File, offset: u64, len: u64) {
    use std::os::fd::AsRawFd;
    // SAFETY: fallocate on a descriptor `file` owns, with plain integer arguments; it
    // reads and writes no memory of this process.
    unsafe {
        libc::fallocate(
            file.as_raw_fd(),
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            offset as libc::off_t,
            len as libc::off_t,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(dir: &Path) -> String {
        match DiskCache::open(dir, 1 << 20) {
            Ok(_) => panic!("{} opened", dir.display()),
            Err(e) => e.to_string(),
        }
    }

    /// The bytes of a test object: each byte a function of its offset.
    fn bytes_at(start: u64, end: u64) -> Vec<u8> {
        (start..end).map(|i| (i.wrapping_mul(2_654_435_761) >> 7) as u8).collect()
    }

    #[test]
    fn a_log_entry_torn_by_a_crash_does_not_put_later_entries_out_of_step() {
        let dir = tempfile::tempdir().unwrap();
        let cache = DiskCache::open(dir.path(), 1 << 20).unwrap();
        cache.put("k", 0, &bytes_at(0, 100), Vec::new(), false, None);
        drop(cache);
        // A crash in the middle of appending an entry leaves part of one.
        let log = dir.path().join("k.log");
        std::fs::OpenOptions::new()
            .append(true)
            .open(&log)
            .unwrap()
            .write_all(&[1, 7, 7, 7, 7, 7, 7, 7, 7, 7])
            .unwrap();
        let cache = DiskCache::open(dir.path(), 1 << 20).unwrap();
        cache.put("k", 4096, &bytes_at(4096, 4196), Vec::new(), false, None);
        drop(cache);
        // Both ranges are found by the next run (before, the second entry was read 10 bytes
        // out of step: a range from garbage, and the real one lost).
        let cache = DiskCache::open(dir.path(), 1 << 20).unwrap();
        assert_eq!(cache.get("k", 10, 90).as_deref(), Some(&bytes_at(10, 90)[..]));
        assert_eq!(cache.get("k", 4096, 4196).as_deref(), Some(&bytes_at(4096, 4196)[..]));
        assert_eq!(cache.held(), 200);
        assert_eq!(std::fs::metadata(&log).unwrap().len() % ENTRY as u64, 0);
    }

    #[test]
    fn two_users_of_one_directory_see_each_others_ranges_and_share_one_budget() {
        // Two opens in one process hold two open files, so their flocks exclude each other
        // as two processes' would (the Python tests run real processes).
        let dir = tempfile::tempdir().unwrap();
        let a = DiskCache::open(dir.path(), 10_000).unwrap();
        let b = DiskCache::open(dir.path(), 10_000).unwrap();
        a.put("k", 0, &bytes_at(0, 4000), Vec::new(), false, None);
        // b opened before a fetched it, and finds it on disk.
        assert_eq!(b.get("k", 100, 200).as_deref(), Some(&bytes_at(100, 200)[..]));
        b.put("k", 8000, &bytes_at(8000, 12_000), Vec::new(), false, None);
        assert_eq!(a.get("k", 8000, 12_000).as_deref(), Some(&bytes_at(8000, 12_000)[..]));
        // Over the budget they share (a third range): the oldest, a's, goes.
        b.put("k", 20_000, &bytes_at(20_000, 24_000), Vec::new(), false, None);
        assert!(b.held() <= 9000, "{}", b.held());
        assert_eq!(a.get("k", 0, 4000), None, "a dropped range must be a miss for every user");
        assert!(a.held() <= 9000, "{}", a.held());
        drop((a, b));
        let c = DiskCache::open(dir.path(), 10_000).unwrap();
        assert_eq!(c.held(), 8000);
        assert_eq!(c.get("k", 20_000, 24_000).as_deref(), Some(&bytes_at(20_000, 24_000)[..]));
    }

    #[test]
    fn ranges_kept_while_another_thread_evicts_are_evicted_too() {
        // Thread A evicts; while it ranks the ranges (its plan is asked about each one's
        // samples), thread B keeps two ranges, finds A evicting and leaves them to A. A
        // drops every range it ranked and must then look again: B's ranges alone are over
        // the budget. (Before, A stopped after its pass: 12,000 bytes held on 10,000.)
        use std::sync::mpsc;
        let dir = tempfile::tempdir().unwrap();
        let cache = DiskCache::open(dir.path(), 10_000).unwrap();
        cache.put("k", 0, &bytes_at(0, 4000), vec![1], false, None);
        cache.put("k", 10_000, &bytes_at(10_000, 14_000), vec![2], false, None);
        let (asked, go_on) = (mpsc::sync_channel::<()>(0), mpsc::sync_channel::<()>(0));
        let (asked_tx, asked_rx) = asked;
        let (go_tx, go_rx) = go_on;
        let gate = std::sync::Mutex::new(Some((asked_tx, go_rx)));
        struct Gated(std::sync::Mutex<Option<(mpsc::SyncSender<()>, mpsc::Receiver<()>)>>);
        impl super::super::plan::Plan for Gated {
            fn now(&self) -> u64 {
                0
            }
            fn next_use(&self, _: u64) -> Option<u64> {
                if let Some((asked, go)) = self.0.lock().unwrap().take() {
                    asked.send(()).unwrap();
                    go.recv().unwrap();
                }
                Some(0)
            }
        }
        let plan = ReadPlan::new(Gated(gate));
        std::thread::scope(|s| {
            let a = s.spawn(|| cache.put("k", 20_000, &bytes_at(20_000, 24_000), vec![3], false, Some(&plan)));
            asked_rx.recv().unwrap();
            // A is ranking (holding object k's ranges): B's puts, into another object, find
            // it evicting and leave their ranges to it.
            cache.put("m", 30_000, &bytes_at(30_000, 36_000), Vec::new(), false, None);
            cache.put("m", 40_000, &bytes_at(40_000, 46_000), Vec::new(), false, None);
            go_tx.send(()).unwrap();
            a.join().unwrap();
        });
        assert!(cache.held() <= 10_000, "{} bytes held over a 10,000-byte budget", cache.held());
    }

    #[test]
    fn users_that_add_and_drop_ranges_at_once_never_read_wrong_bytes() {
        // Four users of one directory, a budget of a quarter of what they fetch, every read
        // checked; afterwards the log still accounts for every byte on disk.
        let dir = tempfile::tempdir().unwrap();
        let budget = 64 * 1024;
        std::thread::scope(|s| {
            for t in 0..4u64 {
                let dir = dir.path();
                s.spawn(move || {
                    let cache = DiskCache::open(dir, budget).unwrap();
                    let mut x = t + 1;
                    for _ in 0..400 {
                        x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
                        let block = (x >> 33) % 64;
                        let (start, end) = (block * 4096, block * 4096 + 1000 + (block % 3) * 1000);
                        match cache.get("k", start, end) {
                            Some(got) => assert_eq!(&got[..], &bytes_at(start, end)[..], "user {t}, range at {start}"),
                            None => cache.put("k", start, &bytes_at(start, end), Vec::new(), false, None),
                        }
                    }
                });
            }
        });
        let cache = DiskCache::open(dir.path(), budget).unwrap();
        assert!(cache.held() <= budget, "{} held", cache.held());
        for block in 0..64 {
            let (start, end) = (block * 4096, block * 4096 + 1000);
            if let Some(got) = cache.get("k", start, end) {
                assert_eq!(&got[..], &bytes_at(start, end)[..]);
            }
        }
    }

    #[test]
    fn a_version_file_that_is_not_ours_is_refused_without_reading_it_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(VERSION_FILE);
        // A FIFO would block a plain read for ever: refused at once, named.
        let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: mkfifo with a NUL-terminated path that lives across the call.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert!(refused(dir.path()).contains(VERSION_FILE), "{}", refused(dir.path()));
        std::fs::remove_file(&path).unwrap();
        // Larger than any version file: refused without reading it all.
        std::fs::File::create(&path).unwrap().set_len(VERSION_FILE_CAP + 1).unwrap();
        assert!(refused(dir.path()).contains("limit"), "{}", refused(dir.path()));
        std::fs::write(&path, b"{not json").unwrap();
        assert!(refused(dir.path()).contains("damaged"));
        std::fs::write(&path, format!("{{\"format\": \"zrecord-cache\", \"version\": {VERSION}}}\n")).unwrap();
        DiskCache::open(dir.path(), 1 << 20).unwrap();
    }
}
