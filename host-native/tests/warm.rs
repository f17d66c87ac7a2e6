//! Warming against the real page cache: a store evicted from memory is resident again after
//! `Zrecord::warm`, a loader warms (or not) as `Warm` says and stops when closed, and a cold
//! gather reads its metadata together instead of one page fault at a time.
//!
//! Eviction uses `POSIX_FADV_DONTNEED`, which needs no privileges but only works on a
//! file system with a page cache of its own (not tmpfs). The stores live under Cargo's
//! target directory, which is on disk; where eviction still does nothing, each test says
//! loudly that it did not run (stderr and `ZRECORD_SKIP_LOG`).

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use zrecord::{Codec, Loader, LoaderOptions, Mode, Source, Stream, Warm, Zrecord};

/// The tests of this file one at a time: one counts the process's page faults.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

const RECORD: usize = 4096;
const RECORDS: usize = 2048; // 8 MiB of records before compression

fn dir(name: &str) -> tempfile::TempDir {
    let root = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    tempfile::Builder::new().prefix(name).tempdir_in(root).unwrap()
}

/// Token-like records that DEFLATE halves: runs of a few distinct u16 values.
fn records() -> Vec<u8> {
    let mut x = 0x2545_f491_4f6c_dd1du64;
    (0..RECORDS * RECORD / 2)
        .flat_map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ((x % 300) as u16).to_le_bytes()
        })
        .collect()
}

fn write_store(path: &Path) {
    let z = Zrecord::open(path).unwrap();
    z.append(&records(), RECORDS, RECORD, Some(Codec::Flate)).unwrap();
    z.sync().unwrap();
}

/// The store's files: meta.zr, checksums.zrc and the chunk files.
fn files(path: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(path)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "zr" || e == "zrc"))
        .collect();
    v.sort();
    v
}

fn evict(path: &Path) {
    for f in files(path) {
        let file = File::open(&f).unwrap();
        // SAFETY: plain syscall on a descriptor we own; it changes no memory of ours.
        let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        assert_eq!(rc, 0, "posix_fadvise on {}", f.display());
    }
}

/// Resident pages among the first `len` bytes of `file`, by mincore over a map of our own.
fn resident_pages(file: &Path, len: u64) -> (usize, usize) {
    let pages = page_residency(file, len);
    (pages.iter().filter(|&&r| r).count(), pages.len())
}

/// Whether each page of the first `len` bytes of `file` is in memory, by mincore over a
/// map of our own.
fn page_residency(file: &Path, len: u64) -> Vec<bool> {
    let f = File::open(file).unwrap();
    // SAFETY: a read-only map of a file no one writes while this test runs; only mincore
    // looks at it (no byte of it is read, so nothing is faulted in by the check itself).
    let map = unsafe { memmap2::Mmap::map(&f) }.unwrap();
    let page = 4096usize;
    let len = (len as usize).min(map.len());
    let mut vec = vec![0u8; len.div_ceil(page)];
    // SAFETY: the map is page-aligned and `len` bytes long at least; `vec` has one byte per
    // page of that range, which is what mincore writes.
    let rc = unsafe { libc::mincore(map.as_ptr() as *mut libc::c_void, len, vec.as_mut_ptr()) };
    assert_eq!(rc, 0);
    vec.iter().map(|&b| b & 1 == 1).collect()
}

/// Resident and total pages of the chunk file's used part.
fn chunk_residency(path: &Path) -> (usize, usize) {
    let used = Zrecord::open_read_only(path).unwrap().stats().unwrap().chunk_bytes;
    resident_pages(&path.join("0.zr"), used)
}

/// Evicts the store; false (after saying so loudly) when this file system keeps the pages.
fn evicted(path: &Path, test: &str) -> bool {
    evict(path);
    let (resident, pages) = chunk_residency(path);
    if resident * 4 > pages {
        let line = format!(
            "host-native/tests/warm.rs {test}: POSIX_FADV_DONTNEED left {resident} of {pages} pages resident \
             (a file system without its own page cache, such as tmpfs)"
        );
        eprintln!("SKIPPED {line}");
        if let Ok(log) = std::env::var("ZRECORD_SKIP_LOG") {
            use std::io::Write;
            let mut f = std::fs::OpenOptions::new().create(true).append(true).open(log).unwrap();
            writeln!(f, "{line}").unwrap();
        }
        return false;
    }
    true
}

#[test]
fn warm_brings_every_used_page_of_an_evicted_store_into_memory() {
    let _serial = serial();
    let d = dir("warm-store");
    let path = d.path().join("s");
    write_store(&path);
    if !evicted(&path, "warm_brings_every_used_page_of_an_evicted_store_into_memory") {
        return;
    }
    let z = Zrecord::open_read_only(&path).unwrap();
    let footprint = z.footprint();
    let stats = z.stats().unwrap();
    assert!(footprint >= stats.chunk_bytes && footprint < stats.chunk_bytes + (2 << 20), "{footprint}");
    evict(&path); // opening read the header and stats read the table
    let mut last = (0, 0);
    let covered = z
        .warm(&mut |done, total| {
            last = (done, total);
            true
        })
        .unwrap();
    assert_eq!(covered, footprint);
    assert_eq!(last, (footprint, footprint));
    let (resident, pages) = chunk_residency(&path);
    assert!(mostly(resident, pages), "{resident} of {pages} pages of the used chunk bytes in memory");
    let table = 16 + 16 * RECORDS as u64;
    let (resident, pages) = resident_pages(&path.join("meta.zr"), table);
    assert!(mostly(resident, pages), "{resident} of {pages} pages of the record table in memory");
}

/// Nearly every page: the kernel (or a reclaimer of the machine, such as DAMON) may take
/// back a few freshly read pages at any time, so "all of them" would fail now and then
/// without anything wrong. Evicted, fewer than a quarter were resident.
fn mostly(resident: usize, pages: usize) -> bool {
    resident * 100 >= pages * 95
}

fn loader_over(path: &Path, warm: Warm) -> Loader {
    let z = Arc::new(Zrecord::open_read_only(path).unwrap());
    let source = Source::new(vec![(z, RECORD)]).unwrap();
    let stream = Stream::new(source.id(), Mode::Shuffle, 7, 16).unwrap();
    let options = LoaderOptions { num_workers: 2, warm, ..LoaderOptions::default() };
    Loader::new(stream, vec![source], options).unwrap()
}

#[test]
fn a_loader_warms_its_stores_when_told_to_and_not_when_told_not_to() {
    let _serial = serial();
    let d = dir("warm-loader");
    let path = d.path().join("s");
    write_store(&path);
    let test = "a_loader_warms_its_stores_when_told_to_and_not_when_told_not_to";
    if !evicted(&path, test) {
        return;
    }

    // Never: no warming, and a few batches leave most of the store on disk.
    let loader = loader_over(&path, Warm::Never);
    loader.next().unwrap().unwrap();
    assert_eq!(loader.warm_progress(), None);
    loader.close();
    let (resident, pages) = chunk_residency(&path);
    assert!(resident * 2 < pages, "without warming, {resident} of {pages} pages were read");

    // Always: the warming thread reads the whole store while the batches are read.
    evict(&path);
    let loader = loader_over(&path, Warm::Always);
    assert_eq!(loader.warm_progress(), None, "nothing starts before the first next()");
    loader.next().unwrap().unwrap();
    let total = loader.warm_progress().expect("warming started with the threads").1;
    assert_eq!(total, Zrecord::open_read_only(&path).unwrap().footprint());
    let deadline = Instant::now() + Duration::from_secs(120);
    while loader.warm_progress() != Some((total, total)) {
        assert!(Instant::now() < deadline, "warming did not finish: {:?}", loader.warm_progress());
        std::thread::sleep(Duration::from_millis(10));
    }
    let (resident, pages) = chunk_residency(&path);
    assert!(mostly(resident, pages), "{resident} of {pages} pages in memory after warming");
    loader.close();
    assert_eq!(loader.threads_alive(), 0);

    // Auto: an 8 MiB store fits in a quarter of any test machine's free memory.
    evict(&path);
    let loader = loader_over(&path, Warm::Auto);
    loader.next().unwrap().unwrap();
    assert!(loader.warm_progress().is_some(), "a small store is warmed by default");
    loader.close();
}

#[test]
fn closing_a_loader_stops_its_warming_between_pieces() {
    let _serial = serial();
    // A store of 40 pieces; the loader is closed right after it starts. Close joins the
    // warming thread too (it checks the stop flag before every piece), and lets go of the
    // store it was reading.
    let d = dir("warm-close");
    let path = d.path().join("s");
    {
        let z = Zrecord::open(&path).unwrap();
        let big = vec![1u8; 40 * (2 << 20)];
        z.append(&big, 80, 1 << 20, Some(Codec::Raw)).unwrap();
        z.sync().unwrap();
    }
    if !evicted(&path, "closing_a_loader_stops_its_warming_between_pieces") {
        return;
    }
    let z = Arc::new(Zrecord::open_read_only(&path).unwrap());
    let source = Source::new(vec![(z, 1 << 20)]).unwrap();
    let stream = Stream::new(source.id(), Mode::Shuffle, 7, 1).unwrap();
    let options = LoaderOptions { num_workers: 1, prefetch: 1, warm: Warm::Always, ..LoaderOptions::default() };
    let loader = Loader::new(stream, vec![source], options).unwrap();
    loader.next().unwrap().unwrap();
    loader.close();
    let (done, total) = loader.warm_progress().unwrap();
    assert!(total >= 80 << 20);
    assert!(done <= total);
    // After close no thread of the loader is left, the warming one included: the store
    // can be had exclusively.
    drop(loader);
    let mut z = Zrecord::open(&path).unwrap();
    z.delete(&[0]).unwrap();
}

/// Page faults this process took that had to read from disk.
fn major_faults() -> i64 {
    // SAFETY: getrusage fills the struct we pass, nothing else.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) }, 0);
    usage.ru_majflt
}

/// A raw store of `n` records of `len` bytes (record `i` is at byte `i * len` of chunk
/// file 0), and its records' bytes.
fn write_raw_store(path: &Path, n: usize, len: usize) -> Vec<u8> {
    let bytes: Vec<u8> = (0..n * len).map(|k| (k / len) as u8 ^ (k % 251) as u8).collect();
    let z = Zrecord::open(path).unwrap();
    z.append(&bytes, n, len, Some(Codec::Raw)).unwrap();
    z.sync().unwrap();
    let mut chunk = vec![0u8; bytes.len()];
    std::os::unix::fs::FileExt::read_exact_at(&File::open(path.join("0.zr")).unwrap(), &mut chunk, 0).unwrap();
    assert!(chunk == bytes, "records back to back from byte 0");
    bytes
}

#[test]
fn a_cold_loader_asks_for_batches_ahead_before_any_worker_reads_them() {
    // One worker, a prefetch of one: while the consumer holds batch 0, the worker has
    // gathered batch 1 and holds batch 2, job 3 waits for it and the sampler holds job 4.
    // Nothing reads batch 5 until the consumer takes three more; the sampler's read-ahead
    // has asked the kernel for it (two batches past the one it planned).
    let _serial = serial();
    let d = dir("read-ahead");
    let path = d.path().join("s");
    let (n, len) = (20_000usize, 512usize);
    write_raw_store(&path, n, len);
    if !evicted(&path, "a_cold_loader_asks_for_batches_ahead_before_any_worker_reads_them") {
        return;
    }
    let z = Arc::new(Zrecord::open_read_only(&path).unwrap());
    let source = Source::new(vec![(z, len)]).unwrap();
    let stream = Stream::new(source.id(), Mode::Shuffle, 7, 64).unwrap();
    let mut ahead = vec![0u64; 64];
    let mut shard = stream.shard(0, 1).unwrap();
    shard.seek(5).unwrap();
    shard.fill(&mut ahead);
    let options = LoaderOptions { num_workers: 1, prefetch: 1, warm: Warm::Never, ..LoaderOptions::default() };
    let loader = Loader::new(stream, vec![source], options).unwrap();
    loader.next().unwrap().unwrap();
    let resident = || {
        let pages = page_residency(&path.join("0.zr"), (n * len) as u64);
        ahead.iter().filter(|&&i| pages[i as usize * len / 4096]).count()
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while resident() < 60 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    // A few may share a page with a record of batches 0-2 (8 records a page); most not.
    assert!(resident() >= 60, "{} of batch 5's 64 records in memory before it is read", resident());
    loader.close();
}

#[test]
fn a_cold_gather_reads_its_table_entries_and_checksum_slots_together() {
    // 20,000 records: a 320 KB table and 640 KB of checksum slots. 256 random records
    // touch about 70 table pages and 120 slot pages; faulted in one at a time, each is a
    // disk read of its own (about 190 major faults per gather before they were asked for
    // together). Now every one of them is on its way before the first is touched.
    let _serial = serial();
    let d = dir("cold-gather");
    let path = d.path().join("s");
    let (n, len) = (20_000usize, 512usize);
    let bytes = write_raw_store(&path, n, len);
    if !evicted(&path, "a_cold_gather_reads_its_table_entries_and_checksum_slots_together") {
        return;
    }
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut faults = Vec::new();
    for _ in 0..3 {
        let idxs: Vec<u64> = (0..256)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x % n as u64
            })
            .collect();
        let z = Zrecord::open_read_only(&path).unwrap();
        evict(&path); // opening read the header
        let mut dst = vec![0u8; idxs.len() * len];
        let before = major_faults();
        z.gather(&idxs, &mut dst, len).unwrap();
        faults.push(major_faults() - before);
        for (slot, &i) in idxs.iter().enumerate() {
            assert_eq!(&dst[slot * len..(slot + 1) * len], &bytes[i as usize * len..(i as usize + 1) * len]);
        }
    }
    // A few may still fault while their read is being set up; not one per page.
    faults.sort();
    assert!(faults[1] < 40, "major page faults of three cold gathers of 256 records: {faults:?}");
}
