//! Per-record checksums (`checksums.zrc`): damage is caught before decoding, every write
//! path keeps them, and a writer that keeps none (loaderx, simulated here byte for byte on
//! the files: it writes meta.zr and the chunks and never touches the side file) leaves
//! records *unchecked*, never reported as damaged; `seal` checksums them again.

mod common;

use common::{apply_model, contents, record, run_step, scripted_workload, Step};
use zrecord_app::tools;
use zrecord_core::engine::{Batch, Options, Store, Verify};
use zrecord_core::error::{ChecksumFailure, Error};
use zrecord_core::format::sums::SUMS_FILE;
use zrecord_core::format::{entry_offset, Header, RecordLoc, HEADER_LEN, META_FILE};
use zrecord_core::io::mem::MemBackend;
use zrecord_core::io::{Backend, Serial, StorageFile};
use zrecord_core::Codec;

const SEED: u64 = 5;
const CAPACITY: u64 = 4096;

fn opts() -> Options {
    Options { chunk_capacity: CAPACITY, ..Options::default() }
}

fn store_with(steps: &[Step]) -> (MemBackend, Vec<Vec<u8>>) {
    let b = MemBackend::new();
    let (mut s, mut w) = Store::open(b.clone(), opts()).unwrap();
    let mut model = Vec::new();
    for step in steps {
        run_step(&mut s, &mut w, SEED, step).unwrap();
        model = apply_model(SEED, &model, step);
    }
    (b, model)
}

fn open(b: &MemBackend, verify: Verify) -> Store<MemBackend> {
    Store::open(b.clone(), Options { verify, ..opts() }).unwrap().0
}

/// A writer that keeps no checksums, as loaderx 0.5.4 does: raw appends at the frontier,
/// swap-last deletes, and a dense repack, written straight into meta.zr and the chunks.
struct Foreign<'a>(&'a MemBackend);

impl Foreign<'_> {
    fn header(&self) -> Header {
        let mut raw = [0u8; HEADER_LEN];
        self.0.file(META_FILE).unwrap().read_at(0, &mut raw).unwrap();
        Header::decode(&raw).unwrap()
    }

    fn set_header(&self, h: &Header) {
        self.0.file(META_FILE).unwrap().write_at(0, &h.encode()).unwrap();
    }

    fn entry(&self, i: u32) -> RecordLoc {
        let mut raw = [0u8; 16];
        self.0.file(META_FILE).unwrap().read_at(entry_offset(i), &mut raw).unwrap();
        RecordLoc::decode(&raw)
    }

    fn set_entry(&self, i: u32, e: &RecordLoc) {
        self.0.file(META_FILE).unwrap().write_at(entry_offset(i), &e.encode()).unwrap();
    }

    fn chunk(&self, id: u16) -> zrecord_core::io::mem::MemFile {
        self.0.open_chunk(id, true).unwrap().unwrap()
    }

    fn append(&self, rec: &[u8]) {
        let mut h = self.header();
        if u64::from(h.tail_offset) + rec.len() as u64 > CAPACITY {
            h.tail_chunk += 1;
            h.tail_offset = 0;
        }
        self.chunk(h.tail_chunk).write_at(u64::from(h.tail_offset), rec).unwrap();
        let e = RecordLoc {
            offset: h.tail_offset,
            phys_length: rec.len() as u32,
            logic_length: rec.len() as u32,
            chunk_id: h.tail_chunk,
            codec: 0,
        };
        self.set_entry(h.length, &e);
        h.tail_offset += rec.len() as u32;
        h.length += 1;
        self.set_header(&h);
    }

    fn delete(&self, i: u32) {
        let mut h = self.header();
        let last = h.length - 1;
        if i != last {
            self.set_entry(i, &self.entry(last));
        }
        h.length = last;
        self.set_header(&h);
    }

    fn compact(&self) {
        let h = self.header();
        let mut live: Vec<(RecordLoc, u32)> = (0..h.length).map(|i| (self.entry(i), i)).collect();
        live.sort_by_key(|(e, _)| (e.chunk_id, e.offset));
        let (mut chunk, mut off) = (0u16, 0u32);
        for (e, i) in live {
            if u64::from(off) + u64::from(e.phys_length) > CAPACITY {
                chunk += 1;
                off = 0;
            }
            let mut bytes = vec![0u8; e.phys_length as usize];
            self.chunk(e.chunk_id).read_at(u64::from(e.offset), &mut bytes).unwrap();
            self.chunk(chunk).write_at(u64::from(off), &bytes).unwrap();
            self.set_entry(i, &RecordLoc { chunk_id: chunk, offset: off, ..e });
            off += e.phys_length;
        }
        self.set_header(&Header { tail_chunk: chunk, tail_offset: off, length: h.length });
    }
}

fn flip_payload_byte(b: &MemBackend, s: &Store<MemBackend>, index: u32, at: u32) {
    let e = s.entry(index).unwrap();
    let f = b.open_chunk(e.chunk_id, false).unwrap().unwrap();
    let mut byte = [0u8];
    f.read_at(u64::from(e.offset + at), &mut byte).unwrap();
    f.write_at(u64::from(e.offset + at), &[!byte[0]]).unwrap();
}

#[test]
fn a_new_store_has_checksums_and_every_write_path_keeps_them() {
    let (b, model) = store_with(&scripted_workload());
    assert!(b.file(SUMS_FILE).is_some());
    let s = open(&b, Verify::Always);
    assert!(s.has_checksums());
    assert_eq!(s.unchecked().unwrap(), 0, "append, delete and compact left every record checksummed");
    assert_eq!(s.stats().unwrap().unchecked, 0);
    assert_eq!(contents(&s), model, "every record reads under verify = always");
    let v = tools::verify(&s, &Serial, &mut |_, _| {}).unwrap();
    assert_eq!((v.checked, v.checksummed, v.unchecked, v.bad_count), (model.len() as u32, model.len() as u32, 0, 0));
}

#[test]
fn a_damaged_payload_is_a_checksum_error_on_every_read_path_raw_and_flate() {
    let steps = [
        Step::Append { first: 0, count: 6, codec: Codec::Raw },
        Step::Append { first: 6, count: 6, codec: Codec::Flate },
    ];
    let (b, model) = store_with(&steps);
    let s = open(&b, Verify::Auto);
    // Record 1 is raw; record 6 is stored compressed (even records are compressible).
    assert_eq!(s.entry(6).unwrap().codec, 1);
    for index in [1u32, 6] {
        flip_payload_byte(&b, &s, index, 0);
        let e = s.read(u64::from(index)).unwrap_err();
        assert_eq!(e.code(), -11, "{e}");
        assert!(
            matches!(e, Error::Checksum { index: i, chunk, failure: ChecksumFailure::Mismatch { .. }, .. }
                if i == u64::from(index) && chunk == s.entry(index).unwrap().chunk_id),
            "{e:?}"
        );
        let mut dst = vec![0u8; 3 * 1024];
        let g = s.gather(&[0, u64::from(index), 2], &mut dst, 1024, &Serial).unwrap_err();
        assert!(matches!(g, Error::Checksum { index: i, .. } if i == u64::from(index)), "{g:?}");
        let offsets = [0u64, 1024];
        let g = s.gather_var(&[u64::from(index), 0], &mut dst, &offsets, &Serial).unwrap_err();
        assert_eq!(g.code(), -11);
        flip_payload_byte(&b, &s, index, 0);
    }
    // verify = never reads the damaged raw record's bytes as they are: what it is for.
    flip_payload_byte(&b, &s, 1, 3);
    let never = open(&b, Verify::Never);
    let r = never.read(1).unwrap();
    assert_ne!(r, model[1]);
    assert_eq!(r.len(), model[1].len());
    let v = tools::verify(&never, &Serial, &mut |_, _| {}).unwrap();
    assert_eq!((v.bad_count, v.bad[0].index), (1, 1), "verify checks checksums whatever the read mode");
    // Undamaged records are unaffected.
    for i in [0u64, 2, 6, 11] {
        assert_eq!(s.read(i).unwrap(), model[i as usize]);
    }
}

#[test]
fn foreign_appends_deletes_and_compacts_leave_unchecked_records_never_false_errors() {
    let (b, mut model) = store_with(&[
        Step::Append { first: 0, count: 10, codec: Codec::Flate },
        Step::Append { first: 10, count: 10, codec: Codec::Raw },
        Step::Sync,
    ]);
    let f = Foreign(&b);
    // loaderx appends two records, deletes three (one swap from the tail, one of its own
    // records, one from the middle), compacts, and appends again.
    for k in 0..2 {
        let r = record(99, k);
        f.append(&r);
        model.push(r);
    }
    for i in [3u32, 20, 7] {
        f.delete(i);
        model.swap_remove(i as usize);
    }
    f.compact();
    let r = record(99, 7);
    f.append(&r);
    model.push(r);

    let s = open(&b, Verify::Auto);
    assert_eq!(contents(&s), model, "no false checksum error after foreign writes");
    let unchecked = s.unchecked().unwrap();
    assert!(unchecked >= 3, "the foreign records at least: {unchecked}");
    assert_eq!(s.stats().unwrap().unchecked, unchecked);
    let v = tools::verify(&s, &Serial, &mut |_, _| {}).unwrap();
    assert_eq!(v.bad_count, 0, "{:?}", v.bad);
    assert_eq!(v.checked, model.len() as u32);
    // Records the foreign compact moved keep their checksum through the content check.
    assert!(v.checksummed > 0 && v.unchecked > 0, "{v:?}");
    // verify = always refuses what has no checksum.
    let always = open(&b, Verify::Always);
    let e = (0..model.len() as u64).find_map(|i| always.read(i).err()).expect("an unchecked record");
    assert!(matches!(e, Error::Checksum { failure: ChecksumFailure::Unchecked, .. }), "{e:?}");

    // seal checksums them again; the store is then strict again.
    let (s, mut w) = Store::open(b.clone(), opts()).unwrap();
    let sealed = s.seal(&mut w, &mut |_, _| {}).unwrap();
    assert_eq!((sealed.sealed, sealed.bad), (unchecked, 0));
    assert_eq!(s.unchecked().unwrap(), 0);
    drop((s, w));
    let always = open(&b, Verify::Always);
    assert_eq!(contents(&always), model);
    // ...and catches damage to what it sealed.
    flip_payload_byte(&b, &always, model.len() as u32 - 1, 0);
    assert_eq!(always.read(model.len() as u64 - 1).unwrap_err().code(), -11);
}

#[test]
fn zrecord_writes_after_foreign_ones_never_vouch_for_foreign_entries() {
    let (b, mut model) = store_with(&[Step::Append { first: 0, count: 8, codec: Codec::Raw }]);
    let f = Foreign(&b);
    f.delete(2);
    model.swap_remove(2);
    // zrecord appends and deletes after loaderx did: it must not start treating the slot
    // loaderx rewrote as damage.
    let (mut s, mut w) = Store::open(b.clone(), opts()).unwrap();
    let step = Step::Append { first: 50, count: 3, codec: Codec::Flate };
    run_step(&mut s, &mut w, SEED, &step).unwrap();
    model = apply_model(SEED, &model, &step);
    run_step(&mut s, &mut w, SEED, &Step::Delete(vec![0])).unwrap();
    model = apply_model(SEED, &model, &Step::Delete(vec![0]));
    run_step(&mut s, &mut w, SEED, &Step::Compact).unwrap();
    drop((s, w));
    let s = open(&b, Verify::Auto);
    assert_eq!(contents(&s), model);
    assert_eq!(tools::verify(&s, &Serial, &mut |_, _| {}).unwrap().bad_count, 0);
}

#[test]
fn a_damaged_table_entry_in_an_untouched_store_is_a_checksum_error() {
    let (b, model) = store_with(&[Step::Append { first: 0, count: 12, codec: Codec::Raw }]);
    let f = Foreign(&b);
    // Point record 4's entry at record 5's bytes when they have the same length: a raw read
    // of other well-formed bytes, which only the checksum can tell apart.
    let (e4, e5) = (f.entry(4), f.entry(5));
    let moved = RecordLoc { offset: e5.offset, chunk_id: e5.chunk_id, ..e4 };
    let fits = e5.phys_length >= e4.phys_length;
    if fits {
        f.set_entry(4, &moved);
    } else {
        f.set_entry(4, &RecordLoc { offset: e4.offset + 1, ..e4 });
    }
    let s = open(&b, Verify::Auto);
    let e = s.read(4).unwrap_err();
    assert!(matches!(e, Error::Checksum { index: 4, failure: ChecksumFailure::EntryChanged { .. }, .. }), "{e:?}");
    let v = tools::verify(&s, &Serial, &mut |_, _| {}).unwrap();
    assert_eq!((v.bad_count, v.bad[0].index), (1, 4));
    // seal does not bless it.
    let (s, mut w) = Store::open(b.clone(), opts()).unwrap();
    let sealed = s.seal(&mut w, &mut |_, _| {}).unwrap();
    assert_eq!((sealed.sealed, sealed.bad), (0, 1));
    assert_eq!(s.read(3).unwrap(), model[3]);
}

#[test]
fn a_store_without_the_side_file_reads_as_before_and_seal_creates_it() {
    let (b, model) = store_with(&[Step::Append { first: 0, count: 9, codec: Codec::Flate }]);
    // What a store written by loaderx alone looks like.
    b.remove_side_file(SUMS_FILE).unwrap();
    let s = open(&b, Verify::Auto);
    assert!(!s.has_checksums());
    assert_eq!(contents(&s), model);
    assert_eq!(s.unchecked().unwrap(), 9);
    let ro = Store::open(b.clone(), Options::read_only()).unwrap().0;
    assert_eq!(contents(&ro), model);
    assert!(b.file(SUMS_FILE).is_none(), "reading never creates the side file");
    // A zrecord append creates it: old records unchecked, new ones checked.
    let (s, mut w) = Store::open(b.clone(), opts()).unwrap();
    let r = record(SEED, 100);
    s.append(&mut w, &Batch::Fixed { src: &r, count: 1, item_len: r.len() }, Codec::Raw, &Serial).unwrap();
    assert!(s.has_checksums());
    assert_eq!(s.unchecked().unwrap(), 9);
    let sealed = s.seal(&mut w, &mut |_, _| {}).unwrap();
    assert_eq!((sealed.already, sealed.sealed, sealed.bad), (1, 9, 0));
    assert_eq!(s.unchecked().unwrap(), 0);
}

#[test]
fn a_damaged_side_file_costs_checksums_never_reads() {
    let (b, model) = store_with(&[Step::Append { first: 0, count: 6, codec: Codec::Flate }]);
    let sums = b.file(SUMS_FILE).unwrap();
    // A damaged slot: that record is unchecked. A damaged header: all are, until sealed.
    sums.write_at(64 + 32 * 2 + 20, &[0xFF]).unwrap();
    let s = open(&b, Verify::Auto);
    assert_eq!(s.unchecked().unwrap(), 1);
    assert_eq!(contents(&s), model);
    sums.write_at(0, b"XXXX").unwrap();
    let s = open(&b, Verify::Auto);
    assert!(!s.has_checksums());
    assert_eq!(contents(&s), model);
    let (s, mut w) = Store::open(b.clone(), opts()).unwrap();
    let sealed = s.seal(&mut w, &mut |_, _| {}).unwrap();
    assert_eq!((sealed.already, sealed.sealed), (5, 1), "intact slots survive a damaged header");
    assert_eq!(contents(&open(&b, Verify::Always)), model);
}
