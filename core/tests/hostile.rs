//! Hostile stores, table-driven: each damage to a small valid store must surface as a typed
//! error naming what is wrong (at open, or when the damaged record is read, verified or
//! inspected), in bounded time and memory, and never as a panic or a read outside a buffer.

use zrecord_app::tools;
use zrecord_core::engine::{Batch, Options, Store, Verify};
use zrecord_core::error::{ChecksumFailure, DecodeError, Error, FormatError};
use zrecord_core::format::{entry_offset, FileLayout, Header, RecordLoc, HEADER_LEN, MAX_RECORDS, META_FILE, META_LEN};
use zrecord_core::io::mem::MemBackend;
use zrecord_core::io::{Backend, Serial, StorageFile};
use zrecord_core::Codec;

const CAPACITY: u64 = 1024;
const N: u32 = 12;

fn record(i: u32) -> Vec<u8> {
    let len = 200 + 37 * i as usize;
    if i.is_multiple_of(2) {
        (0..len).map(|k| (k / 13) as u8 ^ i as u8).collect()
    } else {
        let mut x = u64::from(i + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }
}

/// 12 records, even ones flate, odd ones raw, over several chunks of 1 KiB.
fn good_store() -> MemBackend {
    good_store_in(FileLayout::Sparse)
}

fn good_store_in(layout: FileLayout) -> MemBackend {
    let b = MemBackend::new();
    let (s, mut w) =
        Store::open(b.clone(), Options { chunk_capacity: CAPACITY, layout, ..Options::default() }).unwrap();
    for i in 0..N {
        let r = record(i);
        s.append(&mut w, &Batch::Fixed { src: &r, count: 1, item_len: r.len() }, Codec::Flate, &Serial).unwrap();
    }
    assert!(s.header().tail_chunk >= 2);
    b
}

fn meta(b: &MemBackend) -> zrecord_core::io::mem::MemFile {
    b.file(META_FILE).unwrap()
}

fn header(b: &MemBackend) -> Header {
    let mut raw = [0u8; HEADER_LEN];
    meta(b).read_at(0, &mut raw).unwrap();
    Header::decode(&raw).unwrap()
}

fn set_header(b: &MemBackend, f: impl FnOnce(&mut [u8; 16])) {
    let mut raw = [0u8; HEADER_LEN];
    meta(b).read_at(0, &mut raw).unwrap();
    f(&mut raw);
    meta(b).write_at(0, &raw).unwrap();
}

fn entry(b: &MemBackend, i: u32) -> RecordLoc {
    let mut raw = [0u8; 16];
    meta(b).read_at(entry_offset(i), &mut raw).unwrap();
    RecordLoc::decode(&raw)
}

fn set_entry(b: &MemBackend, i: u32, f: impl FnOnce(&mut RecordLoc)) {
    let mut e = entry(b, i);
    f(&mut e);
    meta(b).write_at(entry_offset(i), &e.encode()).unwrap();
}

fn open_ro(b: &MemBackend) -> Result<Store<MemBackend>, Error> {
    Store::open(b.clone(), Options::read_only()).map(|(s, _)| s)
}

/// Reads `index` every way a client can: read, gather, lengths, plus verify and inspect of
/// the whole store. Returns the read's error.
fn read_every_way(s: &Store<MemBackend>, index: u32) -> Error {
    let err = s.read(u64::from(index)).expect_err("damaged record read back");
    let mut dst = vec![0xAAu8; 2 << 20];
    let g = s.gather(&[u64::from(index)], &mut dst, 1 << 20, &Serial).expect_err("damaged record gathered");
    assert_eq!(g.code(), err.code(), "gather and read disagree: {g} / {err}");
    // The slot past the record's window is untouched.
    assert!(dst[1 << 20..].iter().all(|&b| b == 0xAA), "gather wrote past its slot");
    let v = tools::verify(s, &Serial, &mut |_, _| {}).unwrap();
    assert!(v.bad_count >= 1, "verify missed the damage ({err})");
    let _ = tools::inspect(s).unwrap();
    for i in 0..s.len() {
        if i != index {
            assert_eq!(s.read(u64::from(i)).unwrap(), record(i), "undamaged record {i}");
        }
    }
    err
}

macro_rules! assert_err {
    ($e:expr, $pat:pat) => {{
        let e = $e;
        assert!(matches!(e, $pat), "{}: got {e:?} ({e})", stringify!($pat));
        assert!(!e.to_string().is_empty());
    }};
}

#[test]
fn bad_headers_fail_at_open() {
    let b = good_store();
    set_header(&b, |h| h[0] = b'X');
    assert_err!(open_ro(&b).err().unwrap(), Error::Format(FormatError::BadMagic { .. }));
    // Writable opens refuse it too: the store holds records, so it is not re-initialised.
    assert_err!(Store::open(b.clone(), Options::default()).err().unwrap(), Error::Format(FormatError::BadMagic { .. }));

    let b = good_store();
    set_header(&b, |h| h[4] = 3);
    assert_err!(open_ro(&b).err().unwrap(), Error::Format(FormatError::UnsupportedVersion { found: 3 }));

    let b = good_store();
    set_header(&b, |h| h[12..16].copy_from_slice(&(MAX_RECORDS + 1).to_le_bytes()));
    assert_err!(open_ro(&b).err().unwrap(), Error::Format(FormatError::LengthTooLarge { .. }));

    let b = good_store();
    set_header(&b, |h| h[6..8].copy_from_slice(&4096u16.to_le_bytes()));
    assert_err!(open_ro(&b).err().unwrap(), Error::Format(FormatError::TailChunkTooLarge { tail_chunk: 4096 }));

    let b = good_store();
    set_header(&b, |h| h[6..8].copy_from_slice(&9u16.to_le_bytes()));
    assert_err!(open_ro(&b).err().unwrap(), Error::Format(FormatError::MissingChunk { chunk: 9 }));
}

#[test]
fn truncated_meta_fails_at_open() {
    for len in [0, 15, 16, 17, entry_offset(N / 2), META_LEN / 2, META_LEN - 1, META_LEN + 1] {
        let b = good_store();
        meta(&b).set_len(len).unwrap();
        assert_err!(open_ro(&b).err().unwrap(), Error::Format(FormatError::MetaSize { .. }));
        if len >= 32 {
            // Writable opens too: the bytes that remain show records were stored.
            assert_err!(
                Store::open(b.clone(), Options::default()).err().unwrap(),
                Error::Format(FormatError::MetaSize { .. })
            );
        }
    }
    let b = MemBackend::new();
    assert_err!(open_ro(&b).err().unwrap(), Error::Format(FormatError::MissingMeta));
}

#[test]
fn a_dense_table_cut_short_fails_at_open() {
    let b = good_store_in(FileLayout::Dense);
    assert_eq!(meta(&b).len().unwrap(), entry_offset(N));
    assert_eq!(open_ro(&b).unwrap().len(), N);
    for len in [0, 15] {
        let b = good_store_in(FileLayout::Dense);
        meta(&b).set_len(len).unwrap();
        assert_err!(open_ro(&b).err().unwrap(), Error::Format(FormatError::MetaSize { .. }));
    }
    for len in [16, 17, entry_offset(N / 2), entry_offset(N) - 1, META_LEN + 1] {
        let b = good_store_in(FileLayout::Dense);
        meta(&b).set_len(len).unwrap();
        assert_err!(open_ro(&b).err().unwrap(), Error::Format(FormatError::DenseMetaSize { .. }));
        assert_err!(
            Store::open(b.clone(), Options::default()).err().unwrap(),
            Error::Format(FormatError::DenseMetaSize { .. })
        );
    }
    // Longer than its entries is allowed: entries past the length are garbage.
    let b = good_store_in(FileLayout::Dense);
    meta(&b).set_len(entry_offset(N) + 160).unwrap();
    assert_eq!(open_ro(&b).unwrap().len(), N);
}

#[test]
fn length_past_the_written_table_reads_as_typed_errors() {
    let b = good_store();
    set_header(&b, |h| h[12..16].copy_from_slice(&MAX_RECORDS.to_le_bytes()));
    let s = open_ro(&b).unwrap();
    assert_eq!(s.len(), MAX_RECORDS);
    for i in [N, N + 1, MAX_RECORDS / 2, MAX_RECORDS - 1] {
        assert_err!(s.read(u64::from(i)).unwrap_err(), Error::Decode { source: DecodeError::EmptyRecord, .. });
    }
    assert_eq!(s.read(3).unwrap(), record(3));
    assert_err!(s.read(u64::from(MAX_RECORDS)).unwrap_err(), Error::IndexOutOfRange { .. });
    assert_err!(s.read(u64::MAX).unwrap_err(), Error::IndexOutOfRange { .. });
}

#[test]
fn damaged_entries_are_typed_errors_on_every_read_path() {
    type Damage = fn(&mut RecordLoc, &Header);
    type Expect = fn(&Error) -> bool;
    let cases: Vec<(&str, u32, Damage, Expect)> = vec![
        (
            "unknown codec",
            2,
            |e, _| e.codec = 7,
            |e| matches!(e, Error::Decode { source: DecodeError::UnknownCodec { tag: 7 }, .. }),
        ),
        (
            "raw with phys != logic",
            1,
            |e, _| e.logic_length += 1,
            |e| matches!(e, Error::Decode { source: DecodeError::RawLengthMismatch { .. }, .. }),
        ),
        (
            "logic over 1 MiB",
            2,
            |e, _| e.logic_length = (1 << 20) + 1,
            |e| matches!(e, Error::Decode { source: DecodeError::LengthOverLimit { .. }, .. }),
        ),
        (
            "phys over 1 MiB",
            2,
            |e, _| e.phys_length = u32::MAX,
            |e| matches!(e, Error::Decode { source: DecodeError::LengthOverLimit { .. }, .. }),
        ),
        (
            "zero lengths",
            3,
            |e, _| (e.logic_length, e.phys_length) = (0, 0),
            |e| matches!(e, Error::Decode { source: DecodeError::EmptyRecord, .. }),
        ),
        (
            "offset + phys overflows u32",
            3,
            |e, _| e.offset = u32::MAX - 10,
            |e| matches!(e, Error::Decode { source: DecodeError::OutOfBounds { .. }, .. }),
        ),
        (
            "past the frontier",
            5,
            |e, h| (e.chunk_id, e.offset) = (h.tail_chunk, h.tail_offset),
            |e| matches!(e, Error::Decode { source: DecodeError::OutOfBounds { .. }, .. }),
        ),
        (
            "chunk past the tail",
            5,
            |e, h| e.chunk_id = h.tail_chunk + 1,
            |e| matches!(e, Error::Decode { source: DecodeError::OutOfBounds { .. }, .. }),
        ),
        (
            "flate expands past logic_length (bomb)",
            0,
            |e, _| e.logic_length = 10,
            |e| matches!(e, Error::Decode { source: DecodeError::TooLong { logic: 10 }, .. }),
        ),
        (
            "flate stops short",
            0,
            |e, _| e.logic_length += 1000,
            |e| matches!(e, Error::Decode { source: DecodeError::TooShort { .. }, .. }),
        ),
        (
            "flate stream cut",
            2,
            |e, _| e.phys_length /= 2,
            |e| matches!(e, Error::Decode { source: DecodeError::TooShort { .. } | DecodeError::Corrupt, .. }),
        ),
        (
            "raw read as flate",
            1,
            |e, _| e.codec = 1,
            |e| {
                matches!(
                    e,
                    Error::Decode {
                        source: DecodeError::Corrupt | DecodeError::TooShort { .. } | DecodeError::TooLong { .. },
                        ..
                    }
                )
            },
        ),
    ];
    for (name, index, damage, expect) in cases {
        let b = good_store();
        let h = header(&b);
        set_entry(&b, index, |e| damage(e, &h));
        // Without checksums, the entry checks and the codec catch each damage.
        let opts = Options { verify: Verify::Never, ..Options::read_only() };
        let s = Store::open(b.clone(), opts).unwrap_or_else(|e| panic!("{name}: open failed: {e}")).0;
        let err = read_every_way(&s, index);
        assert!(expect(&err), "{name}: got {err:?}");
        assert_eq!(err.code(), -7, "{name}");
        // With them (the default), an entry that still passes its checks but is not the one
        // checksummed, in a table nobody else wrote, fails its checksum first.
        let s = open_ro(&b).unwrap_or_else(|e| panic!("{name}: open failed: {e}"));
        let err = read_every_way(&s, index);
        match err {
            Error::Checksum { index: i, failure: ChecksumFailure::EntryChanged { .. }, .. } => {
                assert_eq!(i, u64::from(index), "{name}")
            }
            e => assert!(expect(&e), "{name}: got {e:?}"),
        }
    }
}

#[test]
fn missing_and_short_chunk_files_are_typed_errors() {
    // A chunk that is not the tail goes missing: its records fail with "missing chunk".
    let b = good_store();
    let victim = (0..N).find(|&i| entry(&b, i).chunk_id == 0).unwrap();
    b.remove_chunk(0).unwrap();
    let s = open_ro(&b).unwrap();
    let err = s.read(u64::from(victim)).unwrap_err();
    assert_err!(err, Error::Format(FormatError::MissingChunk { chunk: 0 }));
    let v = tools::verify(&s, &Serial, &mut |_, _| {}).unwrap();
    assert!(v.bad_count >= 1);

    // The tail chunk cut short of the frontier: records past its end fail as out of bounds.
    let b = good_store();
    let h = header(&b);
    let last = N - 1;
    assert_eq!(entry(&b, last).chunk_id, h.tail_chunk);
    b.file(&format!("{}.zr", h.tail_chunk)).unwrap().set_len(u64::from(entry(&b, last).offset) + 1).unwrap();
    let s = open_ro(&b).unwrap();
    let err = read_every_way(&s, last);
    assert_err!(err, Error::Decode { source: DecodeError::OutOfBounds { .. }, .. });

    // The tail chunk file itself missing fails at open.
    let b = good_store();
    b.remove_chunk(h.tail_chunk).unwrap();
    assert_err!(open_ro(&b).err().unwrap(), Error::Format(FormatError::MissingChunk { .. }));
}

#[test]
fn a_forged_journal_is_ignored_unless_it_matches() {
    let b = good_store();
    // Garbage and a truncated journal: dropped, store unchanged.
    for junk in [b"ZRDJ\x01\x00garbage".to_vec(), vec![0u8; 3], vec![0xFF; 64]] {
        b.write_side_file("delete.zrj", &junk).unwrap();
        let (s, _w) = Store::open(b.clone(), Options { chunk_capacity: CAPACITY, ..Options::default() }).unwrap();
        assert_eq!(s.len(), N);
        assert!(b.read_side_file("delete.zrj").unwrap().is_none(), "stale journal kept");
    }
}

/// A decompression bomb: every table entry points at the same small DEFLATE payload, so a
/// store of a few KiB claims far more decoded bytes than its chunks could hold. `verify` and
/// `export` refuse it before they decode a record (on 2^24 entries over one 4.6 KB payload
/// of 1 MiB of zeros, `zr export` started writing 16 TiB); `inspect` reports it.
#[test]
fn overlapping_entries_are_refused_before_any_record_is_read() {
    let b = MemBackend::new();
    let (s, mut w) = Store::open(b.clone(), Options::default()).unwrap();
    let zeros = vec![0u8; 1 << 20];
    s.append(&mut w, &Batch::Fixed { src: &zeros, count: 1, item_len: zeros.len() }, Codec::Flate, &Serial).unwrap();
    tools::schema_for_append(&s, "|u1", &[1 << 20], Codec::Flate).unwrap();
    drop((s, w));
    let bomb: u32 = 4096;
    let e0 = entry(&b, 0);
    assert!(e0.phys_length < 8192, "one MiB of zeros deflates to a few KiB: {e0:?}");
    let mut table = Vec::new();
    for _ in 0..bomb {
        table.extend_from_slice(&e0.encode());
    }
    meta(&b).write_at(entry_offset(0), &table).unwrap();
    set_header(&b, |h| h[12..16].copy_from_slice(&bomb.to_le_bytes()));
    let s = open_ro(&b).unwrap();
    let impossible = |e: &Error| matches!(e, Error::Format(FormatError::ImpossibleTable { chunk: 0, .. }));
    let err = tools::verify(&s, &Serial, &mut |_, _| {}).unwrap_err();
    assert!(impossible(&err), "{err}");
    let out = zrecord_core::io::mem::MemFile::default();
    let mut decoded = 0u64;
    let err = tools::export(&s, &out, 64 << 20, &Serial, &mut |d, _| decoded = d).unwrap_err();
    assert!(impossible(&err), "{err}");
    assert_eq!((decoded, out.len().unwrap()), (0, 0), "nothing decoded or written before the refusal");
    let report = tools::inspect(&s).unwrap();
    assert!(report.problems.iter().any(|p| p.contains("table entries overlap")), "{:?}", report.problems);
}

#[test]
fn a_layout_change_over_a_damaged_table_changes_nothing() {
    let b = good_store();
    set_entry(&b, 5, |e| e.codec = 9);
    let (mut s, mut w) = Store::open(b.clone(), Options::default()).unwrap();
    assert_err!(s.set_layout(&mut w, FileLayout::Dense).unwrap_err(), Error::Decode { index: 5, .. });
    assert_eq!(s.layout(), FileLayout::Sparse);
    drop((s, w));
    assert_eq!(meta(&b).len().unwrap(), META_LEN);
    assert_eq!(header(&b), open_ro(&b).unwrap().header());
    assert_eq!(open_ro(&b).unwrap().layout(), FileLayout::Sparse);
}
