//! Power-loss simulation (SQLite's crash VFS, redb's crash-consistency test): a backend that
//! logs every write, resize, create, remove and sync, and at every sync produces the images
//! a power cut at that instant could leave behind: everything synced, plus an arbitrary
//! subset of the writes since (each 512-byte sector of an unsynced write landing or not on
//! its own, so tails tear), unsynced resizes applied or not, files created since the last
//! directory sync present or not, removals since it undone or not.
//!
//! For every cut, every image must open, every visible record must decode, and the
//! contents must be one of the states the workload passed through, no older than the last
//! completed `sync()`.

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use common::{apply_model, run_step, Step};
use zrecord_core::engine::{Options, Store};
use zrecord_core::error::IoError;
use zrecord_core::format::sums::{slot_offset, SUMS_FILE, SUMS_LEN};
use zrecord_core::format::{chunk_file_name, entry_offset, FileLayout, CHUNK_FILE_LEN, META_FILE, META_LEN};
use zrecord_core::io::mem::{MemBackend, MemFile};
use zrecord_core::io::{Backend, StorageFile};
use zrecord_core::Codec;

const SEED: u64 = 11;
const CAPACITY: u64 = 4096;
const SECTOR: u64 = 512;
const IMAGES_PER_CUT: usize = 6;

#[derive(Clone, Debug)]
enum Op {
    Write(String, u64, Vec<u8>),
    SetLen(String, u64),
    Sync(String),
    Create(String),
    Remove(String),
    SyncDir,
    SideFile(String, Option<Vec<u8>>),
}

struct Sim {
    live: MemBackend,
    log: Vec<Op>,
    rng: u64,
    /// Images taken at each cut, with the number of syncs before it.
    images: Vec<(usize, MemBackend)>,
    cuts: usize,
    /// Set while the workload runs; images are tagged with it.
    step: usize,
}

impl Sim {
    fn rand(&mut self) -> u64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng
    }

    fn coin(&mut self) -> bool {
        self.rand() & 1 == 1
    }

    /// The images a power cut right now could leave.
    fn cut(&mut self) {
        self.cuts += 1;
        for _ in 0..IMAGES_PER_CUT {
            let img = self.image();
            self.images.push((self.step, img));
        }
    }

    fn image(&mut self) -> MemBackend {
        // Last sync of each file and of the directory.
        let mut last_sync: BTreeMap<String, usize> = BTreeMap::new();
        let mut last_dir_sync = 0;
        for (k, op) in self.log.iter().enumerate() {
            match op {
                Op::Sync(f) => {
                    last_sync.insert(f.clone(), k);
                }
                Op::SyncDir => last_dir_sync = k,
                _ => {}
            }
        }
        let log = self.log.clone();
        let img = MemBackend::new();
        let mut files: BTreeMap<String, MemFile> = BTreeMap::new();
        for (k, op) in log.iter().enumerate() {
            let durable = |f: &str| last_sync.get(f).is_some_and(|&s| k < s);
            match op {
                Op::Create(f) => {
                    // A creation is durable once the directory was synced after it.
                    if k < last_dir_sync || self.coin() {
                        files.insert(f.clone(), new_file(&img, f));
                    } else {
                        files.remove(f);
                    }
                }
                Op::Remove(f) => {
                    if k < last_dir_sync || self.coin() {
                        files.remove(f);
                        remove_file(&img, f);
                    }
                }
                Op::Write(f, off, bytes) => {
                    let Some(file) = files.get(f) else { continue };
                    if durable(f) {
                        file.write_at(*off, bytes).unwrap();
                        continue;
                    }
                    // Sector by sector, each landing or not.
                    let end = off + bytes.len() as u64;
                    let mut at = *off;
                    while at < end {
                        let next = ((at / SECTOR + 1) * SECTOR).min(end);
                        if self.coin() {
                            file.write_at(at, &bytes[(at - off) as usize..(next - off) as usize]).unwrap();
                        }
                        at = next;
                    }
                }
                Op::SetLen(f, len) => {
                    if let Some(file) = files.get(f) {
                        if durable(f) || self.coin() {
                            file.set_len(*len).unwrap();
                        }
                    }
                }
                Op::SideFile(f, bytes) => match bytes {
                    Some(b) => img.write_side_file(f, b).unwrap(),
                    None => img.remove_side_file(f).unwrap(),
                },
                Op::Sync(_) | Op::SyncDir => {}
            }
        }
        img
    }
}

fn new_file(img: &MemBackend, name: &str) -> MemFile {
    if name == META_FILE {
        return img.open_meta(true).unwrap().unwrap();
    }
    if name == SUMS_FILE {
        return img.open_aux(name, true).unwrap().unwrap();
    }
    let id: u16 = name.trim_end_matches(".zr").parse().unwrap();
    img.open_chunk(id, true).unwrap().unwrap()
}

fn remove_file(img: &MemBackend, name: &str) {
    if let Ok(id) = name.trim_end_matches(".zr").parse::<u16>() {
        img.remove_chunk(id).unwrap();
    }
}

#[derive(Clone)]
struct SimBackend(Arc<Mutex<Sim>>);

struct SimFile {
    inner: MemFile,
    name: String,
    sim: SimBackend,
}

impl SimBackend {
    fn with<T>(&self, f: impl FnOnce(&mut Sim) -> T) -> T {
        f(&mut self.0.lock().unwrap())
    }

    fn open(&self, name: &str, create: bool, get: impl Fn(&MemBackend, bool) -> Option<MemFile>) -> Option<SimFile> {
        self.with(|s| {
            let existed = get(&s.live, false).is_some();
            let f = get(&s.live, create)?;
            if !existed {
                s.log.push(Op::Create(name.to_string()));
            }
            Some(SimFile { inner: f, name: name.to_string(), sim: self.clone() })
        })
    }
}

impl StorageFile for SimFile {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), IoError> {
        self.inner.read_at(offset, buf)
    }

    fn write_at(&self, offset: u64, buf: &[u8]) -> Result<(), IoError> {
        self.sim.with(|s| s.log.push(Op::Write(self.name.clone(), offset, buf.to_vec())));
        self.inner.write_at(offset, buf)
    }

    fn len(&self) -> Result<u64, IoError> {
        self.inner.len()
    }

    fn set_len(&self, len: u64) -> Result<(), IoError> {
        self.sim.with(|s| s.log.push(Op::SetLen(self.name.clone(), len)));
        self.inner.set_len(len)
    }

    fn sync(&self) -> Result<(), IoError> {
        self.sim.with(|s| {
            s.cut();
            s.log.push(Op::Sync(self.name.clone()));
        });
        Ok(())
    }
}

impl Backend for SimBackend {
    type File = SimFile;

    fn open_meta(&self, create: bool) -> Result<Option<SimFile>, IoError> {
        Ok(self.open(META_FILE, create, |b, c| b.open_meta(c).unwrap()))
    }

    fn open_chunk(&self, id: u16, create: bool) -> Result<Option<SimFile>, IoError> {
        Ok(self.open(&chunk_file_name(id), create, |b, c| b.open_chunk(id, c).unwrap()))
    }

    fn open_aux(&self, name: &str, create: bool) -> Result<Option<SimFile>, IoError> {
        Ok(self.open(name, create, |b, c| b.open_aux(name, c).unwrap()))
    }

    fn remove_chunk(&self, id: u16) -> Result<(), IoError> {
        self.with(|s| {
            s.log.push(Op::Remove(chunk_file_name(id)));
            s.live.remove_chunk(id)
        })
    }

    fn fresh_nonce(&self) -> u64 {
        zrecord_core::io::os_nonce()
    }

    fn sync_dir(&self) -> Result<(), IoError> {
        self.with(|s| {
            s.cut();
            s.log.push(Op::SyncDir);
        });
        Ok(())
    }

    fn read_side_file(&self, name: &str) -> Result<Option<Vec<u8>>, IoError> {
        self.with(|s| s.live.read_side_file(name))
    }

    fn write_side_file(&self, name: &str, bytes: &[u8]) -> Result<(), IoError> {
        // Durable and atomic on return, as the trait requires of hosts.
        self.with(|s| {
            s.cut();
            s.log.push(Op::SideFile(name.to_string(), Some(bytes.to_vec())));
            s.live.write_side_file(name, bytes)
        })
    }

    fn remove_side_file(&self, name: &str) -> Result<(), IoError> {
        self.with(|s| {
            s.cut();
            s.log.push(Op::SideFile(name.to_string(), None));
            s.live.remove_side_file(name)
        })
    }
}

fn opts() -> Options {
    Options { chunk_capacity: CAPACITY, ..Options::default() }
}

/// Runs `steps` on a simulated disk and checks every image of every cut.
fn check_workload(steps: &[Step], rng: u64) -> (usize, usize) {
    check_workload_in(steps, rng, FileLayout::Sparse)
}

/// [`check_workload`] on a store created with `layout`.
fn check_workload_in(steps: &[Step], rng: u64, layout: FileLayout) -> (usize, usize) {
    let sim = SimBackend(Arc::new(Mutex::new(Sim {
        live: MemBackend::new(),
        log: Vec::new(),
        rng,
        images: Vec::new(),
        cuts: 0,
        step: 0,
    })));
    // states[k]: contents after k steps; synced_after[k]: the newest state a completed
    // sync() had made durable by the time step k began.
    let mut states = vec![Vec::new()];
    let mut durable_floor = vec![0usize];
    let (mut s, mut w) = Store::open(sim.clone(), Options { layout, ..opts() }).unwrap();
    let mut floor = 0;
    for (k, step) in steps.iter().enumerate() {
        sim.with(|x| x.step = k);
        run_step(&mut s, &mut w, SEED, step).unwrap_or_else(|e| panic!("{step:?}: {e}"));
        states.push(apply_model(SEED, &states[k], step));
        if matches!(step, Step::Sync) {
            floor = k + 1;
        }
        durable_floor.push(floor);
    }
    drop((s, w));
    let (images, cuts) = sim.with(|x| (std::mem::take(&mut x.images), x.cuts));
    let sealed_images = std::cell::Cell::new(0usize);
    for (n, (step, img)) in images.iter().enumerate() {
        let ctx = format!("image {n} cut during step {step} ({:?}) of {steps:?}", steps[*step]);
        let (st, _w) = Store::open(img.clone(), opts()).unwrap_or_else(|e| panic!("{ctx}: open failed: {e}"));
        // Reads check every checksum the side file still trusts: a stale one would fail here.
        let found: Vec<Vec<u8>> = (0..u64::from(st.len()))
            .map(|i| st.read(i).unwrap_or_else(|e| panic!("{ctx}: record {i} of {}: {e}", st.len())))
            .collect();
        // The side file falls behind the table only where a compact was cut: appends sync
        // their checksums before their header, and deletes move them under the journal.
        assert!(st.has_checksums(), "{ctx}: the side file is gone");
        let unchecked = st.unchecked().unwrap();
        if !matches!(steps[*step], Step::Compact) {
            assert_eq!(unchecked, 0, "{ctx}: {unchecked} records lost their checksums");
        }
        // Whatever it no longer covers, a seal covers again.
        if unchecked > 0 {
            let (st, mut w) = Store::open(img.clone(), opts()).unwrap();
            let sealed = st.seal(&mut w, &mut |_, _| {}).unwrap();
            assert_eq!((sealed.sealed, sealed.bad), (unchecked, 0), "{ctx}");
            assert_eq!(st.unchecked().unwrap(), 0, "{ctx}");
            assert_eq!(contents_verified(&st), found, "{ctx}");
            sealed_images.set(sealed_images.get() + 1);
        }
        // A layout change cut anywhere leaves one layout or the other; running it again
        // finishes it, with the files at the new layout's sizes and every record in place.
        if let Step::Layout(target) = steps[*step] {
            let (mut st, mut w) = Store::open(img.clone(), opts()).unwrap_or_else(|e| panic!("{ctx}: {e}"));
            st.set_layout(&mut w, target).unwrap_or_else(|e| panic!("{ctx}: layout again: {e}"));
            assert_eq!(st.layout(), target, "{ctx}");
            assert_eq!(contents_verified(&st), found, "{ctx}");
            assert_sizes(img, &st, target, &ctx);
        }
        let lo = durable_floor[*step];
        let ok = (lo..=step + 1).any(|k| states[k] == found);
        assert!(
            ok,
            "{ctx}: {} records match none of the states {lo}..={} (lengths {:?})",
            found.len(),
            step + 1,
            (lo..=step + 1).map(|k| states[k].len()).collect::<Vec<_>>()
        );
    }
    if sealed_images.get() > 0 {
        eprintln!("{} images had unchecked records after a cut compact; sealed", sealed_images.get());
    }
    (cuts, images.len())
}

/// The files of the store in `img` have `layout`'s sizes, right after a layout change.
fn assert_sizes<B: Backend>(img: &MemBackend, st: &Store<B>, layout: FileLayout, ctx: &str) {
    let h = st.header();
    let len = |name: &str| img.file(name).map(|f| f.len().unwrap());
    match layout {
        FileLayout::Sparse => {
            assert_eq!(len(META_FILE), Some(META_LEN), "{ctx}");
            assert_eq!(len(SUMS_FILE), Some(SUMS_LEN), "{ctx}");
            for c in 0..=h.tail_chunk {
                assert_eq!(len(&chunk_file_name(c)), Some(CHUNK_FILE_LEN), "{ctx}: chunk {c}");
            }
        }
        FileLayout::Dense => {
            assert_eq!(len(META_FILE), Some(entry_offset(h.length)), "{ctx}");
            assert_eq!(len(SUMS_FILE), Some(slot_offset(h.length)), "{ctx}");
            assert_eq!(len(&chunk_file_name(h.tail_chunk)), Some(u64::from(h.tail_offset)), "{ctx}");
            let stored: u64 = (0..h.length).map(|i| u64::from(st.entry(i).unwrap().phys_length)).sum();
            let files: u64 = (0..=h.tail_chunk).map(|c| len(&chunk_file_name(c)).unwrap()).sum();
            // Chunks hold their live payloads; what a rollover left unused is not in a file.
            assert!(files >= stored, "{ctx}: {files} bytes of chunks for {stored} of records");
        }
    }
}

/// Every record, read with `verify = always`: each one must have a checksum that holds.
fn contents_verified<B: Backend>(s: &Store<B>) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for i in 0..u64::from(s.len()) {
        let (mut r, mut scratch) = (Vec::new(), Vec::new());
        assert!(s.read_verified(i, &mut r, &mut scratch).unwrap(), "record {i} unchecked");
        out.push(r);
    }
    out
}

#[test]
fn every_power_cut_leaves_a_prefix_of_the_appends() {
    let mut steps = Vec::new();
    let mut next = 0;
    for b in 0..12u64 {
        let count = 1 + b % 5;
        steps.push(Step::Append { first: next, count, codec: if b % 3 == 0 { Codec::Raw } else { Codec::Flate } });
        next += count;
        if b % 4 == 3 {
            steps.push(Step::Sync);
        }
    }
    let (cuts, images) = check_workload(&steps, 0x1234_5678_9abc_def1);
    eprintln!("appends: {cuts} cut points, {images} images checked");
    assert!(cuts > 20);
}

#[test]
fn every_power_cut_during_delete_leaves_before_or_after() {
    let steps = vec![
        Step::Append { first: 0, count: 20, codec: Codec::Flate },
        Step::Sync,
        Step::Delete(vec![0, 5, 19, 7, 5]),
        Step::Delete(vec![3]),
        Step::Append { first: 20, count: 3, codec: Codec::Raw },
        Step::Delete(vec![0, 1, 2, 3]),
        Step::Sync,
    ];
    let (cuts, images) = check_workload(&steps, 0xdead_beef_cafe_f00d);
    eprintln!("deletes: {cuts} cut points, {images} images checked");
}

#[test]
fn every_power_cut_in_the_scripted_workload_is_consistent() {
    for rng in [1u64, 2, 3] {
        let (cuts, images) = check_workload(&common::scripted_workload(), rng.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        eprintln!("scripted workload: {cuts} cut points, {images} images checked");
    }
}

/// A random workload of appends, deletes, compacts and syncs, from `seed`.
fn random_workload(seed: u64) -> Vec<Step> {
    let mut x = seed | 1;
    let mut next = move |n: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n
    };
    let (mut steps, mut len, mut first) = (Vec::new(), 0u64, 0u64);
    for _ in 0..10 {
        match next(8) {
            0..=3 => {
                let count = 1 + next(6);
                steps.push(Step::Append { first, count, codec: if next(2) == 0 { Codec::Raw } else { Codec::Flate } });
                first += count;
                len += count;
            }
            4 | 5 if len > 0 => {
                let idxs: Vec<u64> = (0..1 + next(4)).map(|_| next(len)).collect();
                let mut d = idxs.clone();
                d.sort_unstable();
                d.dedup();
                len -= d.len() as u64;
                steps.push(Step::Delete(idxs));
            }
            6 => steps.push(Step::Compact),
            _ => steps.push(Step::Sync),
        }
    }
    steps
}

#[test]
fn every_power_cut_in_random_workloads_is_consistent() {
    let runs: u64 = std::env::var("ZR_POWER_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(24);
    let (mut cuts, mut images) = (0, 0);
    for seed in 0..runs {
        let (c, i) = check_workload(&random_workload(seed.wrapping_mul(0x2545_F491_4F6C_DD1D) + 1), seed + 99);
        cuts += c;
        images += i;
    }
    eprintln!("random workloads: {runs} workloads, {cuts} cut points, {images} images checked");
}

#[test]
fn every_power_cut_in_a_dense_store_and_across_layout_changes_is_consistent() {
    for rng in [0x0bad_5eed_u64, 0x5151_7a7a_0c0c_2d2d, 0x7e57_0000_d00d_0001] {
        let (cuts, images) = check_workload_in(&common::layout_workload(), rng, FileLayout::Dense);
        eprintln!("dense and layout changes: {cuts} cut points, {images} images checked");
        assert!(cuts > 30);
    }
}
