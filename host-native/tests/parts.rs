//! A dataset written in parts (one per worker task) and committed once
//! (`zrecord::dataset::{finish_part, commit_local, commit_remote}`, which `zrecord.ray` drives):
//! locally and in object_store's in-memory store. The Python tests run the same through Ray
//! Data with workers that die, against a real S3-compatible server. Parts that separate
//! processes leave at the destination (`save_part`, `commit_saved`: `zrecord.write_part`)
//! are at the end.

mod common;

use common::ids;

use std::path::Path;
use std::sync::Arc;

use zrecord::dataset::{
    commit_local, commit_remote, commit_saved, finish_part, part_dir, save_part, write_tag, Part, PartsAt,
};
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
    // Each commit reads the listing once: since the first append the manifest keeps the
    // rows' identity, so no commit opens the dataset's stores for it. The loser reads
    // the listing again.
    assert_eq!(*rounds.arrived.lock().unwrap(), 3, "listing reads: one each, and the loser's again");
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

#[test]
fn parts_left_in_a_local_destination_commit_when_every_expected_task_finished() {
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("train");
    std::fs::create_dir(&dest).unwrap();
    write(&dest.join(part_dir(2)), 150..200, 100);
    write(&dest.join(part_dir(0)), 0..100, 100);
    // Task 1's writer died before its commit: a folder without dataset.json.
    std::fs::create_dir_all(dest.join(part_dir(1)).join("shard-000000")).unwrap();
    let err = commit_saved(PartsAt::Local(&dest), Some(&[0, 1, 2]), false).unwrap_err();
    assert!(err.to_string().contains("part 1 did not finish"), "{err}");
    std::fs::remove_dir_all(dest.join(part_dir(1))).unwrap();
    let err = commit_saved(PartsAt::Local(&dest), Some(&[0, 1, 2]), false).unwrap_err();
    assert!(err.to_string().contains("part(s) 1 were not written"), "{err}");
    let err = commit_saved(PartsAt::Local(&dest), Some(&[0]), false).unwrap_err();
    assert!(err.to_string().contains("part(s) 2 are there but were not expected"), "{err}");
    assert!(!dest.join("dataset.json").exists(), "nothing committed");

    write(&dest.join(part_dir(1)), 100..150, 100);
    let done = commit_saved(PartsAt::Local(&dest), Some(&[0, 1, 2]), false).unwrap();
    assert_eq!((done.tasks, done.samples), (vec![0, 1, 2], 200));
    assert_eq!(ids(&Dataset::open(&dest).unwrap()), (0..200).collect::<Vec<_>>());

    // A second job's part: refused without append (nothing moves), added with it.
    write(&dest.join(part_dir(0)), 200..230, 100);
    let err = commit_saved(PartsAt::Local(&dest), None, false).unwrap_err();
    assert!(err.to_string().contains("mode=\"append\""), "{err}");
    assert_eq!(commit_saved(PartsAt::Local(&dest), None, true).unwrap().samples, 30);
    assert_eq!(ids(&Dataset::open(&dest).unwrap()), (0..230).collect::<Vec<_>>());
    let err = commit_saved(PartsAt::Local(&dest), None, true).unwrap_err();
    assert!(err.to_string().contains("no part was written"), "{err}");
}

/// The objects in `store`, by name.
fn names(store: &object_store::memory::InMemory) -> Vec<String> {
    use futures::TryStreamExt;
    use object_store::ObjectStore;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let listed: Vec<_> = runtime.block_on(store.list(None).try_collect::<Vec<_>>()).unwrap();
    let mut out: Vec<String> = listed.into_iter().map(|m| m.location.to_string()).collect();
    out.sort();
    out
}

#[test]
fn parts_saved_in_an_object_store_commit_once_and_a_rerun_task_leaves_no_orphan() {
    let dir = tempfile::tempdir().unwrap();
    let inner = Arc::new(object_store::memory::InMemory::new());
    zrecord::remote::serve_memory("saved-parts", inner.clone());
    let url = "memory://saved-parts/ds";
    let remote = Remote::open(url, &[]).unwrap();
    for (task, range) in [(1u64, 100..180), (0, 0..100)] {
        let at = dir.path().join(format!("scratch-{task}"));
        write(&at, range, 60);
        save_part(&at, &remote, task).unwrap();
    }
    let first: Vec<String> = names(&inner).into_iter().filter(|n| n.starts_with("ds/shard-000001-")).collect();
    assert!(!first.is_empty());
    // Task 1 runs again with other samples (its first run was judged failed): its record is
    // replaced and the first run's shards are deleted.
    let again = dir.path().join("scratch-1b");
    write(&again, 100..170, 60);
    save_part(&again, &remote, 1).unwrap();
    let now = names(&inner);
    assert!(first.iter().all(|n| !now.contains(n)), "{now:?}");
    assert!(now.iter().any(|n| n == "ds/.zrecord-parts/part-000001.json"), "{now:?}");
    assert!(Dataset::open_remote(url, &[], zrecord::Verify::Auto).is_err(), "nothing listed yet");

    let err = commit_saved(PartsAt::Remote(&remote), Some(&[0, 1, 2]), false).unwrap_err();
    assert!(err.to_string().contains("part(s) 2 were not written"), "{err}");
    let done = commit_saved(PartsAt::Remote(&remote), Some(&[0, 1]), false).unwrap();
    assert_eq!((done.tasks, done.samples, done.earlier), (vec![0, 1], 170, vec![]));
    let far = Dataset::open_remote(url, &[], zrecord::Verify::Always).unwrap();
    assert_eq!(ids(&far), (0..170).collect::<Vec<_>>());
    assert!(!names(&inner).iter().any(|n| n.contains(".zrecord-parts")), "records removed");

    // An append whose commit stopped after the listing was replaced, before the records
    // went: run again, it finishes the clean-up and adds nothing twice.
    let at = dir.path().join("scratch-5");
    write(&at, 170..200, 60);
    let part = save_part(&at, &remote, 5).unwrap();
    assert_eq!(commit_remote(&remote, &[part], true).unwrap(), 30);
    let done = commit_saved(PartsAt::Remote(&remote), None, true).unwrap();
    assert_eq!((done.tasks, done.samples, done.earlier), (vec![], 0, vec![5]));
    assert!(!names(&inner).iter().any(|n| n.contains(".zrecord-parts")));
    let far = Dataset::open_remote(url, &[], zrecord::Verify::Always).unwrap();
    assert_eq!(ids(&far), (0..200).collect::<Vec<_>>());
}
