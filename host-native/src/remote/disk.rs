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
//! Over budget, ranges go in the order the memory cache uses ([`super::file::Cache`]): the
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
//! One process uses a cache directory at a time: it holds an exclusive `flock` on
//! `.zrecord-cache.lock` inside; another process gets a clear error (give each rank its own
//! directory).

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use zrecord_core::error::{IoError, IoErrorKind};

use super::file::ReadPlan;
use super::objects::Object;
use super::{io, lock};
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
    seq: u64,
    /// Metadata: kept whatever the budget.
    pinned: bool,
}

/// One object's file and log.
struct DiskObject {
    data: File,
    log: Mutex<File>,
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
}

impl DiskCache {
    /// Opens (creating) the cache directory `dir` with a budget of `limit` bytes; drops
    /// ranges at once if the directory holds more.
    pub fn open(dir: &Path, limit: u64) -> Result<Arc<DiskCache>, IoError> {
        std::fs::create_dir_all(dir).map_err(io(dir, "create cache directory"))?;
        let lock_path = dir.join(LOCK_FILE);
        let Some(lock_file) = crate::lock::try_exclusive(&lock_path).map_err(io(&lock_path, "lock"))? else {
            return Err(IoError::new(
                IoErrorKind::Other,
                format!("open cache directory {}", dir.display()),
                "another process is using it; give each process (each rank) a cache directory of its own",
            ));
        };
        check_version(dir)?;
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
        let mut log = File::options()
            .create(true)
            .truncate(false)
            .read(true)
            .append(true)
            .open(&log_path)
            .map_err(io(&log_path, "open"))?;
        let mut text = Vec::new();
        std::io::Read::read_to_end(&mut log, &mut text).map_err(io(&log_path, "read"))?;
        let mut extents = BTreeMap::new();
        for e in text.chunks_exact(ENTRY) {
            let start = u64::from_le_bytes(e[1..9].try_into().expect("8 bytes"));
            let end = u64::from_le_bytes(e[9..17].try_into().expect("8 bytes"));
            let hash = u64::from_le_bytes(e[17..25].try_into().expect("8 bytes"));
            if (e[0] == 1 || e[0] == 2) && start < end {
                let seq = self.seq.fetch_add(1, Ordering::Relaxed);
                extents.insert(start, Extent { end, hash, samples: Vec::new(), seq, pinned: e[0] == 2 });
            } else {
                extents.remove(&start);
            }
        }
        let held: u64 = extents.iter().filter(|(_, e)| !e.pinned).map(|(s, e)| e.end - s).sum();
        self.held.fetch_add(held, Ordering::Relaxed);
        let o = Arc::new(DiskObject { data, log: Mutex::new(log), extents: Mutex::new(extents) });
        objects.insert(key.to_owned(), o.clone());
        Ok(o)
    }

    /// The bytes `start..end` of the object `key`, if ranges on disk hold them all (one, or
    /// several back to back) and each still matches its hash.
    pub fn get(&self, key: &str, start: u64, end: u64) -> Option<Bytes> {
        let o = self.object(key).ok()?;
        let pieces: Vec<(u64, u64, u64)> = {
            let extents = lock(&o.extents);
            let mut pieces = Vec::new();
            let mut at = start;
            while at < end {
                // The range holding `at`: usually the last to start at or before it, but
                // ranges merged differently in two runs overlap, and a short one may sit
                // inside a longer one that started earlier.
                let (&s, x) = extents.range(..=at).rev().take(64).find(|(_, x)| x.end > at)?;
                pieces.push((s, x.end, x.hash));
                at = x.end;
            }
            pieces
        };
        let mut out = Vec::new();
        let single = pieces.len() == 1;
        for (s, e, hash) in pieces {
            let mut buf = vec![0u8; (e - s) as usize];
            if o.data.read_exact_at(&mut buf, s).is_err() || checksum(&buf) != hash {
                // Torn or changed: drop it, and fetch again.
                self.drop_extent(&o, s);
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
        if lock(&o.extents).range(..=start).next_back().is_some_and(|(_, x)| x.end >= end) {
            return;
        }
        if o.data.write_all_at(bytes, start).is_err() {
            return;
        }
        let hash = checksum(bytes);
        let mut entry = [0u8; ENTRY];
        entry[0] = if pinned { 2 } else { 1 };
        entry[1..9].copy_from_slice(&start.to_le_bytes());
        entry[9..17].copy_from_slice(&end.to_le_bytes());
        entry[17..25].copy_from_slice(&hash.to_le_bytes());
        if lock(&o.log).write_all(&entry).is_err() {
            return;
        }
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let replaced = lock(&o.extents).insert(start, Extent { end, hash, samples, seq, pinned });
        if let Some(old) = replaced.filter(|old| !old.pinned) {
            self.held.fetch_sub(old.end - start, Ordering::Relaxed);
        }
        if !pinned {
            self.held.fetch_add(end - start, Ordering::Relaxed);
        }
        self.evict(plan);
    }

    fn drop_extent(&self, o: &DiskObject, start: u64) {
        let Some(x) = lock(&o.extents).remove(&start) else { return };
        if !x.pinned {
            self.held.fetch_sub(x.end - start, Ordering::Relaxed);
        }
        let mut entry = [0u8; ENTRY];
        entry[1..9].copy_from_slice(&start.to_le_bytes());
        entry[9..17].copy_from_slice(&x.end.to_le_bytes());
        let _ = lock(&o.log).write_all(&entry);
        punch_hole(&o.data, start, x.end - start);
    }

    /// Drops ranges until 10% under budget: furthest next use by `plan` first (ranges whose
    /// samples this run does not know before all), oldest first without a plan.
    fn evict(&self, plan: Option<&ReadPlan>) {
        if self.held() <= self.limit {
            return;
        }
        let Ok(_one) = self.evicting.try_lock() else { return };
        let objects: Vec<Arc<DiskObject>> = lock(&self.objects).values().cloned().collect();
        let mut candidates: Vec<(u64, usize, u64, u64)> = Vec::new();
        for (k, o) in objects.iter().enumerate() {
            for (&start, x) in lock(&o.extents).iter().filter(|(_, x)| !x.pinned) {
                let key = match plan {
                    Some(p) => x.samples.iter().filter_map(|&i| p(i)).min().unwrap_or(u64::MAX),
                    None => u64::MAX - x.seq,
                };
                candidates.push((key, k, start, x.seq));
            }
        }
        candidates.sort_unstable_by_key(|c| std::cmp::Reverse(c.0));
        let target = self.limit - self.limit / 10;
        for (_, k, start, seq) in candidates {
            if self.held() <= target {
                break;
            }
            if lock(&objects[k].extents).get(&start).is_some_and(|x| x.seq == seq) {
                self.drop_extent(&objects[k], start);
            }
        }
    }
}

/// Writes `cache.json` into a fresh directory; refuses one of another version, or one that
/// holds other files and no `cache.json` (not a cache directory: nothing there is touched).
fn check_version(dir: &Path) -> Result<(), IoError> {
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
                Some(n) if n == u64::from(VERSION) => Ok(()),
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
            std::fs::write(&path, format!("{{\"format\": \"zrecord-cache\", \"version\": {VERSION}}}\n"))
                .map_err(io(&path, "write"))
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
