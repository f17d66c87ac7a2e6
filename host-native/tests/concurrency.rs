//! Concurrency across processes and threads: a second process cannot append to, delete from
//! or compact a store another process holds, and gets a clear "store is locked" error
//! (code -9); readers in many threads see only committed records while a writer appends,
//! deletes are refused while they read, and everything they read is byte-identical.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use zrecord::{Codec, Error, Zrecord};

const CHILD_ENV: &str = "ZR_LOCK_CHILD";

fn rec(i: u64, len: usize) -> Vec<u8> {
    (0..len).map(|k| (i as usize * 131 + k / 3) as u8 ^ (i >> 8) as u8).collect()
}

/// Child: opens the store, does what it is told (`append`, `delete`, `compact`), prints the
/// error code (0 for success) and waits for stdin to close.
#[test]
#[ignore = "run as a child process by the lock tests"]
fn lock_child() {
    let Ok(spec) = std::env::var(CHILD_ENV) else { return };
    let (what, dir) = spec.split_once(',').unwrap();
    let mut zr = Zrecord::open(dir).unwrap();
    let result = match what {
        "append" => zr.append(&[9u8; 16], 2, 8, None).map(|_| ()),
        "delete" => zr.delete(&[0]),
        "compact" => zr.compact(),
        _ => Ok(()),
    };
    match result {
        Ok(()) => println!("code 0"),
        Err(e) => println!("code {} {e}", e.code()),
    }
    std::io::stdout().flush().unwrap();
    let _ = std::io::stdin().lines().count();
}

struct Child {
    proc: std::process::Child,
    out: BufReader<std::process::ChildStdout>,
    code: i32,
    line: String,
}

fn child(what: &str, dir: &std::path::Path) -> Child {
    let mut proc = Command::new(std::env::current_exe().unwrap())
        .args(["lock_child", "--exact", "--ignored", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, format!("{what},{}", dir.display()))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(proc.stdout.take().unwrap());
    let mut line = String::new();
    while !line.contains("code ") {
        line.clear();
        assert!(out.read_line(&mut line).unwrap() > 0, "child {what} ended early");
    }
    let at = line.find("code ").unwrap();
    let line = line[at..].trim().to_string();
    let code = line[5..].split(' ').next().unwrap().parse().unwrap();
    Child { proc, out, code, line }
}

impl Drop for Child {
    fn drop(&mut self) {
        drop(self.proc.stdin.take());
        // Drain the child's remaining output so it never writes into a closed pipe.
        let _ = std::io::Read::read_to_end(&mut self.out, &mut Vec::new());
        let _ = self.proc.wait();
    }
}

#[test]
fn another_process_holding_the_store_locks_out_writers_and_maintenance() {
    let dir = tempfile::tempdir().unwrap();
    Zrecord::open(dir.path()).unwrap().append(&[1u8; 40], 4, 10, None).unwrap();

    // A process appending holds the appender lock: we cannot append, delete or compact.
    let appender = child("append", dir.path());
    assert_eq!(appender.code, 0, "{}", appender.line);
    let mut zr = Zrecord::open(dir.path()).unwrap();
    for (what, e) in [
        ("append", zr.append(&[2u8; 10], 1, 10, None).map(|_| ()).unwrap_err()),
        ("delete", zr.delete(&[0]).unwrap_err()),
        ("compact", zr.compact().unwrap_err()),
    ] {
        assert!(matches!(e, Error::Locked(_)), "{what}: {e}");
        assert_eq!(e.code(), -9);
        assert!(e.to_string().contains("store is locked"), "{what}: {e}");
    }
    drop(appender);
    zr.append(&[2u8; 10], 1, 10, None).unwrap();
    drop(zr);

    // While we hold a handle (even a read-only one), another process can neither delete
    // nor compact.
    let reader = Zrecord::open_read_only(dir.path()).unwrap();
    for what in ["delete", "compact"] {
        let c = child(what, dir.path());
        assert_eq!(c.code, -9, "{what} in another process: {}", c.line);
        assert!(c.line.contains("store is locked"), "{}", c.line);
    }
    assert_eq!(reader.read(0).unwrap(), vec![1u8; 10]);
    drop(reader);
    let c = child("delete", dir.path());
    assert_eq!(c.code, 0, "{}", c.line);
}

#[test]
fn many_readers_and_an_appender_across_codecs() {
    let dir = tempfile::tempdir().unwrap();
    let zr = Arc::new(Zrecord::open(dir.path()).unwrap());
    const LEN: usize = 3000;
    zr.append(&rec(0, LEN), 1, LEN, None).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicU64::new(0));
    let readers: Vec<_> = (0..6u64)
        .map(|t| {
            let (zr, stop, reads) = (zr.clone(), stop.clone(), reads.clone());
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 8 * LEN];
                let mut n = t;
                while !stop.load(Ordering::Relaxed) {
                    let len = u64::from(zr.len());
                    let idxs: Vec<u64> = (0..8).map(|k| (n * 31 + k * 7) % len).collect();
                    if t % 2 == 0 {
                        zr.gather(&idxs, &mut buf, LEN).unwrap();
                    } else {
                        let offs: Vec<u64> = (0..8).map(|k| (7 - k) * LEN as u64).collect();
                        zr.gather_var(&idxs, &mut buf, &offs).unwrap();
                    }
                    for (k, &i) in idxs.iter().enumerate() {
                        let slot = if t % 2 == 0 { k } else { 7 - k };
                        assert_eq!(&buf[slot * LEN..(slot + 1) * LEN], &rec(i, LEN)[..], "record {i}");
                    }
                    n += 1;
                    reads.fetch_add(8, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for b in 1..200u64 {
        let batch: Vec<u8> = (b * 4 - 3..=b * 4).flat_map(|i| rec(i, LEN)).collect();
        let codec = if b % 2 == 0 { Codec::Raw } else { Codec::Flate };
        assert_eq!(u64::from(zr.append(&batch, 4, LEN, Some(codec)).unwrap()), b * 4 - 3);
    }
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        r.join().unwrap();
    }
    assert!(reads.load(Ordering::Relaxed) > 0);
    assert_eq!(zr.len(), 797);
}
