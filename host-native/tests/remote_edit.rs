//! Samples deleted from and fields dropped from a dataset in an object store
//! (`zrecord::dataset::{delete_remote, drop_field_remote}`), in object_store's in-memory
//! store: the rows and identity afterwards, no object left holding a deleted sample's bytes,
//! and a change that another writer's commit overtook changing nothing. The Python tests
//! run the same against a real S3-compatible server.

mod common;

use common::ids;

use std::path::Path;
use std::sync::Arc;

use futures::TryStreamExt;
use object_store::{ObjectStore, ObjectStoreExt};
use zrecord::dataset::{commit_remote, delete_remote, drop_field_remote, finish_part, write_tag};
use zrecord::remote::push::{pull, push};
use zrecord::remote::Remote;
use zrecord::{Codec, Column, Dataset, DatasetWriter, Field, FieldAdder, Verify, WriteOptions};

fn fields() -> Vec<Field> {
    vec![Field::fixed("id", "<i8", &[], Codec::Raw), Field::bytes("note", Codec::Raw)]
}

/// The note of sample `i`: a marker no other bytes of the dataset hold.
fn note(i: i64) -> Vec<u8> {
    format!("secret-note-{i:06}").into_bytes()
}

/// Writes samples `ids` as the dataset at `path`, `shard_records` to a shard.
fn write(path: &Path, ids: std::ops::Range<i64>, shard_records: u64) {
    let mut w = DatasetWriter::open(path, fields(), WriteOptions { shard_records, ..WriteOptions::default() }).unwrap();
    let id: Vec<u8> = ids.clone().flat_map(|i| i.to_le_bytes()).collect();
    let mut values = Vec::new();
    let mut offsets = vec![0u64];
    for i in ids {
        values.extend(note(i));
        offsets.push(values.len() as u64);
    }
    w.write(&[Column::Fixed(&id), Column::Ragged { values: &values, offsets: &offsets }]).unwrap();
    w.commit().unwrap();
}

/// Every object in `store`, whole.
fn objects(store: &object_store::memory::InMemory) -> Vec<(String, Vec<u8>)> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let metas: Vec<_> = store.list(None).try_collect().await.unwrap();
        let mut out = Vec::new();
        for m in metas {
            let bytes = store.get(&m.location).await.unwrap().bytes().await.unwrap();
            out.push((m.location.to_string(), bytes.to_vec()));
        }
        out
    })
}

fn holds(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn deleted_samples_leave_every_object_and_the_rest_keep_their_order() {
    let dir = tempfile::tempdir().unwrap();
    let inner = Arc::new(object_store::memory::InMemory::new());
    zrecord::remote::serve_memory("edit-delete", inner.clone());
    let url = "memory://edit-delete/ds";
    let remote = Remote::open(url, &[]).unwrap();
    write(&dir.path().join("ds"), 0..250, 100);
    push(&dir.path().join("ds"), &remote, &mut |_, _| {}).unwrap();
    let before = Dataset::open_remote(url, &[], Verify::Always).unwrap();

    // Out of range: refused, naming the index, before anything is written.
    let err = delete_remote(&remote, &[3, 250], &mut |_, _| {}).unwrap_err();
    assert!(err.to_string().contains("index 250 is out of range for a dataset of 250 samples"), "{err}");
    assert_eq!(ids(&Dataset::open_remote(url, &[], Verify::Auto).unwrap()), (0..250).collect::<Vec<_>>());

    // Two samples of the first shard, one of the second, and all of the third (200..250).
    let gone: Vec<i64> = [7, 99, 150].into_iter().chain(200..250).collect();
    let indices: Vec<u64> = gone.iter().rev().map(|&i| i as u64).chain([7]).collect();
    let mut reported = (0, 0);
    let done = delete_remote(&remote, &indices, &mut |d, t| reported = (d, t)).unwrap();
    assert_eq!((done.samples, done.shards, done.remaining), (53, 3, 197));
    assert_eq!(reported, (197 * 2, 197 * 2), "records copied, both fields");

    let far = Dataset::open_remote(url, &[], Verify::Always).unwrap();
    let kept: Vec<i64> = (0..250).filter(|i| !gone.contains(i)).collect();
    assert_eq!(ids(&far), kept);
    let (values, offsets) = far.gather_ragged(1, &[0, 7, 196]).unwrap();
    assert_eq!(&values[offsets[1] as usize..offsets[2] as usize], note(8).as_slice());
    assert_eq!(&values[offsets[2] as usize..], note(249 - 50).as_slice());

    // No object holds a deleted sample's note; the scan finds the kept ones.
    let all = objects(&inner);
    for i in &gone {
        if let Some((name, _)) = all.iter().find(|(_, bytes)| holds(bytes, &note(*i))) {
            panic!("{name} still holds deleted sample {i}'s bytes");
        }
    }
    for i in [0, 8, 151, 199] {
        assert!(all.iter().any(|(_, bytes)| holds(bytes, &note(i))), "kept sample {i} found");
    }
    // A reader opened before fails on a deleted object, naming it.
    let err = before.gather_ragged(1, &[7]).unwrap_err();
    assert!(err.to_string().contains("shard-000000"), "{err}");

    // Pulled, it is a local dataset of the same rows and identity.
    let copy = dir.path().join("copy");
    std::fs::create_dir(&copy).unwrap();
    pull(&remote, &copy, &mut |_, _| {}).unwrap();
    let local = Dataset::open(&copy).unwrap();
    assert_eq!(ids(&local), kept);
    assert_eq!(local.id().unwrap(), far.id().unwrap());
    assert_ne!(far.id().unwrap(), before.id().unwrap(), "the rows changed, so did their identity");

    // A dropped field leaves the listing and the store.
    assert_eq!(drop_field_remote(&remote, "note").unwrap().name, "note");
    let narrow = Dataset::open_remote(url, &[], Verify::Always).unwrap();
    assert_eq!(narrow.fields().len(), 1);
    assert_eq!(ids(&narrow), kept);
    assert_eq!(narrow.id().unwrap(), far.id().unwrap(), "a stream reads rows, not columns");
    assert!(objects(&inner).iter().all(|(name, _)| !name.contains("/note/")));
    let err = drop_field_remote(&remote, "id").unwrap_err();
    assert!(err.to_string().contains("only field"), "{err}");
    let err = drop_field_remote(&remote, "label").unwrap_err();
    assert!(err.to_string().contains("no field \"label\""), "{err}");
}

/// Deletes samples 3 and 60 through `held` (whose listing reads `rounds` holds) while an
/// append of samples `more` through `remote` lands after the delete read the listing and
/// before it is answered.
fn delete_overtaken_by_an_append(
    rounds: &common::Rounds,
    held: &str,
    remote: &Remote,
    scratch: &Path,
    more: std::ops::Range<i64>,
) -> Result<zrecord::dataset::Deleted, zrecord::dataset::DatasetError> {
    let arrived = *rounds.arrived.lock().unwrap();
    std::thread::scope(|scope| {
        let deleter = scope.spawn(|| delete_remote(&Remote::open(held, &[]).unwrap(), &[3, 60], &mut |_, _| {}));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while *rounds.arrived.lock().unwrap() == arrived {
            assert!(std::time::Instant::now() < deadline, "the delete never read the listing");
            std::thread::yield_now();
        }
        write(scratch, more.clone(), 50);
        let part = finish_part(scratch, Some(remote), 0, &write_tag()).unwrap();
        assert_eq!(commit_remote(remote, &[part], true).unwrap(), (more.end - more.start) as u64);
        rounds.open_up();
        deleter.join().unwrap()
    })
}

#[test]
fn a_delete_that_another_writer_overtook_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    // Two names for one store: through the second, reads of remote.json are held.
    let inner = Arc::new(object_store::memory::InMemory::new());
    zrecord::remote::serve_memory("edit-race", inner.clone());
    let url = "memory://edit-race/ds";
    let remote = Remote::open(url, &[]).unwrap();
    write(&dir.path().join("ds"), 0..120, 50);
    push(&dir.path().join("ds"), &remote, &mut |_, _| {}).unwrap();

    // The first append to a pushed dataset deletes the dataset.json the delete's listing
    // named: the delete reads the listing again and lands after the append.
    let rounds = Arc::new(common::Rounds::new(inner.clone(), "remote.json"));
    zrecord::remote::serve_memory("edit-race-first", rounds.clone());
    let done =
        delete_overtaken_by_an_append(&rounds, "memory://edit-race-first/ds", &remote, &dir.path().join("a"), 500..510)
            .unwrap();
    assert_eq!(done.remaining, 128);
    let want: Vec<i64> = (0..120).chain(500..510).filter(|&i| i != 3 && i != 60).collect();
    assert_eq!(ids(&Dataset::open_remote(url, &[], Verify::Always).unwrap()), want);

    // Now the listing holds the manifest: the delete works on what it read, and its
    // conditional put finds the append's listing there instead.
    let rounds = Arc::new(common::Rounds::new(inner.clone(), "remote.json"));
    zrecord::remote::serve_memory("edit-race-second", rounds.clone());
    let err = delete_overtaken_by_an_append(
        &rounds,
        "memory://edit-race-second/ds",
        &remote,
        &dir.path().join("b"),
        600..605,
    )
    .unwrap_err();
    assert!(matches!(err.source, zrecord::Error::Locked(_)), "{err}");
    assert!(err.to_string().contains("nothing was changed: run it again"), "{err}");
    let mut grown = want.clone();
    grown.extend(600..605);
    assert_eq!(ids(&Dataset::open_remote(url, &[], Verify::Always).unwrap()), grown);
    // Its copies are gone: only the listed objects (and nothing a delete uploaded) remain.
    let listing = zrecord::remote::push::read_listing(&remote).unwrap().unwrap();
    let listing = zrecord::remote::objects::Objects::from_json(&listing.0, url).unwrap();
    let mut stored: Vec<String> = objects(&inner).into_iter().map(|(name, _)| name).collect();
    stored.sort();
    let mut listed: Vec<String> = listing.objects.keys().map(|k| format!("ds/{k}")).collect();
    listed.push("ds/remote.json".into());
    listed.sort();
    assert_eq!(stored, listed);

    // Run again, it lands.
    delete_remote(&remote, &[3, 60], &mut |_, _| {}).unwrap();
    let again: Vec<i64> = grown.iter().copied().filter(|&i| i != want[3] && i != want[60]).collect();
    assert_eq!(ids(&Dataset::open_remote(url, &[], Verify::Always).unwrap()), again);
}

#[test]
fn a_field_added_in_an_object_store_goes_up_under_names_of_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let inner = Arc::new(object_store::memory::InMemory::new());
    zrecord::remote::serve_memory("edit-add", inner.clone());
    let url = "memory://edit-add/ds";
    let remote = Remote::open(url, &[]).unwrap();
    write(&dir.path().join("ds"), 0..130, 50);
    push(&dir.path().join("ds"), &remote, &mut |_, _| {}).unwrap();
    let before = Dataset::open_remote(url, &[], Verify::Always).unwrap();
    // Every object but the listing, and the manifest it replaces (the listing holds it).
    let untouched: Vec<(String, Vec<u8>)> =
        objects(&inner).into_iter().filter(|(k, _)| k != "ds/remote.json" && k != "ds/dataset.json").collect();

    let score = Field::fixed("score", "<f4", &[], Codec::Raw);
    let scores: Vec<u8> = (0..130).flat_map(|i| (i as f32 / 4.0).to_le_bytes()).collect();
    let add = |field: Field| FieldAdder::open_remote(&remote, field, WriteOptions::default()).unwrap();
    let mut adder = add(score.clone());
    assert_eq!(adder.len(), 130);
    adder.write(Column::Fixed(&scores[..70 * 4])).unwrap();
    // A second adder of the same field, started before the first commits: its stores go
    // up under its own names, and its commit finds the first's listing and changes nothing.
    let mut rival = add(score.clone());
    adder.write(Column::Fixed(&scores[70 * 4..])).unwrap();
    let grown = adder.commit().unwrap();
    rival.write(Column::Fixed(&vec![0u8; 130 * 4])).unwrap();
    let err = rival.commit().unwrap_err();
    assert!(matches!(err.source, zrecord::Error::Locked(_)), "{err}");

    let far = Dataset::open_remote(url, &[], Verify::Always).unwrap();
    assert_eq!(far.fields().len(), 3);
    let mut got = vec![0u8; 130 * 4];
    far.gather_fixed(2, &(0..130).collect::<Vec<_>>(), &mut got, None, false).unwrap();
    assert_eq!(got, scores);
    assert_eq!(grown.id().unwrap(), before.id().unwrap(), "a stream reads rows, not columns");
    assert_eq!(ids(&far), (0..130).collect::<Vec<_>>());
    // No object there before was written again, and every new one is the field's, stored
    // under `SHARD/score.TAG/` (the rival's were deleted).
    let now = objects(&inner);
    for (name, bytes) in &untouched {
        assert_eq!(now.iter().find(|(k, _)| k == name).map(|(_, b)| b), Some(bytes), "{name} kept");
    }
    let new: Vec<&String> = now
        .iter()
        .map(|(k, _)| k)
        .filter(|k| *k != "ds/remote.json" && !untouched.iter().any(|(u, _)| u == *k))
        .collect();
    assert!(!new.is_empty());
    for name in &new {
        let folder = name.split('/').nth(2).unwrap();
        assert!(folder.starts_with("score.") && folder.len() == "score.".len() + 16, "{name}");
    }
    assert_eq!(new.len(), 3 * 5, "3 shards, 5 files a store, the rival's gone: {new:?}");

    // Pulled, the field is at its own path; dropped, its objects go.
    let copy = dir.path().join("copy");
    std::fs::create_dir(&copy).unwrap();
    pull(&remote, &copy, &mut |_, _| {}).unwrap();
    assert!(copy.join("shard-000002/score").is_dir());
    let local = Dataset::open(&copy).unwrap();
    let mut pulled = vec![0u8; 130 * 4];
    local.gather_fixed(2, &(0..130).collect::<Vec<_>>(), &mut pulled, None, false).unwrap();
    assert_eq!(pulled, scores);
    drop_field_remote(&remote, "score").unwrap();
    assert!(objects(&inner).iter().all(|(k, _)| !k.contains("/score.")));
    // A bad field is refused before anything is written.
    let err = FieldAdder::open_remote(&remote, Field::fixed("id", "<i8", &[], Codec::Raw), WriteOptions::default())
        .err()
        .unwrap();
    assert!(err.to_string().contains("already has a field \"id\""), "{err}");
}

#[test]
fn datasets_in_an_object_store_concatenate_by_server_side_copies() {
    // zrecord.concat took local folders only; in an object store each object is copied by
    // the server under the new prefix (nothing comes down), and the listing comes last.
    let store = Arc::new(object_store::memory::InMemory::new());
    zrecord::remote::serve_memory("concat", store.clone());
    zrecord::remote::serve_memory("concat-other", Arc::new(object_store::memory::InMemory::new()));
    let dir = tempfile::tempdir().unwrap();
    write(&dir.path().join("a"), 0..300, 128);
    write(&dir.path().join("b"), 300..500, 128);
    let open = |url: &str| Remote::open(url, &[]).unwrap();
    push(&dir.path().join("a"), &open("memory://concat/a"), &mut |_, _| {}).unwrap();
    push(&dir.path().join("b"), &open("memory://concat/b"), &mut |_, _| {}).unwrap();
    // b gains a field-level change first: its listing holds keyed objects (version 2).
    delete_remote(&open("memory://concat/b"), &[299 - 100], &mut |_, _| {}).unwrap();

    let out = open("memory://concat/out");
    let sources = [open("memory://concat/a"), open("memory://concat/b")];
    let done = zrecord::dataset::concat_remote(&sources, &out).unwrap();
    let far = Dataset::open_remote("memory://concat/out", &[], Verify::Always).unwrap();
    let mut want: Vec<i64> = (0..500).collect();
    want.remove(300 + 199);
    assert_eq!(ids(&far), want);
    assert_eq!((done.samples, done.shards, done.linked), (499, 3 + 2, 0));
    assert!(done.copied >= 5 * 2 * 3, "{done:?}");
    // The new dataset holds its own objects: the sources can go.
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    for (name, _) in objects(&store) {
        if !name.starts_with("out/") {
            runtime.block_on(store.delete(&object_store::path::Path::from(name.as_str()))).unwrap();
        }
    }
    let again = Dataset::open_remote("memory://concat/out", &[], Verify::Always).unwrap();
    assert_eq!(ids(&again), want);

    let refused = zrecord::dataset::concat_remote(&[open("memory://concat/out")], &out).unwrap_err();
    assert!(refused.to_string().contains("a dataset is already at memory://concat/out"), "{refused}");
    let elsewhere = zrecord::dataset::concat_remote(&[open("memory://concat/out")], &open("memory://concat-other/x"));
    assert!(elsewhere.unwrap_err().to_string().contains("within one bucket"));
}
