//! Engine invariants against an in-memory model: round trips, raw fallback, dense deletes,
//! compaction that preserves contents and converges, chunk rollover, and typed errors.

use proptest::prelude::*;
use zrecord_core::engine::{gather_stores, Batch, FixedSlots, Options, Pick, Store, Writer};
use zrecord_core::error::{Error, FormatError};
use zrecord_core::format::{Header, RecordLoc, CHUNK_FILE_LEN, META_FILE, META_LEN};
use zrecord_core::io::mem::MemBackend;
use zrecord_core::io::{Backend, Serial, StorageFile};
use zrecord_core::Codec;

fn open(b: &MemBackend, capacity: u64) -> (Store<MemBackend>, Writer) {
    Store::open(b.clone(), Options { chunk_capacity: capacity, ..Options::default() }).expect("open")
}

/// A record of `len` bytes that compresses when `seed` is even and does not when odd.
fn record(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|i| {
            if seed.is_multiple_of(2) {
                (i / 7) as u8 ^ seed as u8
            } else {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            }
        })
        .collect()
}

fn append_all(s: &Store<MemBackend>, w: &mut Writer, recs: &[Vec<u8>], codec: Codec) -> u32 {
    let mut src = Vec::new();
    let mut offsets = Vec::new();
    let mut lens = Vec::new();
    for r in recs {
        offsets.push(src.len() as u64);
        lens.push(r.len() as u32);
        src.extend_from_slice(r);
    }
    s.append(w, &Batch::Ragged { src: &src, offsets: &offsets, lens: &lens }, codec, &Serial).unwrap()
}

fn contents(s: &Store<MemBackend>) -> Vec<Vec<u8>> {
    (0..u64::from(s.len())).map(|i| s.read(i).unwrap()).collect()
}

#[test]
fn new_store_layout() {
    let b = MemBackend::new();
    let (s, _w) = open(&b, CHUNK_FILE_LEN);
    assert!(s.is_empty());
    let meta = b.file(META_FILE).unwrap();
    assert_eq!(meta.len().unwrap(), META_LEN);
    let mut head = [0u8; 16];
    meta.read_at(0, &mut head).unwrap();
    assert_eq!(head, *b"ZREC\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00");
    assert_eq!(b.file("0.zr").unwrap().len().unwrap(), CHUNK_FILE_LEN);
}

#[test]
fn fixed_round_trip_and_raw_fallback() {
    let b = MemBackend::new();
    let (s, mut w) = open(&b, CHUNK_FILE_LEN);
    let recs: Vec<Vec<u8>> = (0..10).map(|i| record(i, 300)).collect();
    let src: Vec<u8> = recs.concat();
    let first = s.append(&mut w, &Batch::Fixed { src: &src, count: 10, item_len: 300 }, Codec::Flate, &Serial).unwrap();
    assert_eq!(first, 0);
    for i in 0..10u32 {
        let e = s.entry(i).unwrap();
        let expect = if i % 2 == 0 { Codec::Flate } else { Codec::Raw };
        assert_eq!(e.codec, expect.tag(), "record {i}");
        assert_eq!(e.logic_length, 300);
        assert!(e.phys_length <= 300);
    }
    let idxs = [9u64, 0, 4, 4];
    let mut dst = vec![0u8; 4 * 512];
    s.gather(&idxs, &mut dst, 512, &Serial).unwrap();
    for (k, &i) in idxs.iter().enumerate() {
        assert_eq!(&dst[k * 512..k * 512 + 300], &recs[i as usize][..]);
    }
    let mut lens = [0u32; 2];
    s.lengths(&[1, 2], &mut lens).unwrap();
    assert_eq!(lens, [300, 300]);
}

#[test]
fn gather_var_and_errors_leave_destination_untouched() {
    let b = MemBackend::new();
    let (s, mut w) = open(&b, CHUNK_FILE_LEN);
    let recs = vec![record(0, 10), record(1, 3), record(2, 7)];
    append_all(&s, &mut w, &recs, Codec::Flate);
    let mut dst = vec![0xAAu8; 20];
    s.gather_var(&[2, 0], &mut dst, &[10, 0], &Serial).unwrap();
    assert_eq!(&dst[..10], &recs[0][..]);
    assert_eq!(&dst[10..17], &recs[2][..]);

    let mut dst = vec![0xAAu8; 20];
    let e = s.gather_var(&[0, 2], &mut dst, &[0, 5], &Serial).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    let e = s.gather_var(&[0], &mut dst, &[15], &Serial).unwrap_err();
    assert_eq!(e.code(), -6);
    let e = s.gather(&[0, 1], &mut dst, 5, &Serial).unwrap_err();
    assert_eq!(e.code(), -6, "stride shorter than a record");
    let e = s.gather(&[0, 3], &mut dst, 10, &Serial).unwrap_err();
    assert!(matches!(e, Error::IndexOutOfRange { index: 3, length: 3 }));
    assert!(dst.iter().all(|&x| x == 0xAA), "a failed gather wrote nothing");
}

#[test]
fn gather_stores_reads_several_stores_and_names_the_failing_one() {
    let (b0, b1) = (MemBackend::new(), MemBackend::new());
    let (s0, mut w0) = open(&b0, CHUNK_FILE_LEN);
    let (s1, mut w1) = open(&b1, CHUNK_FILE_LEN);
    let r0 = vec![record(0, 8), record(1, 5)];
    let r1 = vec![record(2, 8), record(3, 8)];
    append_all(&s0, &mut w0, &r0, Codec::Flate);
    append_all(&s1, &mut w1, &r1, Codec::Raw);
    let stores = [&s0, &s1];
    let pick = |store, index, offset| Pick { store, index, offset };
    // Slots of 8 bytes, out of order, across both stores; record 1 of store 0 is short.
    let picks = [pick(1, 1, 0), pick(0, 1, 8), pick(0, 0, 16), pick(1, 0, 24)];
    let mut dst = vec![0xAAu8; 32];
    gather_stores(&stores, &picks, &mut dst, Some(FixedSlots { size: 8, clear: true }), &Serial).unwrap();
    assert_eq!(&dst[0..8], &r1[1][..]);
    assert_eq!(&dst[8..13], &r0[1][..]);
    assert_eq!(&dst[13..16], &[0, 0, 0], "the slack past a short record is cleared");
    assert_eq!(&dst[16..24], &r0[0][..]);
    assert_eq!(&dst[24..32], &r1[0][..]);

    // Every failure names its store, and nothing is written before the checks pass.
    let mut dst = vec![0xAAu8; 32];
    let fixed = Some(FixedSlots { size: 8, clear: true });
    let (s, e) = gather_stores(&stores, &[pick(0, 1, 0), pick(1, 2, 8)], &mut dst, fixed, &Serial).unwrap_err();
    assert_eq!(s, 1);
    assert!(matches!(e, Error::IndexOutOfRange { index: 2, length: 2 }), "{e}");
    let small = Some(FixedSlots { size: 6, clear: true });
    let (s, e) = gather_stores(&stores, &[pick(0, 1, 0), pick(1, 0, 8)], &mut dst, small, &Serial).unwrap_err();
    assert_eq!((s, e.code()), (1, -6), "{e}");
    let (s, e) = gather_stores(&stores, &[pick(0, 1, 0), pick(1, 0, 4)], &mut dst, fixed, &Serial).unwrap_err();
    assert_eq!(s, 1);
    assert!(matches!(e, Error::InvalidArgument(_)), "overlapping slots: {e}");
    assert!(dst.iter().all(|&x| x == 0xAA), "a failed gather wrote nothing");

    // A damaged record is reported with its store, even when another store's reads pass.
    let loc = s1.entry(1).unwrap();
    let chunk = b1.open_chunk(loc.chunk_id, false).unwrap().unwrap();
    let mut byte = [0u8];
    chunk.read_at(u64::from(loc.offset), &mut byte).unwrap();
    chunk.write_at(u64::from(loc.offset), &[byte[0] ^ 1]).unwrap();
    let picks = [pick(0, 0, 0), pick(1, 1, 8), pick(0, 1, 16)];
    let (s, e) = gather_stores(&stores, &picks, &mut dst, None, &Serial).unwrap_err();
    assert_eq!(s, 1);
    assert!(matches!(e, Error::Checksum { index: 1, .. }), "{e}");
}

#[test]
fn append_rejects_bad_records_without_change() {
    let b = MemBackend::new();
    let (s, mut w) = open(&b, CHUNK_FILE_LEN);
    let big = vec![0u8; (1 << 20) + 1];
    let e =
        s.append(&mut w, &Batch::Fixed { src: &big, count: 1, item_len: big.len() }, Codec::Raw, &Serial).unwrap_err();
    assert_eq!(e.code(), -4);
    let e = s.append(&mut w, &Batch::Fixed { src: &big, count: 3, item_len: 0 }, Codec::Raw, &Serial).unwrap_err();
    assert_eq!(e.code(), -4, "zero-length records are refused as loaderx does");
    let e =
        s.append(&mut w, &Batch::Fixed { src: &big[..10], count: 2, item_len: 6 }, Codec::Raw, &Serial).unwrap_err();
    assert_eq!(e.code(), -6);
    let e = s
        .append(&mut w, &Batch::Ragged { src: &big[..10], offsets: &[0, 5], lens: &[5] }, Codec::Raw, &Serial)
        .unwrap_err();
    assert_eq!(e.code(), -10);
    assert_eq!(s.len(), 0);
    assert_eq!(s.append(&mut w, &Batch::Fixed { src: &[], count: 0, item_len: 0 }, Codec::Raw, &Serial).unwrap(), 0);
}

#[test]
fn rollover_never_straddles_and_store_full_is_clean() {
    let b = MemBackend::new();
    let (s, mut w) = open(&b, 100);
    let recs: Vec<Vec<u8>> = (0..9).map(|i| record(2 * i + 1, 30 + i as usize)).collect();
    append_all(&s, &mut w, &recs, Codec::Raw);
    for i in 0..9u32 {
        let e = s.entry(i).unwrap();
        assert!(e.offset as u64 + e.phys_length as u64 <= 100, "{e:?}");
    }
    assert!(s.header().tail_chunk >= 3);
    assert!(b.file("3.zr").is_some());
    assert_eq!(contents(&s), recs);
    // Reopening with the real capacity reads the same store.
    drop(s);
    let (s, _) = open(&b, CHUNK_FILE_LEN);
    assert_eq!(contents(&s), recs);

    // 4096 chunks of one 16-byte record each, then the store is full.
    let b = MemBackend::new();
    let (s, mut w) = open(&b, 16);
    let src = vec![1u8; 16 * 4096];
    s.append(&mut w, &Batch::Fixed { src: &src, count: 4096, item_len: 16 }, Codec::Raw, &Serial).unwrap();
    let e = s.append(&mut w, &Batch::Fixed { src: &src, count: 1, item_len: 16 }, Codec::Raw, &Serial).unwrap_err();
    assert_eq!(e.code(), -5);
    assert_eq!(s.len(), 4096);
}

#[test]
fn delete_swaps_last_in_descending_order() {
    let b = MemBackend::new();
    let (mut s, mut w) = open(&b, CHUNK_FILE_LEN);
    let recs: Vec<Vec<u8>> = (0..10).map(|i| record(i, 20)).collect();
    append_all(&s, &mut w, &recs, Codec::Flate);
    s.delete(&mut w, &[3, 9, 3, 0]).unwrap();
    // Descending: 9 is last (dropped), 3 <- 8, 0 <- 7.
    let expect: Vec<Vec<u8>> = [7, 1, 2, 8, 4, 5, 6].iter().map(|&i| recs[i].clone()).collect();
    assert_eq!(contents(&s), expect);
    let e = s.delete(&mut w, &[1, 7]).unwrap_err();
    assert!(matches!(e, Error::IndexOutOfRange { index: 7, length: 7 }));
    assert_eq!(contents(&s), expect, "a failed delete changes nothing");
}

#[test]
fn compact_repacks_in_place_and_converges() {
    let b = MemBackend::new();
    let (mut s, mut w) = open(&b, 1000);
    let recs: Vec<Vec<u8>> = (0..60).map(|i| record(i, 40 + (i as usize * 7) % 50)).collect();
    append_all(&s, &mut w, &recs, Codec::Flate);
    let before_chunks = s.header().tail_chunk;
    s.delete(&mut w, &(0..60).step_by(3).collect::<Vec<u64>>()).unwrap();
    let want = contents(&s);
    let stats = s.stats().unwrap();
    assert!(stats.reclaimable > 0);
    let mut calls = 0;
    s.compact(&mut w, &mut |done, total| {
        calls += 1;
        assert!(done <= total);
    })
    .unwrap();
    assert!(calls > 0);
    assert_eq!(contents(&s), want);
    let after = s.stats().unwrap();
    assert!(after.chunk_bytes < stats.chunk_bytes);
    assert!(s.header().tail_chunk < before_chunks);
    assert!(b.file(&format!("{before_chunks}.zr")).is_none(), "chunks past the frontier are deleted");
    // Idempotent: a second run moves nothing.
    let table: Vec<RecordLoc> = (0..s.len()).map(|i| s.entry(i).unwrap()).collect();
    s.compact(&mut w, &mut |_, _| {}).unwrap();
    assert_eq!((0..s.len()).map(|i| s.entry(i).unwrap()).collect::<Vec<_>>(), table);
    assert_eq!(s.stats().unwrap(), after);
    drop(s);
    let (s, _) = open(&b, 1000);
    assert_eq!(contents(&s), want);
}

#[test]
fn bad_directories_are_typed_errors() {
    let b = MemBackend::new();
    let e = Store::open(b.clone(), Options::read_only()).err().unwrap();
    assert!(matches!(e, Error::Format(FormatError::MissingMeta)));
    drop(open(&b, CHUNK_FILE_LEN));
    let meta = b.file(META_FILE).unwrap();
    meta.write_at(0, b"ZRED").unwrap();
    assert!(matches!(
        Store::open(b.clone(), Options::default()).err().unwrap(),
        Error::Format(FormatError::BadMagic { .. })
    ));
    meta.write_at(0, &Header::default().encode()).unwrap();
    meta.write_at(4, &[3, 0]).unwrap();
    assert!(matches!(
        Store::open(b.clone(), Options::default()).err().unwrap(),
        Error::Format(FormatError::UnsupportedVersion { found: 3 })
    ));
    meta.set_len(15).unwrap();
    assert!(matches!(
        Store::open(b.clone(), Options::default()).err().unwrap(),
        Error::Format(FormatError::MetaSize { .. })
    ));
}

#[derive(Debug, Clone)]
enum Op {
    Append(Vec<(u64, usize)>, bool),
    Delete(Vec<u64>),
    Compact,
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (prop::collection::vec((any::<u64>(), 1usize..300), 1..12), any::<bool>()).prop_map(|(r, f)| Op::Append(r, f)),
        2 => prop::collection::vec(any::<u64>(), 0..6).prop_map(Op::Delete),
        1 => Just(Op::Compact),
        1 => Just(Op::Reopen),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Any sequence of appends, deletes, compactions and reopens matches a Vec model with
    /// loaderx's swap-last delete, and every record stays inside its chunk.
    #[test]
    fn store_matches_model(ops in prop::collection::vec(op(), 1..25), capacity in 300u64..2000) {
        let b = MemBackend::new();
        let (mut s, mut w) = open(&b, capacity);
        let mut model: Vec<Vec<u8>> = Vec::new();
        for op in ops {
            match op {
                Op::Append(specs, flate) => {
                    let recs: Vec<Vec<u8>> = specs.iter().map(|&(seed, len)| record(seed, len)).collect();
                    let first = append_all(&s, &mut w, &recs, if flate { Codec::Flate } else { Codec::Raw });
                    prop_assert_eq!(first as usize, model.len());
                    model.extend(recs);
                }
                Op::Delete(raw) => {
                    if model.is_empty() { continue; }
                    let idxs: Vec<u64> = raw.iter().map(|r| r % model.len() as u64).collect();
                    s.delete(&mut w, &idxs).unwrap();
                    let mut sorted = idxs.clone();
                    sorted.sort_unstable_by(|a, b| b.cmp(a));
                    sorted.dedup();
                    for i in sorted {
                        let last = model.pop().unwrap();
                        if (i as usize) < model.len() { model[i as usize] = last; }
                    }
                }
                Op::Compact => {
                    s.compact(&mut w, &mut |_, _| {}).unwrap();
                    let st = s.stats().unwrap();
                    // Only chunk-boundary slack may remain.
                    prop_assert!(st.reclaimable <= u64::from(s.header().tail_chunk) * (zrecord_core::format::CHUNK_FILE_LEN - capacity + 300));
                }
                Op::Reopen => {
                    drop(s);
                    (s, w) = open(&b, capacity);
                }
            }
            prop_assert_eq!(s.len() as usize, model.len());
            let h = s.header();
            for i in 0..s.len() {
                let e = s.entry(i).unwrap();
                prop_assert!(e.check(&h).is_ok());
                prop_assert!(u64::from(e.offset) + u64::from(e.phys_length) <= capacity);
            }
            prop_assert_eq!(contents(&s), model.clone());
        }
    }
}
