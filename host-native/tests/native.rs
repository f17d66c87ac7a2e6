//! Native-host behaviour: concurrency, inter-process locks, read-only handles (the CLI is
//! tested in host-native/cli/tests).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use zrecord::{Codec, Error, OpenOptions, Zrecord};

fn rec(i: u64, len: usize) -> Vec<u8> {
    (0..len).map(|k| (i as usize * 31 + k / 5) as u8).collect()
}

#[test]
fn readers_see_only_committed_records_while_a_writer_appends() {
    let dir = tempfile::tempdir().unwrap();
    let zr = Arc::new(Zrecord::open(dir.path()).unwrap());
    const LEN: usize = 4096;
    let first: Vec<u8> = (0..64).flat_map(|i| rec(i, LEN)).collect();
    zr.append(&first, 64, LEN, None).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..8)
        .map(|t| {
            let (zr, stop) = (zr.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut n = 0u64;
                let mut buf = vec![0u8; 16 * LEN];
                while !stop.load(Ordering::Relaxed) {
                    let len = u64::from(zr.len());
                    let idxs: Vec<u64> = (0..16).map(|k| (n * 7 + k * 13 + t) % len).collect();
                    zr.gather(&idxs, &mut buf, LEN).unwrap();
                    for (k, &i) in idxs.iter().enumerate() {
                        assert_eq!(&buf[k * LEN..(k + 1) * LEN], &rec(i, LEN)[..], "record {i}");
                    }
                    n += 1;
                }
                n
            })
        })
        .collect();
    for b in 1..40u64 {
        let batch: Vec<u8> = (b * 64..(b + 1) * 64).flat_map(|i| rec(i, LEN)).collect();
        let at = zr.append(&batch, 64, LEN, Some(if b % 2 == 0 { Codec::Raw } else { Codec::Flate })).unwrap();
        assert_eq!(u64::from(at), b * 64);
    }
    stop.store(true, Ordering::Relaxed);
    let reads: u64 = readers.into_iter().map(|h| h.join().unwrap()).sum();
    assert!(reads > 0);
    assert_eq!(zr.len(), 40 * 64);
}

#[test]
fn delete_and_compact_need_the_only_handle() {
    let dir = tempfile::tempdir().unwrap();
    let mut a = Zrecord::open(dir.path()).unwrap();
    a.append(&[1u8; 100], 10, 10, None).unwrap();
    let b = Zrecord::open(dir.path()).unwrap();
    let e = a.delete(&[0]).unwrap_err();
    assert!(matches!(e, Error::Locked(_)), "{e}");
    assert_eq!(e.code(), -9);
    assert!(matches!(a.compact().unwrap_err(), Error::Locked(_)));
    // The failed upgrade kept a's shared lock: b still cannot go exclusive either.
    let mut b = b;
    assert!(matches!(b.delete(&[0]).unwrap_err(), Error::Locked(_)));
    drop(b);
    a.delete(&[0]).unwrap();
    a.compact().unwrap();
    assert_eq!(a.len(), 9);
}

#[test]
fn one_appender_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let a = Zrecord::open(dir.path()).unwrap();
    let b = Zrecord::open(dir.path()).unwrap();
    a.append(&[1u8; 10], 1, 10, None).unwrap();
    let e = b.append(&[1u8; 10], 1, 10, None).unwrap_err();
    assert!(matches!(e, Error::Locked(_)), "{e}");
    drop(a);
    b.append(&[2u8; 10], 1, 10, None).unwrap();
}

#[test]
fn read_only_handles_refuse_changes_and_missing_stores_fail_fast() {
    let dir = tempfile::tempdir().unwrap();
    let e = Zrecord::open_read_only(dir.path()).err().unwrap();
    assert_eq!(e.code(), -8, "{e}");
    let e = Zrecord::open_read_only(dir.path().join("nope")).err().unwrap();
    assert_eq!(e.code(), -2, "{e}");
    Zrecord::open(dir.path()).unwrap().append(&[5u8; 8], 2, 4, None).unwrap();
    let ro = Zrecord::open_read_only(dir.path()).unwrap();
    assert_eq!(ro.read(1).unwrap(), vec![5u8; 4]);
    assert_eq!(ro.append(&[1u8; 4], 1, 4, None).unwrap_err().code(), -10);
    let opts = OpenOptions { create: false, ..Default::default() };
    assert!(Zrecord::open_with(dir.path().join("nope"), opts).is_err());
}

#[test]
fn writes_into_a_store_whose_directory_was_removed_fail_instead_of_vanishing() {
    // Removing the directory leaves an open handle's descriptors writable; an append used to
    // "succeed" into unlinked files and the records were gone with the handle.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let mut z = Zrecord::open(&path).unwrap();
    z.append(&rec(0, 64), 1, 64, Some(Codec::Raw)).unwrap();
    std::fs::remove_dir_all(&path).unwrap();
    for codec in [Codec::Raw, Codec::Flate] {
        match z.append(&rec(1, 64), 1, 64, Some(codec)) {
            Err(Error::Io(e)) => {
                assert_eq!(e.kind, zrecord::IoErrorKind::NotFound);
                assert!(e.to_string().contains("deleted while this handle was open"), "{e}");
            }
            other => panic!("an append into a removed store must fail, got {other:?}"),
        }
    }
    assert!(matches!(z.delete(&[0]), Err(Error::Io(_))), "delete too");
    // Reads of what the handle already maps still work.
    assert_eq!(z.read(0).unwrap(), rec(0, 64));
}
