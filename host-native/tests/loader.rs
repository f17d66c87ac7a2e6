//! The native loader: it reads the core's stream (every SHUFFLE index once per epoch, the
//! ranks' batches put together are the world-size-1 stream), counts only what `next()`
//! returned, resumes exactly under other workers, prefetch depths and splits of the global
//! batch, refuses a state whose dataset changed (append, delete, compact), reads mixtures
//! with each sample's source, surfaces worker errors and closes promptly.

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use zrecord::{
    Codec, DatasetId, Error, Loader, LoaderError, LoaderOptions, Mixture, Mode, OnError, Source, StateError, Stream,
    StreamState, Transform, Zrecord,
};
use zrecord_core::stream::combine_generations;

/// A store of `n` 8-byte records, record `i` holding `base + i` (little-endian).
fn store(dir: &Path, name: &str, n: u64, base: u64) -> Arc<Zrecord> {
    let z = Zrecord::open(dir.join(name)).unwrap();
    let bytes: Vec<u8> = (0..n).flat_map(|i| (base + i).to_le_bytes()).collect();
    z.append(&bytes, n as usize, 8, Some(Codec::Raw)).unwrap();
    Arc::new(z)
}

fn values(buf: &[u8]) -> Vec<u64> {
    buf.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap())).collect()
}

fn opts(rank: u64, world_size: u64, num_workers: usize, prefetch: usize) -> LoaderOptions {
    LoaderOptions { rank, world_size, num_workers, prefetch, ..LoaderOptions::default() }
}

/// The next `steps` batches' values (field 0), checking that each batch's indices are
/// what it holds.
fn take(loader: &Loader, steps: u64, base: u64) -> Vec<u64> {
    let mut out = Vec::new();
    for _ in 0..steps {
        let b = loader.next().unwrap().expect("open");
        let v = values(&b.fields[0]);
        assert_eq!(v, b.indices.iter().map(|i| base + i).collect::<Vec<_>>());
        out.extend(v);
    }
    out
}

#[test]
fn one_shuffle_epoch_visits_every_index_once_on_one_and_four_ranks() {
    let dir = tempfile::tempdir().unwrap();
    let n = 1003;
    let z = store(dir.path(), "d", n, 0);
    let source = Source::new(vec![(z, 8)]).unwrap();
    // World 1, batch 40: 25 steps, 3 samples dropped.
    let stream = Stream::new(source.id(), Mode::Shuffle, 5, 40).unwrap();
    let loader = Loader::new(stream.clone(), vec![source.clone()], opts(0, 1, 3, 4)).unwrap();
    assert_eq!(loader.steps_per_epoch(), Some(25));
    let epoch = take(&loader, 25, 0);
    let seen: HashSet<u64> = epoch.iter().copied().collect();
    assert_eq!(seen.len(), 1000, "no index twice");
    assert!(seen.iter().all(|&i| i < n));

    // World 4 of 10 per rank: the same global batch, so the same stream.
    let mut per_rank = Vec::new();
    for rank in 0..4 {
        let l = Loader::new(stream.clone(), vec![source.clone()], opts(rank, 4, rank as usize, 2)).unwrap();
        assert_eq!(l.batch_size(), 10);
        assert_eq!(l.steps_per_epoch(), Some(25), "every rank runs the same number of steps");
        per_rank.push(take(&l, 25, 0));
    }
    let mut joined = Vec::new();
    for step in 0..25 {
        for rank in &per_rank {
            joined.extend_from_slice(&rank[step * 10..(step + 1) * 10]);
        }
    }
    assert_eq!(joined, epoch, "rank r reads the r-th slice of each global batch");
}

#[test]
fn resume_is_exact_with_other_workers_prefetch_and_world_size() {
    let dir = tempfile::tempdir().unwrap();
    let z = store(dir.path(), "d", 500, 1000);
    let source = Source::new(vec![(z, 8)]).unwrap();
    for mode in [Mode::Shuffle, Mode::Iid, Mode::Sequential] {
        let stream = Stream::new(source.id(), mode, 77, 32).unwrap();
        let whole = Loader::new(stream.clone(), vec![source.clone()], opts(0, 1, 2, 4)).unwrap();
        let reference = take(&whole, 40, 1000);

        // Two ranks of 16 read 13 steps with deep prefetch, save (as text), and stop.
        let ranks: Vec<Loader> =
            (0..2).map(|r| Loader::new(stream.clone(), vec![source.clone()], opts(r, 2, 3, 8)).unwrap()).collect();
        let mut first = Vec::new();
        for _ in 0..13 {
            for l in &ranks {
                first.extend(take(l, 1, 1000));
            }
        }
        std::thread::sleep(Duration::from_millis(50)); // let the workers run ahead
        let saved = ranks[0].state().encode();
        assert_eq!(saved, ranks[1].state().encode(), "every rank saves the same state");
        assert_eq!(ranks[0].state().step, 13);
        drop(ranks);

        // One rank of 32, no worker threads.
        let state = StreamState::decode(&saved).unwrap();
        let resumed = Loader::resume(stream.clone(), vec![source.clone()], opts(0, 1, 0, 1), &state).unwrap();
        assert_eq!(resumed.step(), 13);
        let rest = take(&resumed, 27, 1000);
        first.extend(rest);
        assert_eq!(first, reference, "{mode:?}");
    }
}

#[test]
fn the_state_counts_returned_batches_not_prefetched_ones() {
    let dir = tempfile::tempdir().unwrap();
    let z = store(dir.path(), "d", 4000, 0);
    let source = Source::new(vec![(z, 8)]).unwrap();
    let stream = Stream::new(source.id(), Mode::Shuffle, 1, 16).unwrap();
    let loader = Loader::new(stream.clone(), vec![source], opts(0, 1, 4, 8)).unwrap();
    assert_eq!(loader.state().step, 0);
    take(&loader, 3, 0);
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(loader.state(), stream.state(3));
    let encoded = loader.state().encode();
    assert!(encoded.len() < 1024, "{encoded}");
}

#[test]
fn a_changed_dataset_refuses_the_state() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("d");
    let saved = {
        let z = store(dir.path(), "d", 300, 0);
        let source = Source::new(vec![(z, 8)]).unwrap();
        let stream = Stream::new(source.id(), Mode::Shuffle, 3, 10).unwrap();
        let l = Loader::new(stream, vec![source], opts(0, 1, 1, 2)).unwrap();
        take(&l, 2, 0);
        l.state()
    };
    let resume = |z: Zrecord| {
        let source = Source::new(vec![(Arc::new(z), 8)]).unwrap();
        let stream = Stream::new(source.id(), Mode::Shuffle, 3, 10).unwrap();
        Loader::resume(stream, vec![source], opts(0, 1, 1, 2), &saved).map(|_| ())
    };
    // Unchanged: it resumes, in another handle.
    resume(Zrecord::open(&path).unwrap()).unwrap();

    // Append: the length says so.
    let z = Zrecord::open(&path).unwrap();
    let g0 = z.generation().unwrap();
    z.append(&7u64.to_le_bytes(), 1, 8, None).unwrap();
    assert_ne!(z.generation().unwrap(), g0, "an append moves the frontier");
    let e = resume(z).unwrap_err();
    assert!(matches!(e, LoaderError::Changed(_)), "{e}");
    assert!(
        e.to_string().contains("grew from 300 to 301 samples") && e.to_string().contains(&*path.to_string_lossy()),
        "{e}"
    );

    // Delete one, append one: the length is back, the generation is not.
    let mut z = Zrecord::open(&path).unwrap();
    z.delete(&[0, 300]).unwrap();
    z.append(&7u64.to_le_bytes(), 1, 8, None).unwrap();
    assert_eq!(z.len(), 300);
    let e = resume(z).unwrap_err();
    assert!(matches!(e, LoaderError::Changed(_)), "{e}");
    assert!(e.to_string().contains("has the same 300 samples but is not the dataset"), "{e}");
    assert!(e.to_string().contains("deleted or compacted"), "{e}");

    // A state saved now resumes; a compact (even one with nothing to move) refuses it.
    let z = Arc::new(Zrecord::open(&path).unwrap());
    let source = Source::new(vec![(Arc::clone(&z), 8)]).unwrap();
    let stream = Stream::new(source.id(), Mode::Shuffle, 3, 10).unwrap();
    let state = stream.state(5);
    drop(source);
    let mut z = Arc::into_inner(z).unwrap();
    let before = z.generation().unwrap();
    z.compact().unwrap();
    z.compact().unwrap();
    let after = z.generation().unwrap();
    assert_ne!(before, after);
    let source = Source::new(vec![(Arc::new(z), 8)]).unwrap();
    // The old stream no longer fits the store; one built from it refuses the state.
    assert!(matches!(Loader::new(stream, vec![source.clone()], opts(0, 1, 0, 1)), Err(LoaderError::Sources(_))));
    let stream = Stream::new(source.id(), Mode::Shuffle, 3, 10).unwrap();
    let e = Loader::resume(stream, vec![source], opts(0, 1, 0, 1), &state).unwrap_err();
    assert!(matches!(e, LoaderError::Changed(_)), "{e}");
}

#[test]
fn generation_is_a_counter_in_a_side_file_above_the_frontier_and_the_stores_nonce() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("d");
    let mut z = Zrecord::open(&path).unwrap();
    // The nonce zrecord drew at creation sits in checksums.zrc beside the covered header.
    let nonce = z.nonce();
    assert_ne!(nonce, 0);
    let sums = std::fs::read(path.join("checksums.zrc")).unwrap();
    assert_eq!(sums[48..56], nonce.to_le_bytes());
    let at = |counter: u64, frontier: u64| combine_generations(nonce, (counter << 44) | frontier);
    assert_eq!(z.generation().unwrap(), at(0, 0), "a new store: counter 0, frontier 0");
    assert!(!path.join("generation.zrg").exists());
    z.append(&[1u8; 24], 3, 8, Some(Codec::Raw)).unwrap();
    assert_eq!(z.generation().unwrap(), at(0, 24));
    z.delete(&[1]).unwrap();
    assert_eq!(
        std::fs::read(path.join("generation.zrg")).unwrap(),
        [b'Z', b'R', b'G', b'N', 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0]
    );
    assert_eq!(z.generation().unwrap(), at(1, 24));
    z.compact().unwrap();
    assert_eq!(z.generation().unwrap(), at(2, 16));
    // An empty delete changes nothing and bumps nothing.
    z.delete(&[]).unwrap();
    assert_eq!(z.generation().unwrap(), at(2, 16));
    // Nor does a delete of tail records (it writes only the header, so it works on a full
    // disk): the length changes, and an append that brings it back moves the frontier.
    let before = z.dataset_id().unwrap();
    z.delete(&[1]).unwrap();
    assert_eq!(z.generation().unwrap(), at(2, 16));
    assert_eq!(z.dataset_id().unwrap().length, before.length - 1);
    z.append(&[2u8; 8], 1, 8, Some(Codec::Raw)).unwrap();
    assert_eq!(z.dataset_id().unwrap().length, before.length);
    assert_ne!(z.dataset_id().unwrap(), before);
    assert_eq!(z.generation().unwrap(), at(2, 24));
    // Another handle, another process: the same value; every commit kept the nonce.
    drop(z);
    let again = Zrecord::open_read_only(&path).unwrap();
    assert_eq!((again.nonce(), again.generation().unwrap()), (nonce, at(2, 24)));
    drop(again);
    // A damaged file is an error naming it, not a silent 0.
    std::fs::write(path.join("generation.zrg"), b"junk").unwrap();
    let z = Zrecord::open_read_only(&path).unwrap();
    let e = z.generation().unwrap_err();
    assert!(matches!(e, Error::Format(_)) && e.to_string().contains("generation.zrg"), "{e}");
}

#[test]
fn a_store_without_a_nonce_keeps_the_generation_it_had() {
    // What builds before nonces (and loaderx, which keeps no checksums.zrc) left: the
    // counter above the frontier, so the states saved on such a store still resume.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("d");
    let z = Zrecord::open(&path).unwrap();
    z.append(&[1u8; 24], 3, 8, Some(Codec::Raw)).unwrap();
    drop(z);
    std::fs::remove_file(path.join("checksums.zrc")).unwrap();
    std::fs::remove_file(path.join("checksums.zrk")).unwrap();
    let old = Zrecord::open_read_only(&path).unwrap();
    assert_eq!((old.nonce(), old.generation().unwrap()), (0, 24));
}

#[test]
fn a_store_written_again_to_the_same_sizes_is_not_the_same_store() {
    // The same records in another order: same length, same frontier; the nonce tells them
    // apart, so a state saved on one is refused on the other.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("d");
    let write = |order: &[u64]| {
        let _ = std::fs::remove_dir_all(&path);
        let z = Zrecord::open(&path).unwrap();
        let bytes: Vec<u8> = order.iter().flat_map(|v| v.to_le_bytes()).collect();
        z.append(&bytes, order.len(), 8, Some(Codec::Raw)).unwrap();
        z
    };
    let forward: Vec<u64> = (0..200).collect();
    let z = Arc::new(write(&forward));
    let source = Source::new(vec![(Arc::clone(&z), 8)]).unwrap();
    let saved = Stream::new(source.id(), Mode::Shuffle, 7, 16).unwrap().state(3);
    drop((source, z));
    let backward: Vec<u64> = forward.iter().rev().copied().collect();
    let z = write(&backward);
    let source = Source::new(vec![(Arc::new(z), 8)]).unwrap();
    let stream = Stream::new(source.id(), Mode::Shuffle, 7, 16).unwrap();
    let e = Loader::resume(stream, vec![source], opts(0, 1, 0, 1), &saved).unwrap_err();
    assert!(matches!(e, LoaderError::Changed(_)), "{e}");
    assert!(e.to_string().contains("written again"), "{e}");
}

#[test]
fn mixtures_carry_sources_and_keep_their_weights() {
    let dir = tempfile::tempdir().unwrap();
    let a = Source::new(vec![(store(dir.path(), "a", 700, 0), 8), (store(dir.path(), "la", 700, 50_000), 8)]).unwrap();
    let b =
        Source::new(vec![(store(dir.path(), "b", 90, 10_000), 8), (store(dir.path(), "lb", 90, 60_000), 8)]).unwrap();
    let mixture = Mixture::new(vec![a.id(), b.id()], vec![0.7, 0.3]).unwrap();
    let stream = Stream::mixture(mixture, 11, 100).unwrap();
    assert_eq!(stream.steps_per_epoch(), None);
    let loader = Loader::new(stream.clone(), vec![a.clone(), b.clone()], opts(0, 1, 2, 4)).unwrap();
    let mut counts = [0usize; 2];
    let mut seen_b = Vec::new();
    for step in 0..30 {
        let batch = loader.next().unwrap().unwrap();
        assert_eq!(batch.step, step);
        let (data, labels) = (values(&batch.fields[0]), values(&batch.fields[1]));
        for i in 0..100 {
            let (s, idx) = (batch.sources[i], batch.indices[i]);
            counts[s as usize] += 1;
            let (base, label_base) = if s == 0 { (0, 50_000) } else { (10_000, 60_000) };
            assert_eq!(data[i], base + idx, "slot {i} holds its source's record");
            assert_eq!(labels[i], label_base + idx);
            if s == 1 {
                seen_b.push(idx);
            }
        }
        let mut expected_sources = vec![0u32; 100];
        let mut expected = vec![0u64; 100];
        stream.batch_at(step, 0, 1, &mut expected, Some(&mut expected_sources)).unwrap();
        assert_eq!((batch.indices, batch.sources), (expected, expected_sources));
    }
    assert!((counts[1] as f64 / 3000.0 - 0.3).abs() < 0.01, "{counts:?}");
    // Source b (90 samples) runs its own epochs: every sample once per 90 picks.
    for epoch in seen_b.chunks_exact(90) {
        assert_eq!(epoch.iter().copied().collect::<HashSet<_>>().len(), 90);
    }

    // Sharded and resumed: 4 ranks of 25 from step 10 read the same.
    let state = stream.state(10);
    let whole = Loader::resume(stream.clone(), vec![a.clone(), b.clone()], opts(0, 1, 0, 1), &state).unwrap();
    let expect = whole.next().unwrap().unwrap();
    for rank in 0..4u64 {
        let l = Loader::resume(stream.clone(), vec![a.clone(), b.clone()], opts(rank, 4, 1, 1), &state).unwrap();
        let got = l.next().unwrap().unwrap();
        let r = rank as usize;
        assert_eq!(got.indices, expect.indices[r * 25..(r + 1) * 25]);
        assert_eq!(got.sources, expect.sources[r * 25..(r + 1) * 25]);
        assert_eq!(got.fields[1], expect.fields[1][r * 200..(r + 1) * 200]);
    }
}

#[test]
fn sources_must_fit_the_stream_and_each_other() {
    let dir = tempfile::tempdir().unwrap();
    let a = store(dir.path(), "a", 100, 0);
    let short = store(dir.path(), "s", 99, 0);
    assert!(matches!(Source::new(vec![(Arc::clone(&a), 8), (short, 8)]), Err(LoaderError::Sources(_))));
    assert!(matches!(Source::new(vec![]), Err(LoaderError::Sources(_))));
    assert!(matches!(Source::new(vec![(Arc::clone(&a), 0)]), Err(LoaderError::Sources(_))));
    let source = Source::new(vec![(Arc::clone(&a), 8)]).unwrap();
    // A stream built for another dataset.
    let other = Stream::new(DatasetId { length: 100, generation: 12345 }, Mode::Iid, 1, 10).unwrap();
    assert!(matches!(Loader::new(other, vec![source.clone()], opts(0, 1, 1, 1)), Err(LoaderError::Sources(_))));
    // Mixture sources of different sample sizes.
    let wide = Source::new(vec![(store(dir.path(), "w", 100, 0), 16)]).unwrap();
    let m = Mixture::new(vec![source.id(), wide.id()], vec![1.0, 1.0]).unwrap();
    let stream = Stream::mixture(m, 1, 10).unwrap();
    let e = Loader::new(stream, vec![source.clone(), wide], opts(0, 1, 1, 1)).err().unwrap();
    assert!(e.to_string().contains("same fields and sample sizes"), "{e}");
    // A world size that does not divide the global batch, a rank out of range.
    let stream = Stream::new(source.id(), Mode::Shuffle, 1, 10).unwrap();
    assert!(matches!(Loader::new(stream.clone(), vec![source.clone()], opts(0, 3, 1, 1)), Err(LoaderError::Stream(_))));
    assert!(matches!(Loader::new(stream.clone(), vec![source.clone()], opts(2, 2, 1, 1)), Err(LoaderError::Stream(_))));
    // A state of another global batch.
    let other = Stream::new(source.id(), Mode::Shuffle, 1, 20).unwrap();
    let e = Loader::resume(stream, vec![source], opts(0, 1, 1, 1), &other.state(3)).err().unwrap();
    assert!(matches!(e, LoaderError::State(StateError::GlobalBatch { saved: 20, current: 10 })), "{e}");
}

#[test]
fn a_worker_error_reaches_next_and_stops_the_loader() {
    let dir = tempfile::tempdir().unwrap();
    let z = store(dir.path(), "d", 50, 0);
    for workers in [0, 2] {
        // Records of 8 bytes read as samples of 4: every gather fails.
        let source = Source::new(vec![(Arc::clone(&z), 4)]).unwrap();
        let stream = Stream::new(source.id(), Mode::Iid, 1, 5).unwrap();
        let loader = Loader::new(stream, vec![source], opts(0, 1, workers, 2)).unwrap();
        let e = loader.next().unwrap_err();
        // The error names the store it happened in.
        assert!(matches!(&e, LoaderError::Dataset(d) if matches!(d.source, Error::BufferTooSmall(_))), "{e}");
        assert!(e.to_string().contains(&z.path().display().to_string()), "{e}");
        let again = loader.next().unwrap_err();
        assert!(matches!(&again, LoaderError::Stopped { code: Some(-6), .. }), "{again}");
        assert_eq!(again.to_string(), e.to_string());
        assert_eq!(loader.state().step, 0);
    }
}

#[test]
fn close_is_prompt_joins_everything_and_ends_a_waiting_next() {
    let dir = tempfile::tempdir().unwrap();
    let z = store(dir.path(), "d", 5000, 0);
    let source = Source::new(vec![(z, 8)]).unwrap();
    let stream = Stream::new(source.id(), Mode::Iid, 1, 64).unwrap();
    let loader = Arc::new(Loader::new(stream, vec![source], opts(0, 1, 4, 8)).unwrap());
    assert_eq!(loader.threads_alive(), 0, "threads start with the first next()");
    loader.next().unwrap().unwrap();
    std::thread::sleep(Duration::from_millis(100)); // every queue full, every worker blocked
    assert_eq!(loader.threads_alive(), 5);
    let reader = {
        let loader = Arc::clone(&loader);
        std::thread::spawn(move || {
            let mut n = 0u64;
            while let Some(_b) = loader.next().unwrap() {
                n += 1;
            }
            n
        })
    };
    std::thread::sleep(Duration::from_millis(50));
    let start = Instant::now();
    loader.close();
    assert!(start.elapsed() < Duration::from_secs(2));
    assert!(loader.is_closed());
    assert_eq!(loader.threads_alive(), 0);
    reader.join().unwrap();
    assert!(loader.next().unwrap().is_none());
    loader.close();
    assert_eq!(loader.threads_alive(), 0);
    // The stores were let go: a delete can have the store to itself.
    drop(loader);
    let mut z = Zrecord::open(dir.path().join("d")).unwrap();
    z.delete(&[0]).unwrap();
}

#[test]
fn a_loader_closed_or_dropped_before_it_is_read_starts_no_thread() {
    let dir = tempfile::tempdir().unwrap();
    let z = store(dir.path(), "d", 100, 0);
    let source = Source::new(vec![(z, 8)]).unwrap();
    let stream = Stream::new(source.id(), Mode::Shuffle, 1, 10).unwrap();
    let loader = Loader::new(stream.clone(), vec![source.clone()], opts(0, 1, 3, 4)).unwrap();
    assert_eq!(loader.threads_alive(), 0);
    loader.close();
    assert!(loader.next().unwrap().is_none());
    assert_eq!(loader.threads_alive(), 0);
    drop(Loader::new(stream, vec![source], opts(0, 1, 3, 4)).unwrap());
}

#[test]
fn given_back_buffers_are_reused_and_a_short_record_still_reads_as_zero_padded() {
    // Records of 8 bytes, except every 7th, which holds 3: its slot's last 5 bytes must be
    // zero in every batch, including batches written into a buffer that held 8-byte
    // records before.
    let dir = tempfile::tempdir().unwrap();
    let n = 500u64;
    let z = Zrecord::open(dir.path().join("v")).unwrap();
    let (mut bytes, mut offsets, mut lens) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..n {
        offsets.push(bytes.len() as u64);
        let rec = (0xA0A0_0000_0000_0000u64 | i).to_le_bytes();
        let len = if i % 7 == 0 { 3 } else { 8 };
        bytes.extend_from_slice(&rec[..len]);
        lens.push(len as u32);
    }
    z.append_var(&bytes, &offsets, &lens, Some(Codec::Raw)).unwrap();
    let source = Source::new(vec![(Arc::new(z), 8)]).unwrap();
    let stream = Stream::new(source.id(), Mode::Shuffle, 5, 50).unwrap();
    for workers in [0, 2] {
        let loader = Loader::new(stream.clone(), vec![source.clone()], opts(0, 1, workers, 2)).unwrap();
        let pool = loader.buffers();
        let mut held = Vec::new();
        for step in 0..40 {
            let batch = loader.next().unwrap().unwrap();
            for (slot, &i) in batch.indices.iter().enumerate() {
                let got = &batch.fields[0][slot * 8..(slot + 1) * 8];
                let mut want = (0xA0A0_0000_0000_0000u64 | i).to_le_bytes();
                if i % 7 == 0 {
                    want[3..].fill(0);
                }
                assert_eq!(got, want, "step {step}, slot {slot}, record {i}");
            }
            // Hold every 5th batch; give the others back, as the Python arrays do when freed.
            if step % 5 == 0 {
                held.push((batch.indices.clone(), batch.fields[0].clone(), batch.fields));
            } else {
                for buf in batch.fields {
                    pool.give(buf);
                }
            }
        }
        assert!(!pool.is_empty(), "buffers given back wait for reuse");
        // A held batch is never written again by later batches.
        for (indices, copy, fields) in &held {
            assert_eq!(&fields[0], copy);
            assert_eq!(indices.len(), 50);
        }
        loader.close();
    }
}

/// Data that is not a zrecord store: sample `i` is `i * 3`, and the fetch notes which
/// threads called it.
struct Triples {
    threads: std::sync::Mutex<HashSet<String>>,
}

impl zrecord::Fetch for Triples {
    fn fetch(&self, indices: &[u64]) -> Box<dyn std::any::Any + Send> {
        let name = std::thread::current().name().unwrap_or("unnamed").to_owned();
        self.threads.lock().unwrap().insert(name);
        Box::new(indices.iter().map(|i| i * 3).collect::<Vec<u64>>())
    }
}

#[test]
fn a_fetching_loader_reads_the_same_stream_and_resumes() {
    let id = DatasetId { length: 1000, generation: 0 };
    let stream = Stream::new(id, Mode::Shuffle, 9, 40).unwrap();
    let fetch = Arc::new(Triples { threads: Default::default() });
    let loader = Loader::fetching(stream.clone(), fetch.clone(), opts(1, 2, 3, 4)).unwrap();
    let mut shard = stream.shard(1, 2).unwrap();
    for step in 0..30u64 {
        let b = loader.next().unwrap().unwrap();
        let mut want = vec![0u64; 20];
        assert_eq!(shard.fill(&mut want), step);
        assert_eq!((b.step, &b.indices), (step, &want));
        assert!(b.fields.is_empty());
        let got = b.fetched.unwrap().downcast::<Vec<u64>>().unwrap();
        assert_eq!(*got, want.iter().map(|i| i * 3).collect::<Vec<_>>());
    }
    let state = loader.state();
    loader.close();
    assert_eq!(loader.threads_alive(), 0);
    let names = fetch.threads.lock().unwrap().clone();
    assert!(names.iter().all(|n| n.starts_with("zrecord-loader-")), "{names:?}");
    // Resumed on one rank without workers: the global batch after the last one returned.
    let again = Loader::resume_fetching(stream.clone(), fetch, opts(0, 1, 0, 1), &state).unwrap();
    let b = again.next().unwrap().unwrap();
    assert_eq!(b.step, 30);
    let mut whole = stream.shard(0, 1).unwrap();
    whole.seek(30).unwrap();
    let mut want = vec![0u64; 40];
    whole.fill(&mut want);
    assert_eq!(b.indices, want);
    // A mixture is not one dataset.
    let mixture = Mixture::new(vec![id, id], vec![1.0, 1.0]).unwrap();
    let m = Stream::mixture(mixture, 1, 10).unwrap();
    let fetch = Arc::new(Triples { threads: Default::default() });
    assert!(matches!(Loader::fetching(m, fetch, opts(0, 1, 1, 1)), Err(LoaderError::Sources(_))));
}

#[test]
fn on_error_skip_replaces_a_damaged_sample_within_its_mixture_source() {
    let dir = tempfile::tempdir().unwrap();
    let a = Source::new(vec![(store(dir.path(), "a", 300, 0), 8)]).unwrap();
    drop(store(dir.path(), "b", 40, 10_000));
    // Record 7 of b: raw 8-byte records back to back in chunk 0.
    {
        // One byte in place: the chunk file is 4 GiB, sparse.
        use std::os::unix::fs::FileExt;
        let chunk = std::fs::OpenOptions::new().read(true).write(true).open(dir.path().join("b/0.zr")).unwrap();
        let mut byte = [0u8];
        chunk.read_exact_at(&mut byte, 7 * 8).unwrap();
        chunk.write_all_at(&[!byte[0]], 7 * 8).unwrap();
    }
    let b = Source::new(vec![(Arc::new(Zrecord::open(dir.path().join("b")).unwrap()), 8)]).unwrap();
    let mixture = Mixture::new(vec![a.id(), b.id()], vec![0.5, 0.5]).unwrap();
    let stream = Stream::mixture(mixture, 4, 20).unwrap();
    let skip = |workers| LoaderOptions { num_workers: workers, on_error: OnError::Skip, ..LoaderOptions::default() };

    // Without skipping, the damaged sample stops the loader within two of b's epochs.
    let raising = Loader::new(stream.clone(), vec![a.clone(), b.clone()], opts(0, 1, 1, 2)).unwrap();
    let e = (0..20).find_map(|_| raising.next().err()).expect("b's sample 7 is read");
    assert_eq!(e.place().and_then(|p| p.record), Some(7), "{e}");

    let loader = Loader::new(stream.clone(), vec![a.clone(), b.clone()], skip(2)).unwrap();
    let mut met = 0;
    for step in 0..20 {
        let batch = loader.next().unwrap().unwrap();
        let mut want = vec![0u64; 20];
        let mut sources = vec![0u32; 20];
        stream.batch_at(step, 0, 1, &mut want, Some(&mut sources)).unwrap();
        for (slot, v) in values(&batch.fields[0]).into_iter().enumerate() {
            let (s, i) = (sources[slot], want[slot]);
            // b's sample 7 is read as b's sample 8; everything else as the stream says.
            let expect = if s == 1 && i == 7 {
                met += 1;
                10_008
            } else if s == 1 {
                10_000 + i
            } else {
                i
            };
            assert_eq!(v, expect, "step {step} slot {slot}");
        }
    }
    assert!(met >= 2, "the damaged sample was met in more than one epoch of b ({met})");
    let skipped = loader.skipped();
    assert_eq!(skipped.len(), 1, "reported once: {skipped:?}");
    let s = &skipped[0];
    assert_eq!((s.source, s.index, s.replacement, s.chunk), (1, 7, 8, Some(0)));
    assert_eq!((s.place.path.as_path(), s.place.record), (dir.path().join("b").as_path(), Some(7)));
}

#[test]
fn a_transform_runs_on_the_workers_and_its_result_comes_in_stream_order() {
    struct Sum(std::sync::Mutex<HashSet<std::thread::ThreadId>>);
    impl Transform for Sum {
        fn transform(&self, batch: zrecord::LoaderBatch) -> Box<dyn std::any::Any + Send> {
            self.0.lock().unwrap().insert(std::thread::current().id());
            Box::new((batch.step, values(&batch.fields[0]).iter().sum::<u64>()))
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let source = Source::new(vec![(store(dir.path(), "d", 100, 0), 8)]).unwrap();
    let stream = Stream::new(source.id(), Mode::Sequential, 0, 10).unwrap();
    let sum = Arc::new(Sum(Default::default()));
    let loader = Loader::new(stream, vec![source], opts(0, 1, 3, 6)).unwrap().with_transform(sum.clone()).unwrap();
    for step in 0..20u64 {
        let batch = loader.next().unwrap().unwrap();
        assert!(batch.fields.is_empty(), "the transform took the buffers");
        let (at, total) = *batch.fetched.unwrap().downcast::<(u64, u64)>().unwrap();
        let first = step * 10 % 100;
        assert_eq!((at, total), (step, (first..first + 10).sum::<u64>()));
    }
    let threads = sum.0.lock().unwrap().clone();
    assert!(!threads.contains(&std::thread::current().id()), "a transform ran in next()");
    assert!(threads.len() > 1, "one worker did every transform: {threads:?}");
    // Too late once the loader has started.
    assert!(loader.with_transform(sum).is_err());
}
