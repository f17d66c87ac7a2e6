//! A full disk for real: a 3 MiB tmpfs mounted in a private mount namespace (`unshare`),
//! where the sparse meta.zr (256 MiB) and chunk files (4 GiB) are far larger than the disk.
//! Appending until the space runs out must end in an ENOSPC error, not a SIGBUS through a
//! mapping, and every record acknowledged before it must still read back. Skipped, with a
//! message, where a tmpfs cannot be mounted.

use std::path::Path;
use std::process::Command;

use zrecord::{Codec, Error, IoErrorKind, Zrecord};

const CHILD_ENV: &str = "ZR_FULL_DISK_DIR";
const REC: usize = 48 * 1024;

fn record(i: u64) -> Vec<u8> {
    let mut x = (i + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..REC)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Says loudly that the test could not run: on stderr, and in the file named by
/// `ZRECORD_SKIP_LOG` (set by `make test`, which lists every such line in its final summary).
fn skipped(why: &str) {
    let line = format!("host-native/tests/full_disk.rs full_disk_is_an_error_not_a_crash: {why}");
    eprintln!("SKIPPED {line}");
    if let Ok(log) = std::env::var("ZRECORD_SKIP_LOG") {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new().create(true).append(true).open(log).expect("open ZRECORD_SKIP_LOG");
        writeln!(f, "{line}").expect("write ZRECORD_SKIP_LOG");
    }
}

/// Runs inside the namespace with the tmpfs mounted at `ZR_FULL_DISK_DIR`.
#[test]
#[ignore = "run by full_disk_is_an_error_not_a_crash inside a mount namespace"]
fn full_disk_child() {
    let Ok(dir) = std::env::var(CHILD_ENV) else { return };
    let dir = Path::new(&dir).join("store");
    let zr = Zrecord::open(&dir).unwrap();
    let mut n = 0u64;
    let err = loop {
        // Incompressible, so flate falls back to raw and every byte needs a block.
        match zr.append(&record(n), 1, REC, Some(Codec::Flate)) {
            Ok(_) => n += 1,
            Err(e) => break e,
        }
        assert!(n < 1000, "a 3 MiB disk took {n} records of {REC} bytes");
    };
    match &err {
        Error::Io(io) if io.kind == IoErrorKind::StorageFull || io.kind == IoErrorKind::Poisoned => {}
        other => panic!("append on a full disk: {other}"),
    }
    assert_eq!(err.code(), -2);
    assert!(n > 10, "only {n} records fit");
    // Reads of everything acknowledged still work, through the same handle and a new one.
    let mut buf = vec![0u8; REC];
    for i in 0..n {
        zr.gather(&[i], &mut buf, REC).unwrap();
        assert_eq!(buf, record(i), "record {i}");
    }
    assert_eq!(u64::from(zr.len()), n);
    zr.verify(&mut |_, _| {}).unwrap();
    drop(zr);
    let zr = Zrecord::open_read_only(&dir).unwrap();
    assert_eq!(u64::from(zr.len()), n);
    for i in 0..n {
        assert_eq!(zr.read(i).unwrap(), record(i), "record {i} after reopen");
    }
    // Freeing space (a tail delete rewrites only the header) lets the store go on.
    drop(zr);
    let mut zr = Zrecord::open(&dir).unwrap();
    zr.delete(&[n - 1, n - 2]).unwrap();
    zr.compact().unwrap();
    assert_eq!(u64::from(zr.len()), n - 2);
    println!("full-disk: {n} records of {REC} bytes acknowledged before ENOSPC: {err}");
}

#[test]
fn full_disk_is_an_error_not_a_crash() {
    let mnt = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    let script = r#"mount -t tmpfs -o size=3m zrfull "$1" || exit 77; shift; exec "$@""#;
    let probe = Command::new("unshare").args(["-rm", "true"]).status();
    if !probe.is_ok_and(|s| s.success()) {
        skipped("cannot create a mount namespace here (unshare -rm)");
        return;
    }
    let out = Command::new("unshare")
        .args(["-rm", "sh", "-c", script, "sh"])
        .arg(mnt.path())
        .arg(&exe)
        .args(["full_disk_child", "--exact", "--ignored", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, mnt.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if out.status.code() == Some(77) {
        skipped(&format!("cannot mount a tmpfs here: {}", stderr.trim()));
        return;
    }
    // A SIGBUS would show as a signal exit, not a test failure.
    assert!(out.status.success(), "child failed ({:?}):\n{stdout}\n{stderr}", out.status);
    assert!(stdout.contains("full-disk:"), "the child did not run:\n{stdout}");
    for line in stdout.lines().filter_map(|l| l.find("full-disk:").map(|at| &l[at..])) {
        eprintln!("{line}");
    }
}
