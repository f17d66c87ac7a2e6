//! Byte-flip sweeps over small native stores (memory-mapped reads): each byte of meta.zr's
//! used region and of the chunk data is inverted in turn, and the store is opened read-only
//! and read every way (read, gather, verify, inspect). Each read must return a record of its
//! entry's length or a typed error; nothing may crash or read outside a buffer or mapping.
//!
//! Two sweeps:
//! - without checksum verification (`verify = never`, what the loaderx format alone gives):
//!   a flipped byte inside a raw payload, or an entry redirected onto other valid bytes,
//!   reads back as different data; the sweep counts those and asserts only that they are
//!   bounded and well-formed;
//! - with the checksums zrecord keeps (`checksums.zrc`, the default `verify = auto`), raw,
//!   flate and zstd, table and payload bytes: every read must give the original record or a
//!   typed error, **never different bytes**.
//!
//! `ZR_FLIP_STRIDE` sets which bytes the checksummed sweep flips (every n-th; default 7 in
//! `make test`, 1 for every byte in the long run).

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::Path;

use zrecord::{Codec, OpenOptions as ZrOptions, Verify, Zrecord};

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
    let opts = ZrOptions { create: false, read_only: true, verify: Verify::Never, ..ZrOptions::default() };
    let zr = match Zrecord::open_with(dir, opts) {
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
fn every_flipped_byte_reads_back_or_fails_typed_without_checksums() {
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
    eprintln!("byte-flip without checksums: {t:?}");
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

/// What one flip did to the reads of the checksummed sweep.
#[derive(Default, Debug)]
struct Strict {
    flips: u64,
    open_errors: u64,
    exact: u64,
    checksum_errors: u64,
    other_typed_errors: u64,
    /// Reads that returned bytes other than the record's: must stay 0.
    silent_wrong: u64,
}

fn strict_check(dir: &Path, t: &mut Strict, ctx: &str) {
    let zr = match Zrecord::open_read_only(dir) {
        Ok(zr) => zr,
        Err(e) => {
            assert_eq!(e.code(), -8, "{ctx}: open: {e}");
            t.open_errors += 1;
            return;
        }
    };
    let len = u64::from(zr.len());
    let mut tally = |i: u64, r: Result<Vec<u8>, zrecord::Error>, how: &str| match r {
        Ok(r) if i < N && r == record(i) => t.exact += 1,
        Ok(_) => {
            t.silent_wrong += 1;
            panic!("{ctx}: {how} of record {i} returned different bytes with no error");
        }
        Err(e) => {
            assert!(matches!(e.code(), -3 | -7 | -8 | -11), "{ctx}: {how} record {i}: {e}");
            if e.code() == -11 {
                assert!(matches!(e, zrecord::Error::Checksum { index, .. } if index == i), "{ctx}: {e:?}");
                t.checksum_errors += 1;
            } else {
                t.other_typed_errors += 1;
            }
        }
    };
    for i in 0..len.min(N + 3) {
        tally(i, zr.read(i), "read");
    }
    // A gather fails as a whole, or gives every record exactly.
    let idxs: Vec<u64> = (0..len.min(N)).collect();
    let mut dst = vec![0u8; idxs.len() * 4096];
    if zr.gather(&idxs, &mut dst, 4096).is_ok() {
        for (k, &i) in idxs.iter().enumerate() {
            let n = record(i).len();
            tally(i, Ok(dst[k * 4096..k * 4096 + n].to_vec()), "gather");
        }
    }
    let v = zr.verify(&mut |_, _| {}).unwrap_or_else(|e| panic!("{ctx}: verify: {e}"));
    assert_eq!(u64::from(v.checked), len, "{ctx}");
    zr.inspect().unwrap_or_else(|e| panic!("{ctx}: inspect: {e}"));
}

fn strict_sweep(dir: &Path, file: &str, range: std::ops::Range<u64>, stride: u64, t: &mut Strict) {
    let f = OpenOptions::new().read(true).write(true).open(dir.join(file)).unwrap();
    let mut at = range.start;
    while at < range.end {
        let mut b = [0u8];
        f.read_exact_at(&mut b, at).unwrap();
        f.write_all_at(&[!b[0]], at).unwrap();
        t.flips += 1;
        strict_check(dir, t, &format!("{file} byte {at}"));
        f.write_all_at(&b, at).unwrap();
        at += stride;
    }
}

#[test]
fn with_checksums_every_flipped_byte_gives_the_record_or_a_typed_error() {
    let stride: u64 = std::env::var("ZR_FLIP_STRIDE").ok().and_then(|v| v.parse().ok()).unwrap_or(7).max(1);
    let mut total = Strict::default();
    for codec in [Codec::Raw, Codec::Flate, Codec::Zstd] {
        let dir = tempfile::tempdir().unwrap();
        {
            let zr = Zrecord::open(dir.path()).unwrap();
            for i in 0..N {
                let r = record(i);
                zr.append(&r, 1, r.len(), Some(codec)).unwrap();
            }
            assert!(zr.has_checksums());
        }
        let used = Zrecord::open_read_only(dir.path()).unwrap().inspect().unwrap().tail_offset;
        let mut t = Strict::default();
        strict_sweep(dir.path(), "meta.zr", 0..16 + 16 * N, stride, &mut t);
        strict_sweep(dir.path(), "0.zr", 0..u64::from(used), stride, &mut t);
        eprintln!("byte-flip with checksums, {codec:?}, every {stride}. byte: {t:?}");
        assert_eq!(t.silent_wrong, 0);
        assert!(t.checksum_errors > 0, "{t:?}");
        // Intact again.
        let zr = Zrecord::open_read_only(dir.path()).unwrap();
        for i in 0..N {
            assert_eq!(zr.read(i).unwrap(), record(i));
        }
        total.flips += t.flips;
        total.open_errors += t.open_errors;
        total.exact += t.exact;
        total.checksum_errors += t.checksum_errors;
        total.other_typed_errors += t.other_typed_errors;
    }
    eprintln!("byte-flip with checksums, total: {total:?}");
}
