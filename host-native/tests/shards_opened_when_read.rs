//! A local dataset opens its manifest only; each shard's stores open when a read first
//! needs them, and a loader opens them all when it starts. What that must never change:
//! the identity, the values, and what a reader opened before a change reads.

use std::path::Path;

use zrecord::{Codec, Column, Dataset, DatasetWriter, Field, WriteMode, WriteOptions};
use zrecord_core::stream::DatasetId;

fn fields() -> Vec<Field> {
    vec![Field::fixed("label", "<i8", &[], Codec::Raw), Field::ragged("tokens", "<u2", Codec::Flate)]
}

fn tokens(i: u64) -> Vec<u16> {
    (0..1 + i % 5).map(|k| (i * 3 + k) as u16).collect()
}

/// Appends samples `from..to` (one new shard per call, as every small append makes).
fn append(path: &Path, from: u64, to: u64) {
    let mut w = DatasetWriter::open(path, fields(), WriteOptions::default()).unwrap();
    let labels: Vec<u8> = (from..to).flat_map(|i| (i as i64).to_le_bytes()).collect();
    let mut values = Vec::new();
    let mut offsets = vec![0u64];
    for i in from..to {
        values.extend(tokens(i).iter().flat_map(|t| t.to_le_bytes()));
        offsets.push(values.len() as u64);
    }
    w.write(&[Column::Fixed(&labels), Column::Ragged { values: &values, offsets: &offsets }]).unwrap();
    w.commit().unwrap();
}

fn label(ds: &Dataset, i: u64) -> i64 {
    let mut out = [0u8; 8];
    ds.gather_fixed(0, &[i], &mut out, None, false).unwrap();
    i64::from_le_bytes(out)
}

/// The identity the stores give, computed from every store (as a dataset without a row
/// identity in its manifest does).
fn from_stores(ds: &Dataset) -> DatasetId {
    let generations: Vec<u64> = ds.stores().unwrap().iter().map(|s| s.generation().unwrap()).collect();
    DatasetId::of_stores(ds.len(), generations)
}

#[test]
fn appends_keep_the_identity_the_stores_give_without_opening_them() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ds");
    append(&path, 0, 10);
    let first = Dataset::open(&path).unwrap();
    assert!(first.manifest().unwrap().rows.is_none(), "a dataset never appended to keeps no row identity");
    assert_eq!(first.id().unwrap(), from_stores(&first));
    let mut before = vec![first.id().unwrap()];
    for k in 1..12 {
        append(&path, k * 10, k * 10 + 10);
        let ds = Dataset::open(&path).unwrap();
        // The manifest's identity is the one every store folded in order gives: states
        // saved by earlier builds (which folded the stores) resume, and a store's change
        // would still change it.
        assert!(ds.manifest().unwrap().rows.is_some());
        assert_eq!(ds.id().unwrap(), from_stores(&ds), "after {k} appends");
        assert_eq!(ds.grown_from(), before.as_slice(), "each earlier identity is one a state may resume from");
        before.push(ds.id().unwrap());
    }
    let ds = Dataset::open(&path).unwrap();
    assert_eq!(ds.shard_count(), 12);
    for i in (0..120).step_by(7) {
        assert_eq!(label(&ds, i), i as i64);
        let (values, _) = ds.gather_ragged(1, &[i]).unwrap();
        let want: Vec<u8> = tokens(i).iter().flat_map(|t| t.to_le_bytes()).collect();
        assert_eq!(values, want, "tokens of {i}");
    }
}

#[test]
fn a_reader_opened_before_a_compaction_reads_its_dataset_or_says_it_changed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ds");
    for k in 0..6 {
        append(&path, k * 10, k * 10 + 10);
    }
    let held = Dataset::open(&path).unwrap();
    held.open_all().unwrap(); // what a loader does when it starts
    let lazy = Dataset::open(&path).unwrap();
    assert_eq!(label(&lazy, 3), 3, "shard 0 opened by this read");
    let id = held.id().unwrap();

    let done = zrecord::dataset::compact_shards(&path, 1000, &mut |_, _| {}).unwrap();
    assert_eq!(Dataset::open(&path).unwrap().shard_count(), 1, "{done:?}");
    for k in 0..6 {
        assert!(!path.join(format!("shard-{k:06}")).exists(), "the compaction removed shard {k}");
    }
    // The handle that opened every store reads every sample as it was.
    for i in 0..60 {
        assert_eq!(label(&held, i), i as i64);
    }
    // The other reads what it opened; a shard it never opened is gone, and it says so
    // (never another shard's samples: shard names are never reused).
    assert_eq!(label(&lazy, 7), 7);
    let mut out = [0u8; 8];
    let e = lazy.gather_fixed(0, &[25], &mut out, None, false).unwrap_err();
    let text = e.to_string();
    assert!(text.contains("shard-000002") && text.contains("open the dataset again"), "{text}");
    // Opened again, the dataset is the compacted one, with the same identity.
    let again = Dataset::open(&path).unwrap();
    assert_eq!(again.id().unwrap(), id);
    assert_eq!(label(&again, 25), 25);
}

#[test]
fn an_overwrite_leaves_a_reader_that_opened_nothing_an_error_not_the_new_rows() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ds");
    append(&path, 0, 10);
    let old = Dataset::open(&path).unwrap();
    let options = WriteOptions { mode: WriteMode::Overwrite, ..WriteOptions::default() };
    let mut w = DatasetWriter::open(&path, fields(), options).unwrap();
    let labels: Vec<u8> = (100..110i64).flat_map(|i| i.to_le_bytes()).collect();
    let values: Vec<u8> = (0..10u16).flat_map(|t| t.to_le_bytes()).collect();
    let offsets: Vec<u64> = (0..=10u64).map(|k| k * 2).collect();
    w.write(&[Column::Fixed(&labels), Column::Ragged { values: &values, offsets: &offsets }]).unwrap();
    w.commit().unwrap();
    let mut out = [0u8; 8];
    let e = old.gather_fixed(0, &[0], &mut out, None, false).unwrap_err();
    assert!(e.to_string().contains("open the dataset again"), "{e}");
    assert_eq!(label(&Dataset::open(&path).unwrap(), 0), 100);
}
