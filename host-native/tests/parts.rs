//! A dataset written in parts (one per worker task) and committed once
//! (`zrecord::dataset::{finish_part, commit_local, commit_remote}`, which `zrecord.ray` drives):
//! locally and in object_store's in-memory store. The Python tests run the same through Ray
//! Data with workers that die, against a real S3-compatible server.

use std::path::Path;

use zrecord::dataset::{commit_local, commit_remote, finish_part, part_dir, Part};
use zrecord::remote::Remote;
use zrecord::{Codec, Column, Dataset, DatasetWriter, Field, WriteOptions};

fn fields() -> Vec<Field> {
    vec![Field::fixed("id", "<i8", &[], Codec::Raw), Field::ragged("tokens", "<u2", Codec::Flate)]
}

/// Writes samples `ids` as the dataset at `path`.
fn write(path: &Path, ids: std::ops::Range<i64>, shard_records: u64) {
    let mut w = DatasetWriter::open(path, fields(), WriteOptions { shard_records, ..WriteOptions::default() }).unwrap();
    let id: Vec<u8> = ids.clone().flat_map(|i| i.to_le_bytes()).collect();
    let mut values = Vec::new();
    let mut offsets = vec![0u64];
    for i in ids {
        for k in 0..1 + i % 5 {
            values.extend(((i + k) as u16).to_le_bytes());
        }
        offsets.push(values.len() as u64);
    }
    w.write(&[Column::Fixed(&id), Column::Ragged { values: &values, offsets: &offsets }]).unwrap();
    w.commit().unwrap();
}

fn ids(ds: &Dataset) -> Vec<i64> {
    let n = ds.len();
    let idx: Vec<u64> = (0..n).collect();
    let mut out = vec![0u8; n as usize * 8];
    ds.gather_fixed(0, &idx, &mut out, None, false).unwrap();
    out.chunks(8).map(|c| i64::from_le_bytes(c.try_into().unwrap())).collect()
}

#[test]
fn local_parts_commit_in_task_order_once() {
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("train");
    std::fs::create_dir(&dest).unwrap();
    let mut parts = Vec::new();
    // Handed in out of order, as tasks finish; task 1 spans two shards.
    for (task, range) in [(2u64, 250..300), (0, 0..100), (1, 100..250)] {
        let at = dest.join(part_dir(task));
        write(&at, range, 100);
        parts.push(Part::from_json(&finish_part(&at, None, task).unwrap().to_json()).unwrap());
    }
    let ds = commit_local(&dest, &parts, WriteOptions::default()).unwrap();
    assert_eq!(ids(&ds), (0..300).collect::<Vec<_>>());
    assert_eq!(ds.shard_count(), 4);
    let left: Vec<_> = std::fs::read_dir(&dest).unwrap().flatten().map(|e| e.file_name()).collect();
    assert!(!left.iter().any(|n| n.to_string_lossy().starts_with(".zrecord-part-")), "{left:?}");

    // A second job appends; a part of other fields is refused naming its task, and nothing moves.
    let at = dest.join(part_dir(0));
    write(&at, 300..310, 100);
    let good = finish_part(&at, None, 0).unwrap();
    let mut bad = good.clone();
    bad.task = 1;
    bad.fields[0] = Field::fixed("id", "<i4", &[], Codec::Raw);
    let err = commit_local(&dest, &[good.clone(), bad], WriteOptions::default()).unwrap_err();
    assert!(err.to_string().contains("task 1's fields [id: <i4[], tokens: ragged <u2] differ from task 0's"), "{err}");
    assert_eq!(Dataset::open(&dest).unwrap().len(), 300);
    assert!(at.join("shard-000000").is_dir(), "the part is where the task left it");

    // A commit that fails after moving a part in moves it back (the second part is missing).
    let mut ghost = good.clone();
    ghost.task = 7;
    ghost.dir = Some(part_dir(7));
    assert!(commit_local(&dest, &[good.clone(), ghost], WriteOptions::default()).is_err());
    assert!(at.join("shard-000000").is_dir(), "moved back");
    assert_eq!(Dataset::open(&dest).unwrap().len(), 300);

    let ds = commit_local(&dest, &[good], WriteOptions::default()).unwrap();
    assert_eq!(ids(&ds), (0..310).collect::<Vec<_>>());
}

#[test]
fn uploaded_parts_commit_once_and_a_retried_task_sends_nothing_new() {
    let dir = tempfile::tempdir().unwrap();
    let remote = Remote::open("memory://parts/train", &[]).unwrap();
    let mut parts = Vec::new();
    for (task, range) in [(1u64, 120..200), (0, 0..120)] {
        let at = dir.path().join(format!("scratch-{task}"));
        write(&at, range, 100);
        parts.push(finish_part(&at, Some(&remote), task).unwrap());
    }
    assert_eq!(parts[1].shards.iter().map(|s| s.dir.as_str()).collect::<Vec<_>>(), ["shard-000000", "shard-000000.1"]);
    // Task 1 runs again (Ray retried it): nothing is uploaded anew (the in-memory store
    // gives every put a new ETag, which the part records).
    let again = finish_part(&dir.path().join("scratch-1"), Some(&remote), 1).unwrap();
    assert_eq!(again, parts[0]);

    assert!(Dataset::open_remote("memory://parts/train", &[], zrecord::Verify::Auto).is_err(), "nothing listed yet");
    assert_eq!(commit_remote(&remote, &parts).unwrap(), 200);
    let far = Dataset::open_remote("memory://parts/train", &[], zrecord::Verify::Always).unwrap();
    assert_eq!(ids(&far), (0..200).collect::<Vec<_>>());
    let err = commit_remote(&remote, &parts).unwrap_err();
    assert!(err.to_string().contains("already there"), "{err}");
    let twice = vec![parts[0].clone(), parts[0].clone()];
    let err = commit_remote(&Remote::open("memory://parts/other", &[]).unwrap(), &twice).unwrap_err();
    assert!(err.to_string().contains("task 1 handed in two parts"), "{err}");
}
