//! A dataset written in parts (one per worker task) and committed once
//! (`zrecord::dataset::{finish_part, commit_local, commit_remote}`, which `zrecord.ray` drives):
//! locally and in object_store's in-memory store. The Python tests run the same through Ray
//! Data with workers that die, against a real S3-compatible server.

mod common;

use common::ids;

use std::path::Path;
use std::sync::Arc;

use zrecord::dataset::{commit_local, commit_remote, finish_part, part_dir, write_tag, Part};
use zrecord::remote::push::{pull, push, read_listing};
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
        parts.push(Part::from_json(&finish_part(&at, None, task, "").unwrap().to_json()).unwrap());
    }
    let ds = commit_local(&dest, &parts, WriteOptions::default()).unwrap();
    assert_eq!(ids(&ds), (0..300).collect::<Vec<_>>());
    assert_eq!(ds.shard_count(), 4);
    let left: Vec<_> = std::fs::read_dir(&dest).unwrap().flatten().map(|e| e.file_name()).collect();
    assert!(!left.iter().any(|n| n.to_string_lossy().starts_with(".zrecord-part-")), "{left:?}");

    // A second job appends; a part of other fields is refused naming its task, and nothing moves.
    let at = dest.join(part_dir(0));
    write(&at, 300..310, 100);
    let good = finish_part(&at, None, 0, "").unwrap();
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
        parts.push(finish_part(&at, Some(&remote), task, "").unwrap());
    }
    assert_eq!(parts[1].shards.iter().map(|s| s.dir.as_str()).collect::<Vec<_>>(), ["shard-000000", "shard-000000.1"]);
    // Task 1 runs again (Ray retried it): nothing is uploaded anew (the in-memory store
    // gives every put a new ETag, which the part records).
    let again = finish_part(&dir.path().join("scratch-1"), Some(&remote), 1, "").unwrap();
    assert_eq!(again, parts[0]);

    assert!(Dataset::open_remote("memory://parts/train", &[], zrecord::Verify::Auto).is_err(), "nothing listed yet");
    assert_eq!(commit_remote(&remote, &parts, false).unwrap(), 200);
    let far = Dataset::open_remote("memory://parts/train", &[], zrecord::Verify::Always).unwrap();
    assert_eq!(ids(&far), (0..200).collect::<Vec<_>>());
    let err = commit_remote(&remote, &parts, false).unwrap_err();
    assert!(err.to_string().contains("already there"), "{err}");
    let twice = vec![parts[0].clone(), parts[0].clone()];
    let err = commit_remote(&Remote::open("memory://parts/other", &[]).unwrap(), &twice, false).unwrap_err();
    assert!(err.to_string().contains("task 1 handed in two parts"), "{err}");
}

/// Samples `ids` written in `scratch` and uploaded to `remote` as task `task`'s part of an
/// append (its own write tag).
fn appended_part(scratch: &Path, remote: &Remote, task: u64, ids: std::ops::Range<i64>) -> Part {
    write(scratch, ids, 40);
    finish_part(scratch, Some(remote), task, &write_tag()).unwrap()
}

#[test]
fn appends_to_a_pushed_dataset_land_whole_even_when_two_race() {
    let dir = tempfile::tempdir().unwrap();
    // Two names for one in-memory store: through the second, reads of remote.json are held
    // in rounds (below, until both racers have read it).
    let inner = Arc::new(object_store::memory::InMemory::new());
    zrecord::remote::serve_memory("parts-append", inner.clone());
    let rounds = Arc::new(common::Rounds::new(inner, "remote.json"));
    zrecord::remote::serve_memory("parts-race", rounds.clone());
    let url = "memory://parts-append/ds";
    let remote = Remote::open(url, &[]).unwrap();
    write(&dir.path().join("ds"), 0..100, 60);
    push(&dir.path().join("ds"), &remote, &mut |_, _| {}).unwrap();
    let before = Dataset::open_remote(url, &[], zrecord::Verify::Auto).unwrap();

    // Without append the commit refuses, and says how to append.
    let part = appended_part(&dir.path().join("a"), &remote, 0, 100..150);
    let err = commit_remote(&remote, std::slice::from_ref(&part), false).unwrap_err();
    assert!(err.to_string().contains("mode=\"append\""), "{err}");
    assert_eq!(commit_remote(&remote, &[part], true).unwrap(), 50);
    let after = Dataset::open_remote(url, &[], zrecord::Verify::Always).unwrap();
    assert_eq!(ids(&after), (0..150).collect::<Vec<_>>());
    // The listing holds the manifest now; the pushed dataset.json is gone, and a reader
    // opened before the append reads what it opened.
    let (listing, _, _) = read_listing(&remote).unwrap().unwrap();
    let listing = zrecord::remote::objects::Objects::from_json(&listing, url).unwrap();
    assert_eq!(listing.version, 2);
    assert!(!listing.objects.contains_key("dataset.json"));
    assert!(zrecord::remote::push::read_object(&remote, "dataset.json").unwrap().is_none());
    assert_eq!(ids(&before), (0..100).collect::<Vec<_>>());

    // Two writers append at once: both read the same listing (each read is held until
    // both have come), so one's conditional put fails; it reads again and lands after.
    let commits: Vec<u64> = std::thread::scope(|scope| {
        let racers: Vec<_> = [(150i64, "b"), (1000, "c")]
            .into_iter()
            .map(|(start, name)| {
                let remote = Remote::open("memory://parts-race/ds", &[]).unwrap();
                let scratch = dir.path().join(name);
                scope.spawn(move || {
                    let part = appended_part(&scratch, &remote, 0, start..start + 70);
                    commit_remote(&remote, &[part], true).unwrap()
                })
            })
            .collect();
        rounds.release_when(2, "both appenders read the listing");
        rounds.open_up();
        racers.into_iter().map(|r| r.join().unwrap()).collect()
    });
    assert_eq!(commits, [70, 70]);
    // Each commit reads the listing, and opens the dataset it lists for its identity
    // (reading the listing again); the loser does both twice.
    assert_eq!(*rounds.arrived.lock().unwrap(), 6, "listing reads: two each, and the loser's two again");
    let far = Dataset::open_remote(url, &[], zrecord::Verify::Always).unwrap();
    let mut got = ids(&far);
    assert_eq!(&got[..150], (0..150).collect::<Vec<_>>().as_slice(), "the rows before keep their places");
    got.sort_unstable();
    let mut want: Vec<i64> = (0..220).chain(1000..1070).collect();
    want.sort_unstable();
    assert_eq!(got, want);

    // Pulled, the grown dataset is a local dataset of the same rows and identity.
    let copy = dir.path().join("copy");
    std::fs::create_dir(&copy).unwrap();
    pull(&remote, &copy, &mut |_, _| {}).unwrap();
    let local = Dataset::open(&copy).unwrap();
    assert_eq!(ids(&local), ids(&far));
    assert_eq!(local.id().unwrap(), far.id().unwrap());

    // Samples of other fields are refused, with the difference named.
    let other = dir.path().join("other");
    let mut w =
        DatasetWriter::open(&other, vec![Field::fixed("id", "<i4", &[], Codec::Raw)], WriteOptions::default()).unwrap();
    w.write(&[Column::Fixed(&7i32.to_le_bytes())]).unwrap();
    w.commit().unwrap();
    let odd = finish_part(&other, Some(&remote), 0, &write_tag()).unwrap();
    let err = commit_remote(&remote, &[odd], true).unwrap_err();
    assert!(err.to_string().contains("missing tokens; id is <i8[] here, <i4[] there"), "{err}");
    assert_eq!(Dataset::open_remote(url, &[], zrecord::Verify::Auto).unwrap().len(), 290);
}

#[test]
fn an_append_to_an_empty_prefix_creates_the_dataset() {
    let dir = tempfile::tempdir().unwrap();
    let remote = Remote::open("memory://parts-new/ds", &[]).unwrap();
    let part = appended_part(&dir.path().join("a"), &remote, 3, 0..90);
    assert_eq!(commit_remote(&remote, &[part], true).unwrap(), 90);
    let far = Dataset::open_remote("memory://parts-new/ds", &[], zrecord::Verify::Always).unwrap();
    assert_eq!(ids(&far), (0..90).collect::<Vec<_>>());
}
