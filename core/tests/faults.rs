//! I/O error injection (SQLite's I/O-error VFS, redb's failing backend): a backend that
//! fails the Nth file operation with EIO or ENOSPC, looped over every N of a scripted
//! workload. Each failing call must return an error (no panic), a handle whose sync failed
//! must refuse further writes, and a reopen must find the state before or after the failing
//! call, every record intact. Failed writes are torn: the whole sectors of the first half
//! of the buffer land first.

mod common;

use std::sync::{Arc, Mutex};

use common::{apply_model, contents, run_step, scripted_workload, Step};
use zrecord_core::engine::{Options, Store};
use zrecord_core::error::{Error, IoError, IoErrorKind};
use zrecord_core::io::mem::{MemBackend, MemFile};
use zrecord_core::io::{Backend, StorageFile};
use zrecord_core::Codec;

const SEED: u64 = 7;
const CAPACITY: u64 = 4096;

#[derive(Default)]
struct Counter {
    ops: u64,
    fail_at: Option<u64>,
    kind: Option<IoErrorKind>,
    /// What the failed operation was, for messages and for the sync rule.
    failed: Option<String>,
}

/// Fails operation number `fail_at` (0-based, counting every call on the directory and its
/// files) once, with `kind`.
#[derive(Clone)]
struct FailBackend {
    inner: MemBackend,
    counter: Arc<Mutex<Counter>>,
}

impl FailBackend {
    fn new(inner: MemBackend, fail_at: u64, kind: IoErrorKind) -> Self {
        let counter = Counter { fail_at: Some(fail_at), kind: Some(kind), ..Counter::default() };
        FailBackend { inner, counter: Arc::new(Mutex::new(counter)) }
    }

    fn tick(&self, what: &str) -> Result<(), IoError> {
        let mut c = self.counter.lock().unwrap();
        let n = c.ops;
        c.ops += 1;
        if c.fail_at == Some(n) {
            c.failed = Some(what.to_string());
            let kind = c.kind.unwrap();
            let msg = if kind == IoErrorKind::StorageFull { "No space left on device" } else { "Input/output error" };
            return Err(IoError::new(kind, what, msg));
        }
        Ok(())
    }

    fn failed(&self) -> Option<String> {
        self.counter.lock().unwrap().failed.clone()
    }

    fn ops(&self) -> u64 {
        self.counter.lock().unwrap().ops
    }
}

struct FailFile {
    inner: MemFile,
    name: String,
    backend: FailBackend,
}

impl StorageFile for FailFile {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), IoError> {
        self.backend.tick(&format!("read {}", self.name))?;
        self.inner.read_at(offset, buf)
    }

    fn write_at(&self, offset: u64, buf: &[u8]) -> Result<(), IoError> {
        if let Err(e) = self.backend.tick(&format!("write {}", self.name)) {
            // A torn write: the device gives up halfway, keeping whole 512-byte sectors
            // (the atomic unit every crash-safe store assumes; 16-byte entries and the
            // header never straddle one).
            let end = (offset + buf.len() as u64 / 2) / 512 * 512;
            if end > offset {
                self.inner.write_at(offset, &buf[..(end - offset) as usize])?;
            }
            return Err(e);
        }
        self.inner.write_at(offset, buf)
    }

    fn len(&self) -> Result<u64, IoError> {
        self.inner.len()
    }

    fn set_len(&self, len: u64) -> Result<(), IoError> {
        self.backend.tick(&format!("set_len {}", self.name))?;
        self.inner.set_len(len)
    }

    fn sync(&self) -> Result<(), IoError> {
        self.backend.tick(&format!("sync {}", self.name))?;
        self.inner.sync()
    }
}

impl Backend for FailBackend {
    type File = FailFile;

    fn open_meta(&self, create: bool) -> Result<Option<FailFile>, IoError> {
        self.tick("open meta.zr")?;
        Ok(self.inner.open_meta(create)?.map(|f| FailFile { inner: f, name: "meta.zr".into(), backend: self.clone() }))
    }

    fn open_chunk(&self, id: u16, create: bool) -> Result<Option<FailFile>, IoError> {
        self.tick(&format!("open {id}.zr"))?;
        let name = format!("{id}.zr");
        Ok(self.inner.open_chunk(id, create)?.map(|f| FailFile { inner: f, name, backend: self.clone() }))
    }

    fn open_aux(&self, name: &str, create: bool) -> Result<Option<FailFile>, IoError> {
        self.tick(&format!("open {name}"))?;
        Ok(self.inner.open_aux(name, create)?.map(|f| FailFile { inner: f, name: name.into(), backend: self.clone() }))
    }

    fn remove_chunk(&self, id: u16) -> Result<(), IoError> {
        self.tick(&format!("remove {id}.zr"))?;
        self.inner.remove_chunk(id)
    }

    fn fresh_nonce(&self) -> u64 {
        zrecord_core::io::os_nonce()
    }

    fn sync_dir(&self) -> Result<(), IoError> {
        self.tick("sync directory")?;
        self.inner.sync_dir()
    }

    fn read_side_file(&self, name: &str) -> Result<Option<Vec<u8>>, IoError> {
        self.tick(&format!("read {name}"))?;
        self.inner.read_side_file(name)
    }

    fn write_side_file(&self, name: &str, bytes: &[u8]) -> Result<(), IoError> {
        self.tick(&format!("write {name}"))?;
        self.inner.write_side_file(name, bytes)
    }

    fn remove_side_file(&self, name: &str) -> Result<(), IoError> {
        self.tick(&format!("remove {name}"))?;
        self.inner.remove_side_file(name)
    }
}

fn opts() -> Options {
    Options { chunk_capacity: CAPACITY, ..Options::default() }
}

/// Reopens the raw files with no faults and returns every record, each checked against
/// its checksum if the side file still covers it (a stale checksum fails the read).
fn reopen(inner: &MemBackend, ctx: &str) -> Vec<Vec<u8>> {
    reopen_allowing(inner, ctx, false)
}

/// [`reopen`]; only after a failed compact (`compacting`) may records have lost their
/// checksums: appends write theirs before their header, deletes move them under the journal.
fn reopen_allowing(inner: &MemBackend, ctx: &str, compacting: bool) -> Vec<Vec<u8>> {
    let (s, mut w) = Store::open(inner.clone(), opts()).unwrap_or_else(|e| panic!("{ctx}: reopen failed: {e}"));
    let found: Vec<Vec<u8>> = (0..u64::from(s.len()))
        .map(|i| s.read(i).unwrap_or_else(|e| panic!("{ctx}: after reopen, record {i}: {e}")))
        .collect();
    // What the side file no longer covers, a seal covers again, and nothing is bad.
    if !s.is_empty() {
        let sealed = s.seal(&mut w, &mut |_, _| {}).unwrap_or_else(|e| panic!("{ctx}: seal: {e}"));
        assert_eq!(sealed.bad, 0, "{ctx}");
        assert!(compacting || sealed.sealed == 0, "{ctx}: {} records lost their checksums", sealed.sealed);
        assert_eq!(s.unchecked().unwrap(), 0, "{ctx}");
        UNCHECKED_AFTER_FAULT.fetch_add(u64::from(sealed.sealed), std::sync::atomic::Ordering::Relaxed);
    }
    found
}

/// Records found unchecked after a fault, over the whole run (sealed by `reopen`).
static UNCHECKED_AFTER_FAULT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Runs the scripted workload with operation `n` failing; returns false once `n` is past
/// the workload's last operation (nothing failed).
fn run_with_fault(n: u64, kind: IoErrorKind, extra: &Step) -> bool {
    let inner = MemBackend::new();
    let fb = FailBackend::new(inner.clone(), n, kind);
    let steps = scripted_workload();
    let mut model: Vec<Vec<u8>> = Vec::new();
    let (mut s, mut w) = match Store::open(fb.clone(), opts()) {
        Ok(sw) => sw,
        Err(e) => {
            assert!(matches!(e, Error::Io(_)), "open with fault {n}: {e}");
            // A failed creation leaves either no store or an empty one.
            assert!(reopen(&inner, &format!("open failing at op {n}")).is_empty());
            return true;
        }
    };
    for step in &steps {
        let after = apply_model(common_seed(), &model, step);
        match run_step(&mut s, &mut w, SEED, step) {
            Ok(()) => model = after,
            Err(e) => {
                let what = fb.failed().unwrap_or_else(|| panic!("{step:?} failed without a fault: {e}"));
                assert!(matches!(e, Error::Io(_)), "{step:?} at fault {n} ({what}): not an I/O error: {e}");
                // Another write on the same handle: refused after a failed sync (and after
                // anything that left the handle unsure of the disk), else it must work.
                let probe = run_step(&mut s, &mut w, SEED, extra);
                let poisoned = match &probe {
                    Err(Error::Io(io)) if io.kind == IoErrorKind::Poisoned => true,
                    Ok(()) => false,
                    Err(e) => panic!("{step:?} at fault {n} ({what}): follow-up append: {e}"),
                };
                if what.starts_with("sync") {
                    assert!(poisoned, "{step:?}: the handle kept writing after a failed {what}");
                }
                drop((s, w));
                let found = reopen_allowing(
                    &inner,
                    &format!("{step:?} failing at op {n} ({what}, {kind:?}, poisoned {poisoned})"),
                    matches!(step, Step::Compact),
                );
                let (old, new) = if poisoned {
                    (model.clone(), after.clone())
                } else {
                    (apply_model(SEED, &model, extra), apply_model(SEED, &after, extra))
                };
                assert!(
                    found == old || found == new,
                    "{step:?} failed at op {n} ({what}, {kind:?}, poisoned {poisoned}): reopened store has {} records, \
                     expected {} (old) or {} (new) and identical bytes",
                    found.len(),
                    old.len(),
                    new.len()
                );
                return true;
            }
        }
    }
    assert!(fb.failed().is_none(), "fault {n} ({:?}) was swallowed", fb.failed());
    assert_eq!(reopen(&inner, "no fault"), model);
    let _ = fb.ops();
    false
}

fn common_seed() -> u64 {
    SEED
}

#[test]
fn every_failed_operation_is_an_error_and_the_store_reopens_old_or_new() {
    let extra = Step::Append { first: 1000, count: 2, codec: Codec::Flate };
    for kind in [IoErrorKind::Other, IoErrorKind::StorageFull] {
        let mut n = 0;
        while run_with_fault(n, kind, &extra) {
            n += 1;
        }
        // The workload is a few hundred operations; all of them were failed in turn.
        assert!(n > 100, "only {n} operations in the workload");
        eprintln!(
            "{kind:?}: injected {n} faults, one per operation of the workload; {} records found unchecked after \
             them so far (sealed), none with a stale checksum",
            UNCHECKED_AFTER_FAULT.load(std::sync::atomic::Ordering::Relaxed)
        );
    }
}

#[test]
fn a_failed_sync_poisons_the_writer_for_good() {
    // Find the first sync of the workload's first append and fail it.
    let inner = MemBackend::new();
    let probe = FailBackend::new(inner.clone(), u64::MAX, IoErrorKind::Other);
    let (mut s, mut w) = Store::open(probe.clone(), opts()).unwrap();
    let before = probe.ops();
    run_step(&mut s, &mut w, SEED, &Step::Sync).unwrap();
    let syncs = probe.ops() - before;
    assert!(syncs >= 2, "sync touched {syncs} files");
    drop((s, w));

    let inner = MemBackend::new();
    let fb = FailBackend::new(inner.clone(), 0, IoErrorKind::Other);
    fb.counter.lock().unwrap().fail_at = None;
    let (mut s, mut w) = Store::open(fb.clone(), opts()).unwrap();
    run_step(&mut s, &mut w, SEED, &Step::Append { first: 0, count: 3, codec: Codec::Raw }).unwrap();
    let at = fb.ops();
    fb.counter.lock().unwrap().fail_at = Some(at);
    let e = s.sync(&mut w).unwrap_err();
    assert!(fb.failed().unwrap().starts_with("sync"), "{e}");
    for step in
        [Step::Append { first: 3, count: 1, codec: Codec::Raw }, Step::Delete(vec![0]), Step::Compact, Step::Sync]
    {
        match run_step(&mut s, &mut w, SEED, &step) {
            Err(Error::Io(io)) if io.kind == IoErrorKind::Poisoned => {}
            other => panic!("{step:?} after a failed sync: {other:?}"),
        }
    }
    // Reads still work, and a reopen sees the three acknowledged records.
    assert_eq!(s.len(), 3);
    assert_eq!(contents(&s).len(), 3);
    drop((s, w));
    assert_eq!(reopen(&inner, "after failed sync").len(), 3);
}
