//! Pushed datasets read from an object store (object_store's in-memory store here; the
//! Python tests use a real S3-compatible server): the same samples and batches as the local
//! dataset, dense uploads, resumable pushes, and objects rewritten under a reader refused.

mod common;

use std::path::Path;
use std::sync::Arc;

use zrecord::dataset::RemoteOptions;
use zrecord::remote::push::push;
use zrecord::remote::Remote;
use zrecord::{
    Codec, Column, Dataset, DatasetWriter, Field, Loader, LoaderOptions, Mode, Source, Stream, WriteOptions,
};

/// A dataset of one raw field `x` of `n` records of `record` bytes, each record different.
fn write_records(path: &Path, n: u64, record: u64) {
    let fields = vec![Field::fixed("x", "|u1", &[record], Codec::Raw)];
    let mut w = DatasetWriter::open(path, fields, WriteOptions::default()).unwrap();
    let data: Vec<u8> = (0..n * record).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
    w.write(&[Column::Fixed(&data)]).unwrap();
    w.commit().unwrap();
}

/// A dataset of `n` records of `record` bytes written in a new directory (as `ds`) and
/// pushed to `url`.
fn pushed_records(url: &str, n: u64, record: u64) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    write_records(&dir.path().join("ds"), n, record);
    push(&dir.path().join("ds"), &Remote::open(url, &[]).unwrap(), &mut |_, _| {}).unwrap();
    dir
}

/// A dataset of `n` samples in shards of 500: a raw `image` of `record` bytes, each one
/// different, and its `label` (`<i8`, the sample's index).
fn write_images_and_labels(path: &Path, n: u64, record: u64) -> Dataset {
    let fields =
        vec![Field::fixed("image", "|u1", &[record], Codec::Raw), Field::fixed("label", "<i8", &[], Codec::Raw)];
    let mut w =
        DatasetWriter::open(path, fields, WriteOptions { shard_records: 500, ..WriteOptions::default() }).unwrap();
    let images: Vec<u8> = (0..n * record).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
    let labels: Vec<u8> = (0..n).flat_map(|i| (i as i64).to_le_bytes()).collect();
    w.write(&[Column::Fixed(&images), Column::Fixed(&labels)]).unwrap();
    w.commit().unwrap()
}

fn write(path: &Path, n: u64) -> Dataset {
    let fields = vec![
        Field::fixed("image", "|u1", &[4, 8], Codec::Flate),
        Field::fixed("label", "<i8", &[], Codec::Raw),
        Field::ragged("tokens", "<u2", Codec::Flate),
    ];
    let mut w =
        DatasetWriter::open(path, fields, WriteOptions { shard_records: 300, ..WriteOptions::default() }).unwrap();
    let images: Vec<u8> = (0..n).flat_map(|i| vec![(i % 251) as u8; 32]).collect();
    let labels: Vec<u8> = (0..n).flat_map(|i| (i as i64).to_le_bytes()).collect();
    let mut values = Vec::new();
    let mut offsets = vec![0u64];
    for i in 0..n {
        for k in 0..1 + i % 9 {
            values.extend(((i + k) as u16).to_le_bytes());
        }
        offsets.push(values.len() as u64);
    }
    w.write(&[Column::Fixed(&images), Column::Fixed(&labels), Column::Ragged { values: &values, offsets: &offsets }])
        .unwrap();
    w.commit().unwrap()
}

/// Pushes the dataset at `path` to a fresh in-memory store as `memory://NAME-plain/ds` and
/// serves the same store through a [`common::Rounds`] (holding every read) as
/// `memory://NAME/ds`.
fn pushed_in_rounds(name: &str, path: &Path) -> Arc<common::Rounds> {
    let inner = Arc::new(object_store::memory::InMemory::new());
    zrecord::remote::serve_memory(&format!("{name}-plain"), inner.clone());
    let rounds = Arc::new(common::Rounds::new(inner, ""));
    zrecord::remote::serve_memory(name, rounds.clone());
    let plain = Remote::open(&format!("memory://{name}-plain/ds"), &[]).unwrap();
    push(path, &plain, &mut |_, _| {}).unwrap();
    rounds
}

fn batches(ds: Arc<Dataset>, steps: usize) -> Vec<Vec<Vec<u8>>> {
    let source = Source::dataset(ds).unwrap();
    let stream = Stream::new(source.id(), Mode::Shuffle, 3, 64).unwrap();
    let loader =
        Loader::new(stream, vec![source], LoaderOptions { num_workers: 2, ..LoaderOptions::default() }).unwrap();
    (0..steps).map(|_| loader.next().unwrap().unwrap().fields).collect()
}

#[test]
fn a_pushed_dataset_reads_as_the_local_one() {
    let dir = tempfile::tempdir().unwrap();
    let local = write(&dir.path().join("ds"), 1000);
    let remote = Remote::open("memory://reads/ds", &[]).unwrap();
    let pushed = push(&dir.path().join("ds"), &remote, &mut |_, _| {}).unwrap();
    assert_eq!(pushed.kind, "dataset");
    assert_eq!(pushed.uploaded, pushed.files);
    // A dataset's stores are dense: the files are their bytes, and so is the upload.
    assert!(pushed.stored < 1 << 20, "{pushed:?}");
    assert_eq!(pushed.apparent, pushed.stored, "{pushed:?}");

    let far = Dataset::open_remote("memory://reads/ds", &[], zrecord::Verify::Auto).unwrap();
    assert_eq!(far.len(), local.len());
    assert_eq!(far.shard_count(), 4);
    for f in 0..3 {
        let idx: Vec<u64> = (0..1000).rev().step_by(7).collect();
        assert_eq!(far.gather_ragged(f, &idx).unwrap(), local.gather_ragged(f, &idx).unwrap(), "field {f}");
    }
    let stats = far.remote_stats().unwrap();
    assert!(stats.requests > 0 && stats.bytes > 0, "{stats:?}");
    // The loader reads the same batches, with the same identity (a saved state carries over).
    let local = Arc::new(local);
    let far = Arc::new(far);
    assert_eq!(local.id().unwrap(), far.id().unwrap());
    assert_eq!(batches(local, 10), batches(far, 10));
}

#[test]
fn a_second_push_uploads_only_what_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    write(&dir.path().join("ds"), 500);
    let remote = Remote::open("memory://again/ds", &[]).unwrap();
    let first = push(&dir.path().join("ds"), &remote, &mut |_, _| {}).unwrap();
    let second = push(&dir.path().join("ds"), &remote, &mut |_, _| {}).unwrap();
    assert_eq!((second.files, second.uploaded, second.bytes), (first.files, 0, 0));
    Dataset::open_remote("memory://again/ds", &[], zrecord::Verify::Auto).unwrap();
}

#[test]
fn a_prefix_without_its_listing_is_not_a_dataset() {
    let e = Dataset::open_remote("memory://nothing/here", &[], zrecord::Verify::Auto).err().unwrap();
    assert!(e.to_string().contains("nothing is stored under this prefix"), "{e}");
    let e = Remote::open("memory://x/y", &[("aws_acess_key_id".into(), "k".into())]);
    assert!(e.is_ok(), "memory stores take no options");
    let e = Remote::open("s3://bucket/x", &[("aws_acess_key_id".into(), "k".into())]).err().unwrap();
    assert!(e.to_string().contains("\"aws_acess_key_id\""), "{e}");
}

#[test]
fn an_object_rewritten_under_a_reader_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    write(&dir.path().join("ds"), 400);
    let remote = Remote::open("memory://rewrite/ds", &[]).unwrap();
    push(&dir.path().join("ds"), &remote, &mut |_, _| {}).unwrap();
    let far = Dataset::open_remote("memory://rewrite/ds", &[], zrecord::Verify::Auto).unwrap();
    far.gather_ragged(2, &[0]).unwrap();
    // Someone rewrites one chunk of the pushed dataset (same bytes, new version).
    let other = Remote::open("memory://rewrite/ds", &[]).unwrap();
    let same = std::fs::read(dir.path().join("ds/shard-000001/tokens/0.zr")).unwrap();
    other.put("shard-000001/tokens/0.zr", same).unwrap();
    let e = far.gather_ragged(2, &[350]).err().unwrap();
    let text = e.to_string();
    assert!(text.contains("changed after the listing recorded it"), "{text}");
    assert!(text.contains("shard-000001/tokens/0.zr"), "{text}");
}

#[test]
fn a_manifest_rewritten_after_the_push_is_refused_at_open() {
    // Opening reads the manifest beside the listing, before the listing pins it: those
    // bytes count only if they are the ones the push recorded.
    let dir = tempfile::tempdir().unwrap();
    write(&dir.path().join("ds"), 400);
    let remote = Remote::open("memory://remanifest/ds", &[]).unwrap();
    push(&dir.path().join("ds"), &remote, &mut |_, _| {}).unwrap();
    let manifest = std::fs::read(dir.path().join("ds/dataset.json")).unwrap();
    let text = String::from_utf8(manifest).unwrap();
    let fewer = text.replacen("\"records\": 100", "\"records\": 99", 1);
    assert_ne!(fewer, text, "the test's manifest edit found nothing to change");
    remote.put("dataset.json", fewer.into_bytes()).unwrap();
    let e = Dataset::open_remote("memory://remanifest/ds", &[], zrecord::Verify::Auto).err().unwrap();
    let text = e.to_string();
    assert!(text.contains("changed after the listing recorded it"), "{text}");
    assert!(text.contains("dataset.json"), "{text}");
}

/// Bytes fetched per SHUFFLE epoch, after the first, with a cache of half the dataset: the
/// loader's plan (evict what the stream needs furthest ahead) against the oldest-first rule
/// the cache falls back to (which, over shuffled epochs, behaves as an LRU does).
#[test]
fn a_planned_cache_fetches_about_half_the_dataset_per_epoch() {
    let dir = tempfile::tempdir().unwrap();
    let n = 1600u64;
    let record = 32 << 10;
    write_records(&dir.path().join("ds"), n, record);
    let total = n * record;
    let mut per_epoch = Vec::new();
    for planned in [true, false] {
        let url = format!("memory://planned-{planned}/ds");
        push(&dir.path().join("ds"), &Remote::open(&url, &[]).unwrap(), &mut |_, _| {}).unwrap();
        let far = Arc::new(Dataset::open_remote(&url, &[], zrecord::Verify::Auto).unwrap());
        far.cache().unwrap().set_limit(total / 2);
        let source = Source::dataset(far.clone()).unwrap();
        let stream = Stream::new(source.id(), Mode::Shuffle, 8, 40).unwrap();
        let steps = stream.steps_per_epoch().unwrap();
        let loader = Loader::new(
            stream,
            vec![source],
            LoaderOptions { num_workers: 2, prefetch: 2, ..LoaderOptions::default() },
        )
        .unwrap();
        if !planned {
            far.cache().unwrap().set_plan(None);
        }
        let mut fetched = Vec::new();
        for _ in 0..3 {
            let before = far.remote_stats().unwrap().bytes;
            for _ in 0..steps {
                loader.next().unwrap().unwrap();
            }
            fetched.push((far.remote_stats().unwrap().bytes - before) as f64 / total as f64);
        }
        loader.close();
        assert!(far.cache().unwrap().held() <= total / 2 + 4 * 40 * record, "over budget");
        per_epoch.push(fetched);
    }
    let (planned, oldest_first) = (&per_epoch[0], &per_epoch[1]);
    eprintln!("fetched per epoch, of the dataset: planned {planned:?}, oldest first {oldest_first:?}");
    assert!(planned[0] >= 0.99, "the first epoch reads everything once: {planned:?}");
    // The optimum is 0.5 (half the records are in the cache when they come round); what
    // neighbouring ranges merged into one request bring along adds some (the merge gap is
    // measured, and under load the in-memory store's round trips look longer: 0.57-0.65
    // here beside other jobs). The bench holds the 0.6x target; this holds the plan.
    for e in 1..3 {
        assert!(planned[e] <= 0.7, "planned epoch {e}: {:.2}x the dataset", planned[e]);
        assert!(planned[e] <= oldest_first[e] - 0.15, "planned {planned:?} vs oldest first {oldest_first:?}");
        assert!(oldest_first[e] >= 0.75, "oldest-first epoch {e}: {:.2}x the dataset", oldest_first[e]);
    }
}

/// Every batch of one SHUFFLE epoch of `far`, and the record bytes fetched meanwhile.
/// A store that answers at memory speed makes the measured merge gap its 4 MiB cap: merged
/// requests must still fit the cache, or every batch of random records fetches whole 16 MiB
/// spans that evict each other (4-12x the dataset per epoch before the bound).
#[test]
fn merged_requests_fit_a_small_cache() {
    let dir = tempfile::tempdir().unwrap();
    let (n, record) = (4000u64, 12u64 << 10);
    write_records(&dir.path().join("ds"), n, record);
    let total = n * record;
    push(&dir.path().join("ds"), &Remote::open("memory://small-cache/ds", &[]).unwrap(), &mut |_, _| {}).unwrap();
    let far = Arc::new(Dataset::open_remote("memory://small-cache/ds", &[], zrecord::Verify::Auto).unwrap());
    far.cache().unwrap().set_limit(total / 2);
    let source = Source::dataset(far.clone()).unwrap();
    let stream = Stream::new(source.id(), Mode::Shuffle, 3, 256).unwrap();
    let steps = stream.steps_per_epoch().unwrap();
    let loader =
        Loader::new(stream, vec![source], LoaderOptions { num_workers: 2, ..LoaderOptions::default() }).unwrap();
    for _ in 0..steps {
        loader.next().unwrap().unwrap();
    }
    loader.close();
    let fetched = far.remote_stats().unwrap().bytes as f64 / total as f64;
    eprintln!("one epoch fetched {fetched:.2}x the dataset");
    // What stays in a cache while batches are in flight depends on timing: 30 runs alone
    // gave 1.23-1.50x, and one of 40 beside a CI run 1.60x (over the 1.6 this held before,
    // 2026-12-04). Unbounded spans gave 4-12x.
    assert!(fetched <= 2.0, "one epoch fetched {fetched:.2}x the dataset through a cache of half of it");
}

fn epoch(far: &Arc<Dataset>) -> (Vec<Vec<Vec<u8>>>, u64) {
    let source = Source::dataset(far.clone()).unwrap();
    let stream = Stream::new(source.id(), Mode::Shuffle, 4, 50).unwrap();
    let steps = stream.steps_per_epoch().unwrap() as usize;
    let loader =
        Loader::new(stream, vec![source], LoaderOptions { num_workers: 2, ..LoaderOptions::default() }).unwrap();
    let before = far.remote_stats().map_or(0, |c| c.bytes);
    let out = (0..steps).map(|_| loader.next().unwrap().unwrap().fields).collect();
    loader.close();
    (out, far.remote_stats().map_or(0, |c| c.bytes) - before)
}

#[test]
fn a_cache_directory_serves_the_next_run_and_never_wrong_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let local = write(&dir.path().join("ds"), 1200);
    let url = "memory://disk-cache/ds";
    push(&dir.path().join("ds"), &Remote::open(url, &[]).unwrap(), &mut |_, _| {}).unwrap();
    let cache_dir = dir.path().join("cache");
    let opts =
        |cache_bytes| RemoteOptions { cache_bytes, cache_dir: Some(cache_dir.clone()), ..RemoteOptions::default() };
    let open = || Arc::new(Dataset::open_remote_with(url, &[], opts(None)).unwrap());
    let expected = epoch(&Arc::new(local)).0;

    let first = open();
    let (batches, fetched) = epoch(&first);
    assert_eq!(batches, expected);
    assert!(fetched > 0);
    // Shared: another open of the directory while this one lives (as a DataLoader worker
    // would) reads what the first fetched, from disk.
    let beside = open();
    assert_eq!(epoch(&beside).0, expected);
    let stats = beside.remote_stats().unwrap();
    assert_eq!(stats.bytes, 0, "{stats:?}");
    drop(beside);
    // A directory of the user's own files is not taken over.
    std::fs::write(dir.path().join("notes.txt"), "mine").unwrap();
    let foreign = RemoteOptions { cache_dir: Some(dir.path().to_path_buf()), ..RemoteOptions::default() };
    let err = Dataset::open_remote_with(url, &[], foreign).err().unwrap();
    assert!(err.to_string().contains("not a zrecord cache directory"), "{err}");
    drop(first);

    // The next run reads its records and metadata from disk: nothing over the network but
    // the listing.
    let second = open();
    let (batches, _) = epoch(&second);
    assert_eq!(batches, expected);
    let fetched = second.remote_stats().unwrap().bytes;
    assert_eq!(fetched, 0, "a warm cache directory still fetched {fetched} bytes");
    let stats = second.remote_stats().unwrap();
    assert!(stats.disk_hits > 0 && stats.disk_bytes > 0, "{stats:?}");
    drop(second);

    // Damaged cache files (every data file's bytes flipped) are misses, fetched again.
    for entry in std::fs::read_dir(&cache_dir).unwrap().flatten() {
        let path = entry.path();
        if path.extension().is_some_and(|e| e == "data") {
            let mut bytes = std::fs::read(&path).unwrap();
            bytes.iter_mut().for_each(|b| *b ^= 0x5a);
            std::fs::write(&path, bytes).unwrap();
        }
    }
    let third = open();
    let (batches, fetched) = epoch(&third);
    assert_eq!(batches, expected, "a damaged cache file must never hand out its bytes");
    assert!(fetched > 0);
    drop(third);

    // A small budget is kept, on disk too (dropped ranges are holes).
    std::fs::remove_dir_all(&cache_dir).unwrap();
    let far = Arc::new(Dataset::open_remote_with(url, &[], opts(Some(20_000))).unwrap());
    let (batches, _) = epoch(&far);
    assert_eq!(batches, expected);
    let disk = far.cache().unwrap().disk().unwrap();
    assert!(disk.held() <= 20_000, "{} bytes held", disk.held());
    use std::os::unix::fs::MetadataExt;
    let allocated: u64 = std::fs::read_dir(&cache_dir)
        .unwrap()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "data"))
        .map(|e| e.metadata().unwrap().blocks() * 512)
        .sum();
    // Record data within the budget; metadata besides: 24 tables and checksum files of 4 KiB
    // here, each on disk in whole blocks.
    assert!(allocated <= 20_000 + 64 * 4096, "{allocated} bytes allocated in the cache directory");
}

#[test]
fn batches_ahead_are_in_flight_while_a_far_store_answers() {
    // 20 ms before every GET (object_store's ThrottledStore): a batch of 64 random 4 KiB
    // records needs about 60 requests. One worker reading one batch at a time has at most
    // one batch's requests in flight; the read-ahead sends later batches' too. Throughput
    // is the point (109 batches/s on a quiet machine where one batch per round trip would
    // be 50; release with two workers 300-333/s, 0 ms 2,000-2,250/s), but it moves with
    // the machine's load (46-74/s in a debug build beside a full test run), so the test
    // holds the cause: requests of several batches in flight at once. The cache holds half
    // the dataset, so records are fetched one by one (a cache that holds it all fetches
    // whole spans: the next test).
    let (n, record) = (8000u64, 4096u64);
    let _dir = pushed_records("memory://far/ds", n, record);
    let mut runs = Vec::new();
    for url in ["memory://far/ds", "memory://far/ds?latency_ms=20"] {
        let half = RemoteOptions { cache_bytes: Some(n * record / 2), ..RemoteOptions::default() };
        let far = Arc::new(Dataset::open_remote_with(url, &[], half).unwrap());
        let source = Source::dataset(far.clone()).unwrap();
        let stream = Stream::new(source.id(), Mode::Shuffle, 1, 64).unwrap();
        let loader =
            Loader::new(stream, vec![source], LoaderOptions { num_workers: 1, ..LoaderOptions::default() }).unwrap();
        let mut batches = vec![loader.next().unwrap().unwrap().fields];
        let began = std::time::Instant::now();
        for _ in 0..100 {
            batches.push(loader.next().unwrap().unwrap().fields);
        }
        let rate = 100.0 / began.elapsed().as_secs_f64();
        loader.close();
        let counts = far.remote_stats().unwrap();
        let most = counts.most_in_flight;
        eprintln!("{url}: {rate:.0} batches/s, at most {most} requests in flight, {} stalls", counts.stalls);
        if url.contains("latency") {
            // The first batch at least waits a round trip for its records.
            assert!(counts.stalls >= 1, "20 ms per request and no read waited 5 ms");
        }
        runs.push((batches, most));
    }
    assert!(runs[0].0 == runs[1].0, "latency changed the batches");
    assert!(runs[1].1 >= 2 * 64, "at most {} requests in flight at 20 ms: no batch ahead was", runs[1].1);
    // Far more ranges are announced than that (up to 64 batches ahead); the rest wait.
    let cap = zrecord::remote::MAX_READS_IN_FLIGHT as u64;
    assert!(runs[1].1 <= cap, "{} requests in flight, over the cap of {cap}", runs[1].1);
}

#[test]
fn a_cache_that_holds_the_dataset_reads_a_first_epoch_in_few_large_requests() {
    // Every byte of the dataset will be kept and read this epoch, so the records the
    // read-ahead announces are fetched in merged spans, however far apart. Before: one
    // request per record (8,000 and more at 20 ms), because the gap worth bridging was
    // measured from the small requests those very reads made.
    let (n, record) = (8000u64, 4096u64);
    let dir = pushed_records("memory://roomy/ds", n, record);
    let local = Arc::new(Dataset::open(dir.path().join("ds")).unwrap());
    let far = Arc::new(Dataset::open_remote("memory://roomy/ds?latency_ms=20", &[], zrecord::Verify::Auto).unwrap());
    // An epoch's batches, and the requests made by the time its first batch came back.
    let epoch = |ds: &Arc<Dataset>| {
        let source = Source::dataset(ds.clone()).unwrap();
        let stream = Stream::new(source.id(), Mode::Shuffle, 1, 64).unwrap();
        let loader = Loader::new(stream, vec![source], LoaderOptions::default()).unwrap();
        let mut batches = vec![loader.next().unwrap().unwrap().fields];
        let after_first = ds.remote_stats().map_or(0, |c| c.requests);
        batches.extend((1..n / 64).map(|_| loader.next().unwrap().unwrap().fields));
        loader.close();
        (batches, after_first)
    };
    let (far_epoch, after_first) = epoch(&far);
    assert!(far_epoch == epoch(&local).0, "the far dataset's epoch differs from the local one's");
    let counts = far.remote_stats().unwrap();
    eprintln!(
        "a first epoch of {n} records: {} requests ({after_first} by its first batch), {} bytes",
        counts.requests, counts.bytes
    );
    // 32 MiB of records in spans of at most 16 MiB, plus the metadata blocks.
    assert!(counts.requests <= 100, "{} requests for a first epoch of {n} records", counts.requests);
    // The first window's requests tile the chunk from its start to its end: no record
    // between two of them, or before the first, is left to a request of its own later.
    assert_eq!(counts.requests, after_first, "requests after the first batch");
    assert!(counts.bytes <= 2 * n * record, "{} bytes fetched for {} bytes of records", counts.bytes, n * record);
}

#[test]
fn a_dataset_opens_in_two_round_trips() {
    // The listing beside the manifest, then every store's table and checksums side by side.
    // Before, each store read its checksums only after its table had come back: three
    // round trips. The store below holds each round's reads until all of them have come,
    // so a read that waits on another's reply never comes, and no clock is involved.
    let dir = tempfile::tempdir().unwrap();
    let local = write(&dir.path().join("ds"), 1200);
    let rounds = pushed_in_rounds("open-trips", &dir.path().join("ds"));
    let opening = std::thread::spawn(|| Dataset::open_remote("memory://open-trips/ds", &[], zrecord::Verify::Auto));
    rounds.release_when(2, "round trip 1 (remote.json and dataset.json)");
    // 4 shards of 3 fields, a table and a checksum file each.
    let stores = local.shard_count() * 3;
    assert_eq!(stores, 12);
    rounds.release_when(2 + 2 * stores, "round trip 2 (every store's table and checksums)");
    // A third round trip would wait here: counted below rather than held.
    rounds.open_up();
    let far = opening.join().unwrap().unwrap();
    assert_eq!(*rounds.arrived.lock().unwrap(), 2 + 2 * stores, "reads after the second round trip");
    assert_eq!(far.len(), 1200);
}

#[test]
fn direct_reads_fetch_what_they_return_in_one_round_trip() {
    // ds[list] in Python: every field's records announced (Dataset::will_read), then each
    // field gathered. Before, a cache that could hold the whole dataset fetched whole spans
    // around each record even with no loader to read them later: 64 random samples of 16
    // KiB brought 71 MB for 1 MB (68x) from the S3-compatible server, and 300 single
    // samples 3.1x. Now a direct read fetches its records (neighbours closer than 4 KiB
    // come along: a shard's labels in one request), all in one round trip.
    let (n, record) = (2000u64, 16384u64);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ds");
    let local = write_images_and_labels(&path, n, record);
    let rounds = pushed_in_rounds("direct", &path);

    let opening = std::thread::spawn(|| Dataset::open_remote("memory://direct/ds", &[], zrecord::Verify::Auto));
    rounds.release_when(2, "open: remote.json and dataset.json");
    let opened = 2 + 2 * 4 * 2; // then each store's table and checksums
    rounds.release_when(opened, "open: the stores' tables and checksums");
    let far = Arc::new(opening.join().unwrap().unwrap());
    let before = far.remote_stats().unwrap();

    // 64 samples, no two neighbours, spread over the 4 shards, in no order.
    let picked: Vec<u64> = (0..64u64).map(|k| (k * 997 + 13) % n).collect();
    let reader = {
        let far = far.clone();
        let picked = picked.clone();
        std::thread::spawn(move || {
            far.will_read(&picked);
            let mut image = vec![0u8; picked.len() * record as usize];
            far.gather_fixed(0, &picked, &mut image, None, true).unwrap();
            let mut label = vec![0u8; picked.len() * 8];
            far.gather_fixed(1, &picked, &mut label, None, true).unwrap();
            (image, label)
        })
    };
    // One request per image, one per shard for the labels: all of them in one round.
    rounds.release_when(opened + 64 + 4, "the batch's records");
    rounds.open_up();
    let (image, label) = reader.join().unwrap();
    assert_eq!(*rounds.arrived.lock().unwrap(), opened + 64 + 4, "requests after the first round trip");
    let mut want = vec![0u8; picked.len() * record as usize];
    local.gather_fixed(0, &picked, &mut want, None, true).unwrap();
    assert!(image == want, "the far images differ from the local ones");
    let labels: Vec<i64> = label.chunks(8).map(|b| i64::from_le_bytes(b.try_into().unwrap())).collect();
    assert_eq!(labels, picked.iter().map(|&i| i as i64).collect::<Vec<_>>());

    let after = far.remote_stats().unwrap();
    let returned = picked.len() as u64 * (record + 8);
    let fetched = after.bytes - before.bytes;
    eprintln!("64 direct samples: {fetched} bytes fetched for {returned} returned");
    assert!(fetched * 2 <= returned * 3, "{fetched} bytes fetched for {returned} bytes returned (over 1.5x)");
}

#[test]
fn a_store_in_memory_is_asked_from_the_thread_that_reads() {
    // A store that answers in microseconds is asked by the reading thread itself: handing
    // each request to the runtime's thread and waking the reader with the answer cost more
    // than the answer, and a cache of a tenth of the dataset (a request per record) read
    // 0.65-0.67x of a whole cache's samples/s at memory speed. A loader does not announce
    // batches ahead to such a store either. A store a millisecond away is asked from the
    // runtime, ahead, as before.
    let (n, record) = (2000u64, 4096u64);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ds");
    let local = write_images_and_labels(&path, n, record);
    let seen = pushed_in_rounds("inline", &path);
    seen.open_up();
    let askers = |from: usize| seen.askers.lock().unwrap()[from..].to_vec();
    let asked = || seen.askers.lock().unwrap().len();

    // Direct reads, from a thread of the test's.
    let far = Arc::new(Dataset::open_remote("memory://inline/ds", &[], zrecord::Verify::Auto).unwrap());
    let opened = asked();
    let picked: Vec<u64> = (0..64u64).map(|k| (k * 997 + 13) % n).collect();
    let image = {
        let (far, picked) = (far.clone(), picked.clone());
        let reader = std::thread::Builder::new().name("the-reader".into());
        let read = move || {
            let mut image = vec![0u8; picked.len() * record as usize];
            far.gather_fixed(0, &picked, &mut image, None, true).unwrap();
            image
        };
        reader.spawn(read).unwrap().join().unwrap()
    };
    let mut want = vec![0u8; picked.len() * record as usize];
    local.gather_fixed(0, &picked, &mut want, None, true).unwrap();
    assert!(image == want, "the images read differ from the local ones");
    let direct = askers(opened);
    assert!(!direct.is_empty() && direct.iter().all(|t| t == "the-reader"), "direct reads asked by {direct:?}");

    // A loader's epoch through a cache of a tenth of the dataset: its workers ask.
    let mut runs = Vec::new();
    for url in ["memory://inline/ds", "memory://inline/ds?latency_ms=1"] {
        let tenth = RemoteOptions { cache_bytes: Some(n * record / 10), ..RemoteOptions::default() };
        let far = Arc::new(Dataset::open_remote_with(url, &[], tenth).unwrap());
        let from = asked();
        let source = Source::dataset(far.clone()).unwrap();
        let stream = Stream::new(source.id(), Mode::Shuffle, 5, 64).unwrap();
        let loader =
            Loader::new(stream, vec![source], LoaderOptions { num_workers: 2, ..LoaderOptions::default() }).unwrap();
        let steps = loader.steps_per_epoch().unwrap();
        runs.push((0..steps).map(|_| loader.next().unwrap().unwrap().fields).collect::<Vec<_>>());
        loader.close();
        let threads = askers(from);
        let by_runtime = threads.iter().filter(|t| t.as_str() == "zrecord-remote").count();
        eprintln!("{url}: {} GETs, {by_runtime} from the runtime's threads", threads.len());
        if url.contains("latency") {
            assert_eq!(by_runtime, threads.len(), "a store 1 ms away asked from {threads:?}");
        } else {
            assert_eq!(by_runtime, 0, "a store in memory asked by the runtime: {threads:?}");
        }
    }
    assert!(runs[0] == runs[1], "the batches differ with the store's latency");
}

#[test]
fn a_read_from_inside_an_async_runtime_is_sent_by_the_remote_runtime() {
    // A thread that drives an async runtime (a caller's tokio code) must not block on
    // another: there a store in memory is asked from the remote runtime, as any store is.
    let (n, record) = (300u64, 1024u64);
    let _dir = pushed_records("memory://inside-async/ds", n, record);
    let far = Arc::new(Dataset::open_remote("memory://inside-async/ds", &[], zrecord::Verify::Auto).unwrap());
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let picked: Vec<u64> = (0..32u64).map(|k| (k * 37 + 5) % n).collect();
    let image = rt.block_on(async {
        let mut image = vec![0u8; picked.len() * record as usize];
        far.gather_fixed(0, &picked, &mut image, None, true).unwrap();
        image
    });
    let local = Dataset::open(_dir.path().join("ds")).unwrap();
    let mut want = vec![0u8; picked.len() * record as usize];
    local.gather_fixed(0, &picked, &mut want, None, true).unwrap();
    assert!(image == want, "the records read inside a runtime differ from the local ones");
}

#[test]
fn a_batch_over_tables_not_held_waits_two_round_trips() {
    // Stores past 65,536 records have tables of more than one 1 MiB block, and opening
    // reads the first. A batch in the second blocks: every store's block is fetched side by
    // side (round 1), then every store's records (round 2). Before, each store fetched its
    // block and sent its records before the next store began: a round trip per store.
    let per_shard = 70_000u64;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ds");
    let fields = vec![Field::fixed("id", "<i8", &[], Codec::Raw), Field::fixed("x", "<i4", &[], Codec::Raw)];
    let options = WriteOptions { shard_records: per_shard, ..WriteOptions::default() };
    let mut w = DatasetWriter::open(&path, fields, options).unwrap();
    let ids: Vec<u8> = (0..2 * per_shard).flat_map(|i| (i as i64).to_le_bytes()).collect();
    let xs: Vec<u8> = (0..2 * per_shard).flat_map(|i| (i as i32 * 3).to_le_bytes()).collect();
    w.write(&[Column::Fixed(&ids), Column::Fixed(&xs)]).unwrap();
    w.commit().unwrap();
    let rounds = pushed_in_rounds("cold-tables", &path);

    let opening = std::thread::spawn(|| Dataset::open_remote("memory://cold-tables/ds", &[], zrecord::Verify::Auto));
    rounds.release_when(2, "open: remote.json and dataset.json");
    let opened = 2 + 2 * 2 * 2; // each store's first table block and its checksums
    rounds.release_when(opened, "open: the stores' tables and checksums");
    let far = Arc::new(opening.join().unwrap().unwrap());

    let picked: Vec<u64> = (66_000..66_010).chain(per_shard + 66_000..per_shard + 66_010).collect();
    let reader = {
        let (far, picked) = (far.clone(), picked.clone());
        std::thread::spawn(move || {
            far.will_read(&picked);
            let mut id = vec![0u8; picked.len() * 8];
            far.gather_fixed(0, &picked, &mut id, None, true).unwrap();
            let mut x = vec![0u8; picked.len() * 4];
            far.gather_fixed(1, &picked, &mut x, None, true).unwrap();
            (id, x)
        })
    };
    rounds.release_when(opened + 8, "round 1: every store's second table and checksum blocks");
    rounds.release_when(opened + 12, "round 2: every store's records");
    rounds.open_up();
    let (id, x) = reader.join().unwrap();
    assert_eq!(*rounds.arrived.lock().unwrap(), opened + 12, "requests after the second round trip");
    let id: Vec<u64> = id.chunks(8).map(|b| i64::from_le_bytes(b.try_into().unwrap()) as u64).collect();
    assert_eq!(id, picked);
    let x: Vec<i32> = x.chunks(4).map(|b| i32::from_le_bytes(b.try_into().unwrap())).collect();
    assert_eq!(x, picked.iter().map(|&i| i as i32 * 3).collect::<Vec<_>>());
}

/// `n` images of `record` bytes and their labels written locally (the second value) and
/// pushed to `memory://{name}/ds`, opened from there at 20 ms a request with a cache of a
/// tenth of their stored bytes (the third); the last value is the stored bytes.
fn a_tenth_cached_at_20ms(name: &str, n: u64, record: u64) -> (tempfile::TempDir, Arc<Dataset>, Arc<Dataset>, u64) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ds");
    let local = Arc::new(write_images_and_labels(&path, n, record));
    let url = format!("memory://{name}/ds");
    let stored = push(&path, &Remote::open(&url, &[]).unwrap(), &mut |_, _| {}).unwrap().stored;
    let far = Arc::new(Dataset::open_remote(&format!("{url}?latency_ms=20"), &[], zrecord::Verify::Auto).unwrap());
    far.cache().unwrap().set_limit(stored / 10);
    (dir, local, far, stored)
}

#[test]
fn a_small_cache_keeps_what_the_batches_being_read_need() {
    // A cache of 10% of the dataset at 20 ms a request. The ranges no read had taken yet
    // (the read-ahead, and the batches the workers were gathering) counted against the
    // budget, so eviction dropped ranges a gather was about to read, and each came again
    // with a request of its own while the gather waited: 30 batches of 64 samples made
    // 3,550 requests (about 575 samples/s). Kept until read, they make 2,451-2,494.
    let record = 12u64 << 10;
    let (_dir, local, far, stored) = a_tenth_cached_at_20ms("small-kept", 4000, record);
    let read = |ds: &Arc<Dataset>| {
        let source = Source::dataset(ds.clone()).unwrap();
        let stream = Stream::new(source.id(), Mode::Shuffle, 7, 64).unwrap();
        let loader =
            Loader::new(stream, vec![source], LoaderOptions { num_workers: 2, ..LoaderOptions::default() }).unwrap();
        let batches: Vec<_> = (0..30).map(|_| loader.next().unwrap().unwrap().fields).collect();
        loader.close();
        batches
    };
    let before = far.remote_stats().unwrap().requests;
    assert!(read(&far) == read(&local), "the far batches differ from the local ones");
    let requests = far.remote_stats().unwrap().requests - before;
    eprintln!("30 batches through a 10% cache at 20 ms: {requests} requests");
    assert!(requests <= 3200, "{requests} requests for 30 batches of 64 (ranges dropped before they were read)");
    // Once the loader stopped, its read-ahead that nobody will read goes too.
    assert!(far.cache().unwrap().held() <= stored / 10 + 8 * 64 * (record + 8), "{} held", far.cache().unwrap().held());
}

#[test]
fn records_a_few_bytes_apart_between_kept_ones_cost_no_request_of_their_own() {
    // Labels of 8 bytes: sample 3's is kept from an earlier read; a batch of samples 0 and
    // 6 announces theirs, which cannot come in one request without fetching sample 3's
    // again, so they come in two. The engine then read labels 0 to 6 in one span, as it
    // does on local disk for records under 4 KiB apart: the bytes between were in no
    // request, and the read waited for a request of their own (a round trip per batch and
    // shard at 20 ms; 43 in one epoch of a 10% cache).
    let (n, record) = (500u64, 1024u64);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ds");
    write_images_and_labels(&path, n, record);
    push(&path, &Remote::open("memory://kept-between/ds", &[]).unwrap(), &mut |_, _| {}).unwrap();
    let far = Dataset::open_remote("memory://kept-between/ds", &[], zrecord::Verify::Auto).unwrap();
    let gather = |picked: &[u64]| {
        far.will_read(picked);
        let mut image = vec![0u8; picked.len() * record as usize];
        far.gather_fixed(0, picked, &mut image, None, true).unwrap();
        let mut label = vec![0u8; picked.len() * 8];
        far.gather_fixed(1, picked, &mut label, None, true).unwrap();
        label.chunks(8).map(|b| i64::from_le_bytes(b.try_into().unwrap())).collect::<Vec<_>>()
    };
    assert_eq!(gather(&[3]), [3]);
    let before = far.remote_stats().unwrap().requests;
    assert_eq!(gather(&[0, 6]), [0, 6]);
    // Two images, two labels: nothing more.
    assert_eq!(far.remote_stats().unwrap().requests - before, 4);
}

#[test]
fn a_small_cache_streams_within_its_budget_and_closes_without_fetching() {
    // A cache of 10% of the dataset at 20 ms a request, batches of 16 samples (a twentieth
    // of the cache each). The read-ahead's window is its share of the budget and the ranges
    // kept after a read get the rest: before, the window (up to half the budget) came on
    // top of ranges kept up to the whole budget. A close drops the window only once the
    // workers have stopped (before, they fetched their batches' records again one by one:
    // up to 1.2 s of a close in the small-cache bench, at batches of 64).
    let (n, record) = (4000u64, 12u64 << 10);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ds");
    write_images_and_labels(&path, n, record);
    let stored = push(&path, &Remote::open("memory://small-budget/ds", &[]).unwrap(), &mut |_, _| {}).unwrap().stored;
    let far =
        Arc::new(Dataset::open_remote("memory://small-budget/ds?latency_ms=20", &[], zrecord::Verify::Auto).unwrap());
    let limit = stored / 10;
    far.cache().unwrap().set_limit(limit);
    let source = Source::dataset(far.clone()).unwrap();
    let stream = Stream::new(source.id(), Mode::Shuffle, 7, 16).unwrap();
    let options = LoaderOptions { num_workers: 2, prefetch: 2, ..LoaderOptions::default() };
    let loader = Loader::new(stream, vec![source], options).unwrap();
    let mut most = 0;
    for _ in 0..120 {
        loader.next().unwrap().unwrap();
        most = most.max(far.cache().unwrap().held());
    }
    // What the workers and the queue hold besides: a batch each, and one being read.
    let batches = (2 + 2 + 1) * 16 * (record + 8);
    eprintln!("held at most {most} bytes of a {limit}-byte cache");
    let before = far.remote_stats().unwrap();
    loader.close();
    let after = far.remote_stats().unwrap();
    let (closing, stalled) = (after.requests - before.requests, after.stalls - before.stalls);
    eprintln!("{closing} requests sent while closing, {stalled} reads stalled");
    // The workers' last batches are read from ranges still held, not fetched again one
    // record at a time while the reader waits. Requests are not the measure: those the
    // sampler was announcing when told to stop go out too (0 to 91 in 70 runs, with or
    // without the fault). Stalls are: with the plan dropped before the workers were
    // joined, 1 to 9 reads stalled in each of 10 runs (4 or more in 9); as it is, none in
    // 50 runs and at most 1 in 40 beside two busy loops.
    assert!(stalled <= 3, "{stalled} reads stalled while closing ({closing} requests sent)");
    // Measured: 6.6-7.0 MB now, 8.1-8.6 MB before (kept ranges up to the budget, the
    // window on top), of a 4.96 MB budget.
    assert!(
        most <= limit + limit / 2,
        "{most} bytes held with a budget of {limit} ({batches} in the workers' batches)"
    );
}

#[test]
fn a_block_shuffle_through_a_small_cache_fetches_blocks_not_samples() {
    // A cache of 10% of the dataset at 20 ms a request, a SHUFFLE epoch in blocks of 25
    // neighbours, 4 blocks a window. Announced a batch at a time (each batch holds a few
    // samples of every block of its window), the read-ahead sent a block in many short
    // requests: 1,396 for the epoch's 3,968 samples; windows announced whole but cut at
    // batch boundaries, 1,190. A window announced whole, the samples of a step that
    // straddles two windows held back for the next, and a run of neighbours allowed an
    // eighth of the cache instead of a 32nd: 226-238.
    let (_dir, local, far, _) = a_tenth_cached_at_20ms("blocks", 4000, 12 << 10);
    let read = |ds: &Arc<Dataset>| {
        let source = Source::dataset(ds.clone()).unwrap();
        let blocks = zrecord::Blocks::new(25, 4).unwrap();
        let stream = Stream::new(source.id(), Mode::Shuffle, 7, 64).unwrap().with_blocks(blocks).unwrap();
        let steps = stream.steps_per_epoch().unwrap() as usize;
        let loader =
            Loader::new(stream, vec![source], LoaderOptions { num_workers: 2, ..LoaderOptions::default() }).unwrap();
        let batches: Vec<_> = (0..steps).map(|_| loader.next().unwrap().unwrap().fields).collect();
        loader.close();
        batches
    };
    let before = far.remote_stats().unwrap().requests;
    assert!(read(&far) == read(&local), "the far batches differ from the local ones");
    let requests = far.remote_stats().unwrap().requests - before;
    eprintln!("an epoch in blocks through a 10% cache at 20 ms: {requests} requests");
    assert!(requests <= 400, "{requests} requests for an epoch of 3,968 samples in blocks of 25");
}
