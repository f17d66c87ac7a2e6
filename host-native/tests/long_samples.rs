//! Samples longer than a record (1 MiB): a ragged, bytes or string sample of any length
//! spans several records of its store, transparently to every read, and survives deletes,
//! added and dropped fields, appends and concatenation.

use std::path::Path;

use zrecord::{Codec, Column, Dataset, DatasetWriter, Field, WriteOptions};

const MIB: u64 = 1 << 20;

/// Sample `i`'s tokens: short for most, 600,000 for sample 3 and 2.5 MiB worth for 8 (the
/// last piece then a few bytes), exactly one record (512 Ki tokens) for 5.
fn doc_len(i: u64) -> u64 {
    match i {
        3 => 600_000,
        8 => (5 * MIB / 4) + 3,
        5 => MIB / 2,
        _ => 1 + i % 5,
    }
}
fn doc(i: u64) -> Vec<u16> {
    (0..doc_len(i)).map(|k| (k.wrapping_mul(2654435761) ^ i) as u16).collect()
}
/// Sample `i`'s caption: 3 MiB of text for sample 6, a few letters for the rest.
fn caption(i: u64) -> String {
    if i == 6 {
        (0..3 * MIB).map(|k| char::from(b'a' + (k % 26) as u8)).collect()
    } else {
        format!("caption {i}")
    }
}

fn fields() -> Vec<Field> {
    vec![
        Field::fixed("label", "<i8", &[], Codec::Raw),
        Field::ragged("tokens", "<u2", Codec::Flate),
        Field::string("caption", Codec::Zstd),
    ]
}

fn write(path: &Path, from: u64, to: u64, shard_records: u64) -> Dataset {
    let mut w = DatasetWriter::open(path, fields(), WriteOptions { shard_records, ..WriteOptions::default() }).unwrap();
    for i in from..to {
        let label = (i as i64).to_le_bytes();
        let tokens: Vec<u8> = doc(i).iter().flat_map(|t| t.to_le_bytes()).collect();
        let text = caption(i);
        w.write(&[
            Column::Fixed(&label),
            Column::Ragged { values: &tokens, offsets: &[0, tokens.len() as u64] },
            Column::Ragged { values: text.as_bytes(), offsets: &[0, text.len() as u64] },
        ])
        .unwrap();
    }
    w.commit().unwrap()
}

fn tokens_of(ds: &Dataset, indices: &[u64]) -> Vec<Vec<u16>> {
    let (values, offsets) = ds.gather_ragged(1, indices).unwrap();
    offsets
        .windows(2)
        .map(|w| {
            values[w[0] as usize..w[1] as usize].chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])).collect()
        })
        .collect()
}

fn check_all(ds: &Dataset, samples: &[u64]) {
    let indices: Vec<u64> = (0..samples.len() as u64).collect();
    let got = tokens_of(ds, &indices);
    for (k, &i) in samples.iter().enumerate() {
        assert_eq!(got[k], doc(i), "sample {k} (written as {i})");
    }
    let (text, offsets) = ds.gather_ragged(2, &indices).unwrap();
    for (k, &i) in samples.iter().enumerate() {
        assert_eq!(&text[offsets[k] as usize..offsets[k + 1] as usize], caption(i).as_bytes(), "caption {k}");
    }
    let mut lens = vec![0u64; indices.len()];
    ds.byte_lengths(1, &indices, &mut lens).unwrap();
    assert_eq!(lens, samples.iter().map(|&i| 2 * doc_len(i)).collect::<Vec<_>>());
}

#[test]
fn long_samples_round_trip_through_every_read() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("long");
    // Shards of 4: samples 3 (shard 0) and 5..8 (shard 1) and 8 (shard 2) are long or full.
    let ds = write(&path, 0, 10, 4);
    check_all(&ds, &(0..10).collect::<Vec<_>>());
    let text = std::fs::read_to_string(path.join("dataset.json")).unwrap();
    assert!(text.contains("\"version\": 5") && text.contains("\"long\""), "{text}");
    let m = ds.manifest().unwrap();
    assert_eq!(m.shards[0].long, ["tokens"]);
    assert_eq!(m.shards[1].long, ["caption"], "sample 5 is exactly one record: not long");
    assert_eq!(m.shards[2].long, ["tokens"]);
    // No scratch file is left beside the stores.
    for shard in &m.shards {
        for entry in std::fs::read_dir(path.join(&shard.dir)).unwrap() {
            let name = entry.unwrap().file_name();
            assert!(!name.to_string_lossy().starts_with('.'), "{name:?} left in {}", shard.dir);
        }
    }

    // Out of order, repeated, across shards; the loader's offsets gather too.
    let picked = [8u64, 3, 0, 8, 6, 3];
    let got = tokens_of(&ds, &picked);
    for (k, &i) in picked.iter().enumerate() {
        assert_eq!(got[k], doc(i));
    }

    // Pieces of a long document across its records' boundaries, as shuffled packed rows
    // read them.
    let whole: Vec<u8> = doc(8).iter().flat_map(|t| t.to_le_bytes()).collect();
    let mut scratch = Vec::new();
    for (from, len) in [(0u64, 10usize), (MIB - 6, 12), (MIB - 2, MIB as usize + 4), (whole.len() as u64 - 4, 4)] {
        let mut out = vec![0u8; len];
        ds.read_piece(1, 8, from, &mut out, &mut scratch).unwrap();
        assert_eq!(out, whole[from as usize..from as usize + len], "bytes {from}..+{len}");
    }
    let mut out = vec![0u8; 8];
    assert!(ds.read_piece(1, 8, whole.len() as u64 - 4, &mut out, &mut scratch).is_err());

    // Every record of every store passes its checksum; reopening reads the same.
    drop(ds);
    let ds = Dataset::open(&path).unwrap();
    check_all(&ds, &(0..10).collect::<Vec<_>>());
    let report = ds.verify_stores(&mut |_, _| {}).unwrap();
    assert!(report.iter().all(|r| r.report.bad_count == 0), "a store fails its verification");
}

#[test]
fn long_samples_survive_deletes_field_changes_appends_and_concat() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("long");
    write(&path, 0, 10, 4);
    // An append: its shard holds the long samples it brings.
    let ds = write(&path, 10, 14, 8);
    assert_eq!(ds.len(), 14);

    // Deleting a long sample and samples around another renumbers the long index.
    zrecord::dataset::delete_samples(&path, &[2, 6, 7], &mut |_, _| {}).unwrap();
    let kept: Vec<u64> = (0..14).filter(|i| ![2, 6, 7].contains(i)).collect();
    let ds = Dataset::open(&path).unwrap();
    check_all(&ds, &kept);
    // Sample 6's 3 MiB caption is gone, so is the shard's long listing of caption.
    assert!(ds.manifest().unwrap().shards.iter().all(|s| !s.long.contains(&"caption".to_string())));

    // A new field with a long value, then a field dropped.
    let mut adder =
        zrecord::FieldAdder::open(&path, Field::bytes("blob", Codec::Raw), WriteOptions::default()).unwrap();
    let blob = |k: u64| -> Vec<u8> { vec![(k % 251) as u8; if k == 1 { (2 * MIB + 17) as usize } else { 3 }] };
    for k in 0..kept.len() as u64 {
        let b = blob(k);
        adder.write(Column::Ragged { values: &b, offsets: &[0, b.len() as u64] }).unwrap();
    }
    let ds = adder.commit().unwrap();
    let (values, offsets) = ds.gather_ragged(3, &(0..kept.len() as u64).collect::<Vec<_>>()).unwrap();
    for k in 0..kept.len() {
        assert_eq!(&values[offsets[k] as usize..offsets[k + 1] as usize], blob(k as u64).as_slice(), "blob {k}");
    }
    check_all(&ds, &kept);
    drop(ds);
    zrecord::drop_field(&path, "tokens").unwrap();
    let ds = Dataset::open(&path).unwrap();
    assert!(ds.manifest().unwrap().shards.iter().all(|s| !s.long.contains(&"tokens".to_string())));
    let (values, offsets) = ds.gather_ragged(2, &[1]).unwrap();
    assert_eq!(&values[offsets[0] as usize..offsets[1] as usize], blob(1).as_slice());

    // Concatenated: the shards keep their long stores.
    let other = dir.path().join("other");
    write(&other, 0, 5, 8);
    let joined = dir.path().join("joined");
    zrecord::dataset::concat(&[other.clone(), other.clone()], &joined).unwrap();
    let ds = Dataset::open(&joined).unwrap();
    let got = tokens_of(&ds, &[3, 8]);
    assert_eq!((got[0].clone(), got[1].clone()), (doc(3), doc(3)));
}

#[test]
fn a_ten_million_token_document_is_one_sample() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big");
    let n = 10_000_000u64;
    let tokens: Vec<u8> = (0..n).flat_map(|k| ((k * 7 + k / 65536) as u32).to_le_bytes()).collect();
    let mut w =
        DatasetWriter::open(&path, vec![Field::ragged("tokens", "<u4", Codec::Raw)], WriteOptions::default()).unwrap();
    let values = [&tokens[..], &[1, 0, 0, 0]].concat();
    w.write(&[Column::Ragged { values: &values, offsets: &[0, tokens.len() as u64, values.len() as u64] }]).unwrap();
    let ds = w.commit().unwrap();
    assert_eq!(ds.len(), 2);
    let (got, offsets) = ds.gather_ragged(0, &[0, 1]).unwrap();
    assert_eq!(offsets, [0, 4 * n, 4 * n + 4]);
    assert!(got[..4 * n as usize] == tokens[..], "the document reads back whole");
    // 40 MB in 1 MiB pieces: the store holds 2 samples, 38 continuations and the index.
    assert_eq!(ds.store(0, 0).unwrap().len(), 2 + 38 + 1);
}

#[test]
fn a_pushed_dataset_reads_its_long_samples_from_the_object_store() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("long");
    let local = write(&path, 0, 10, 4);
    let remote = zrecord::remote::Remote::open("memory://long/ds", &[]).unwrap();
    zrecord::remote::push::push(&path, &remote, &mut |_, _| {}).unwrap();
    let far = Dataset::open_remote("memory://long/ds", &[], zrecord::Verify::Auto).unwrap();
    let picked = [8u64, 3, 0, 6, 9];
    for f in 1..3 {
        assert_eq!(far.gather_ragged(f, &picked).unwrap(), local.gather_ragged(f, &picked).unwrap(), "field {f}");
    }
    far.will_read(&picked);
    let mut out = vec![0u8; 100];
    let mut scratch = Vec::new();
    far.read_piece(1, 8, (1 << 20) - 50, &mut out, &mut scratch).unwrap();
    let whole: Vec<u8> = doc(8).iter().flat_map(|t| t.to_le_bytes()).collect();
    assert_eq!(out, whole[(1 << 20) - 50..(1 << 20) + 50]);
}
