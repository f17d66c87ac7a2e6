//! Zstd records (tag 2) in a native store: written by libzstd, read back through every read
//! path, kept through delete and compact, and covered by `checksums.zrc` like any record.

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;

use zrecord::{ChecksumFailure, Codec, Error, Zrecord};

const LEN: usize = 3000;

/// Compressible (zstd keeps it) for even `i`, noise (stored raw) for odd `i`.
fn record(i: u64) -> Vec<u8> {
    let mut x = (i + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..LEN)
        .map(|k| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if i.is_multiple_of(2) {
                (k / 9) as u8 ^ i as u8
            } else {
                x as u8
            }
        })
        .collect()
}

fn write_store(dir: &std::path::Path, n: u64) -> Zrecord {
    let zr = Zrecord::open(dir).unwrap();
    let src: Vec<u8> = (0..n).flat_map(record).collect();
    zr.append(&src, n as usize, LEN, Some(Codec::Zstd)).unwrap();
    zr
}

#[test]
fn zstd_store_reads_back_through_delete_and_compact() {
    let dir = tempfile::tempdir().unwrap();
    let mut zr = write_store(dir.path(), 20);
    let ins = zr.inspect().unwrap();
    assert_eq!((ins.zstd_records, ins.raw_records, ins.flate_records), (10, 10, 0), "{ins:?}");
    assert!(ins.to_string().contains("loaderx 0.5.4 cannot read this store"), "{ins}");
    // read, and gather (the loader's path) in a scattered order.
    for i in 0..20 {
        assert!(zr.read(i).unwrap() == record(i), "record {i}");
    }
    let idxs = [19u64, 0, 7, 12, 3];
    let mut buf = vec![0u8; idxs.len() * LEN];
    zr.gather(&idxs, &mut buf, LEN).unwrap();
    for (k, &i) in idxs.iter().enumerate() {
        assert!(buf[k * LEN..][..LEN] == record(i)[..], "record {i}");
    }

    // Delete moves the tail into each hole, in descending index order; compact rewrites
    // the chunk.
    let mut model: Vec<u64> = (0..20).collect();
    let doomed = [10u64, 5, 2];
    zr.delete(&doomed).unwrap();
    for &d in &doomed {
        let last = model.pop().unwrap();
        if (d as usize) < model.len() {
            model[d as usize] = last;
        }
    }
    zr.compact().unwrap();
    drop(zr);
    let zr = Zrecord::open_read_only(dir.path()).unwrap();
    assert_eq!(zr.len() as usize, model.len());
    for (i, &orig) in model.iter().enumerate() {
        assert!(zr.read(i as u64).unwrap() == record(orig), "slot {i} should hold record {orig}");
    }
    let ins = zr.inspect().unwrap();
    assert_eq!(ins.zstd_records as usize, model.iter().filter(|&&i| i % 2 == 0).count());
    assert_eq!(ins.reclaimable, 0);
    let v = zr.verify(&mut |_, _| {}).unwrap();
    assert_eq!((v.bad_count, v.checksummed as usize), (0, model.len()), "{v:?}");
}

#[test]
fn a_flipped_byte_in_a_zstd_record_is_a_checksum_error() {
    let dir = tempfile::tempdir().unwrap();
    let zr = write_store(dir.path(), 1);
    assert_eq!(zr.inspect().unwrap().zstd_records, 1);
    let phys = u64::from(zr.inspect().unwrap().tail_offset);
    drop(zr);
    // Record 0 is the only one: its stored bytes are 0.zr[0..phys]. Flip one in the frame's
    // blocks, past the header, where a decoder might not notice.
    let f = OpenOptions::new().read(true).write(true).open(dir.path().join("0.zr")).unwrap();
    let at = phys / 2;
    let mut b = [0u8];
    f.read_exact_at(&mut b, at).unwrap();
    f.write_all_at(&[b[0] ^ 0x10], at).unwrap();
    let zr = Zrecord::open_read_only(dir.path()).unwrap();
    match zr.read(0) {
        Err(Error::Checksum { index: 0, failure: ChecksumFailure::Mismatch { .. }, .. }) => {}
        other => panic!("expected a checksum error, got {other:?}"),
    }
    let mut buf = vec![0u8; LEN];
    assert!(matches!(zr.gather(&[0], &mut buf, LEN), Err(Error::Checksum { index: 0, .. })));
}
