//! Byte-flip sweep over a small native store (memory-mapped reads): every byte of meta.zr's
//! used region and of the chunk data is inverted in turn, and the store is opened read-only
//! and read every way (read, gather, verify, inspect). Each read must return a record of its
//! entry's length or a typed error; nothing may crash or read outside a buffer or mapping.
//!
//! The format (loaderx's) has no checksums, so a flipped byte inside a raw payload, or an
//! entry redirected onto other valid bytes, reads back as different data: the sweep counts
//! those and asserts only that they are bounded and well-formed.

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::Path;

use zrecord::{Codec, Zrecord};

const N: u64 = 8;

fn record(i: u64) -> Vec<u8> {
    let len = 100 + 61 * i as usize;
    let mut x = (i + 3).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|k| {
            if i.is_multiple_of(2) {
                (k / 7) as u8 ^ i as u8
            } else {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            }
        })
        .collect()
}

#[derive(Default, Debug)]
struct Tally {
    flips: u64,
    open_errors: u64,
    correct: u64,
    typed_errors: u64,
    different: u64,
}

fn sweep_file(dir: &Path, file: &str, range: std::ops::Range<u64>, t: &mut Tally) {
    let f = OpenOptions::new().read(true).write(true).open(dir.join(file)).unwrap();
    for at in range {
        let mut b = [0u8];
        f.read_exact_at(&mut b, at).unwrap();
        f.write_all_at(&[!b[0]], at).unwrap();
        t.flips += 1;
        check(dir, t, &format!("{file} byte {at}"));
        f.write_all_at(&b, at).unwrap();
    }
}

fn check(dir: &Path, t: &mut Tally, ctx: &str) {
    let zr = match Zrecord::open_read_only(dir) {
        Ok(zr) => zr,
        Err(e) => {
            assert_eq!(e.code(), -8, "{ctx}: open: {e}");
            t.open_errors += 1;
            return;
        }
    };
    let len = u64::from(zr.len());
    // A flipped length can claim millions of (zero) entries; reading the first few past the
    // real ones shows they fail, and verify below walks them all in bounded time.
    for i in 0..len.min(N + 3) {
        match zr.read(i) {
            Ok(r) if i < N && r == record(i) => t.correct += 1,
            Ok(r) => {
                let mut l = [0u32];
                zr.lengths(&[i], &mut l).unwrap();
                assert_eq!(r.len(), l[0] as usize, "{ctx}: record {i}");
                assert!(r.len() <= 1 << 20, "{ctx}");
                t.different += 1;
            }
            Err(e) => {
                assert!(matches!(e.code(), -7 | -8), "{ctx}: record {i}: {e}");
                t.typed_errors += 1;
            }
        }
    }
    let idxs: Vec<u64> = (0..len.min(N)).collect();
    let mut dst = vec![0u8; idxs.len() * 4096 + 64];
    let _ = zr.gather(&idxs, &mut dst[..idxs.len() * 4096], 4096);
    let v = zr.verify(&mut |_, _| {}).unwrap_or_else(|e| panic!("{ctx}: verify: {e}"));
    assert_eq!(u64::from(v.checked), len, "{ctx}");
    zr.inspect().unwrap_or_else(|e| panic!("{ctx}: inspect: {e}"));
}

#[test]
fn every_flipped_byte_reads_back_or_fails_typed() {
    let dir = tempfile::tempdir().unwrap();
    {
        let zr = Zrecord::open(dir.path()).unwrap();
        for i in 0..N {
            let r = record(i);
            zr.append(&r, 1, r.len(), Some(Codec::Flate)).unwrap();
        }
    }
    let zr = Zrecord::open_read_only(dir.path()).unwrap();
    let used = zr.inspect().unwrap().tail_offset;
    drop(zr);
    let mut t = Tally::default();
    sweep_file(dir.path(), "meta.zr", 0..16 + 16 * N, &mut t);
    sweep_file(dir.path(), "0.zr", 0..u64::from(used), &mut t);
    eprintln!("byte-flip: {t:?}");
    assert_eq!(t.flips, 16 + 16 * N + u64::from(used));
    // Header damage must be caught at open, flate damage mostly on read.
    assert!(t.open_errors >= 6, "{t:?}");
    assert!(t.typed_errors > 0, "{t:?}");
    // The store is intact again.
    let zr = Zrecord::open_read_only(dir.path()).unwrap();
    for i in 0..N {
        assert_eq!(zr.read(i).unwrap(), record(i));
    }
}
