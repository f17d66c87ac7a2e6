//! The stream's contracts: the keyed bijection is a permutation, the global stream does not
//! depend on the world size, world size 1 is the Sampler, SHUFFLE epochs drop only the
//! tail, mixtures keep their proportions over every window and read each source in whole
//! epochs, and a saved state resumes the exact stream under another split of the same
//! global batch.

use std::collections::HashSet;

use proptest::prelude::*;
use zrecord_core::stream::Blocks;
use zrecord_core::stream::MAX_POSITION;
use zrecord_core::{DatasetId, Mixture, Mode, Permutation, Sampler, StateError, Stream, StreamError, StreamState};

fn id(length: u64) -> DatasetId {
    DatasetId { length, generation: 7 }
}

fn mode_of(n: u8) -> Mode {
    Mode::from_u8(n).unwrap()
}

/// `steps` global batches read by every rank of `world`, put back together rank by rank.
fn read_split(stream: &Stream, world: u64, from: u64, steps: u64) -> (Vec<u64>, Vec<u32>) {
    let mut shards: Vec<_> = (0..world).map(|r| stream.shard(r, world).unwrap()).collect();
    let b = shards[0].batch_size();
    for s in &mut shards {
        s.seek(from).unwrap();
    }
    let (mut idx, mut src) = (Vec::new(), Vec::new());
    let (mut i, mut o) = (vec![0u64; b], vec![0u32; b]);
    for step in from..from + steps {
        for s in &mut shards {
            assert_eq!(s.fill_with_sources(&mut i, &mut o), step);
            idx.extend_from_slice(&i);
            src.extend_from_slice(&o);
        }
    }
    (idx, src)
}

fn mixture(lengths: &[u64], weights: &[f64]) -> Mixture {
    Mixture::new(lengths.iter().map(|&n| id(n)).collect(), weights.to_vec()).unwrap()
}

// ---------------------------------------------------------------------------------------
// The bijection.

#[test]
fn permutation_is_a_bijection_for_every_small_length() {
    let mut seen = Vec::new();
    for len in 1..=3000u64 {
        let p = Permutation::new(len, len ^ 0x5eed, len % 3);
        seen.clear();
        seen.resize(len as usize, false);
        for k in 0..len {
            let i = p.at(k) as usize;
            assert!(!seen[i], "len {len}: index {i} at two positions");
            seen[i] = true;
        }
    }
}

fn assert_bitmap_permutation(len: u64, seed: u64) {
    let p = Permutation::new(len, seed, 3);
    let mut bits = vec![0u64; len.div_ceil(64) as usize];
    for k in 0..len {
        let i = p.at(k);
        let (w, b) = ((i / 64) as usize, i % 64);
        assert_eq!(bits[w] >> b & 1, 0, "len {len}: index {i} twice");
        bits[w] |= 1 << b;
    }
}

#[test]
fn permutation_is_a_bijection_at_the_store_limit() {
    // A 2 MiB bitmap each: every index of 0..N is hit exactly once.
    assert_bitmap_permutation(1 << 24, 1);
    assert_bitmap_permutation((1 << 24) - 3, 2);
    assert_bitmap_permutation(1_000_007, 3);
}

#[test]
fn permutation_has_no_collisions_in_a_large_sample_beyond_2_32() {
    for len in [(1u64 << 32) + 15, (1 << 40) - 1, u64::MAX] {
        let p = Permutation::new(len, 11, 0);
        let mut seen = HashSet::new();
        for j in 0..200_000u64 {
            let k = j.wrapping_mul(0x9E37_79B9_7F4A_7C15) % len;
            let i = p.at(k);
            assert!(i < len);
            assert!(seen.insert(i), "len {len}: collision at {k}");
            assert_eq!(p.position_of(i), k);
        }
    }
}

#[test]
fn permutation_looks_shuffled() {
    // Not a proof of randomness; catches a broken round function (identity-like maps,
    // epochs that repeat, orders that keep neighbours together).
    let n = 100_000u64;
    let p = Permutation::new(n, 42, 0);
    let q = Permutation::new(n, 42, 1);
    let mean = (n - 1) as f64 / 2.0;
    let (mut cov_self, mut cov_epochs, mut var, mut gaps) = (0.0, 0.0, 0.0, 0.0);
    let mut buckets = [0u32; 10];
    for k in 0..n {
        let (a, b) = (p.at(k) as f64 - mean, q.at(k) as f64 - mean);
        cov_self += (k as f64 - mean) * a;
        cov_epochs += a * b;
        var += a * a;
        if k + 1 < n {
            gaps += (p.at(k + 1) as f64 - p.at(k) as f64).abs();
        }
        if k < 10_000 {
            buckets[(p.at(k) * 10 / n) as usize] += 1;
        }
    }
    assert!((cov_self / var).abs() < 0.02, "position and index correlate: {}", cov_self / var);
    assert!((cov_epochs / var).abs() < 0.02, "epochs 0 and 1 correlate: {}", cov_epochs / var);
    // Mean distance between neighbours of a random order is n / 3.
    let mean_gap = gaps / (n - 1) as f64 / n as f64;
    assert!((mean_gap - 1.0 / 3.0).abs() < 0.01, "mean neighbour gap {mean_gap}");
    // The first 10% of the epoch spreads over the whole range (chi-square, 9 dof, p ~ 1e-6).
    let chi2: f64 = buckets.iter().map(|&c| (c as f64 - 1000.0).powi(2) / 1000.0).sum();
    assert!(chi2 < 45.0, "{buckets:?}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn permutation_is_a_bijection_for_sampled_lengths(len in 1u64..200_000, seed: u64, epoch: u64) {
        let p = Permutation::new(len, seed, epoch);
        let mut seen = vec![false; len as usize];
        for k in 0..len {
            let i = p.at(k) as usize;
            prop_assert!(!seen[i]);
            seen[i] = true;
        }
    }

    #[test]
    fn position_of_inverts_at(len in 1u64..u64::MAX, seed: u64, ks in prop::collection::vec(any::<u64>(), 1..50)) {
        let p = Permutation::for_source(len, seed, 3, 9);
        for k in ks {
            let k = k % len;
            prop_assert_eq!(p.position_of(p.at(k)), k);
        }
    }
}

// ---------------------------------------------------------------------------------------
// The global stream.

#[test]
fn world_size_one_is_the_sampler() {
    for (mode, n, b) in
        [(Mode::Sequential, 10, 4), (Mode::Sequential, 3, 7), (Mode::Iid, 1000, 7), (Mode::Shuffle, 103, 10)]
    {
        let stream = Stream::new(id(n), mode, 42, b).unwrap();
        let mut sampler = Sampler::new(n, b as usize, mode, 42).unwrap();
        let mut shard = stream.shard(0, 1).unwrap();
        let (mut x, mut y) = (vec![0; b as usize], vec![0; b as usize]);
        for step in 0..60 {
            sampler.fill(&mut x);
            assert_eq!(shard.fill(&mut y), step);
            assert_eq!(x, y, "{mode:?} step {step}");
        }
    }
}

#[test]
fn iid_stream_keeps_the_pinned_sampler_values() {
    // The same pinned draws as the Sampler's unit test: the loader's default stream.
    let stream = Stream::new(id(1_000_000), Mode::Iid, 42, 4).unwrap();
    let mut b = [0u64; 4];
    stream.batch_at(0, 0, 1, &mut b, None).unwrap();
    assert_eq!(b, [814305, 318821, 983894, 701135]);
}

#[test]
fn iid_jump_equals_replay() {
    // 300 global batches of 512: far past the walking limit, so the shard jumps.
    let stream = Stream::new(id(999_983), Mode::Iid, 5, 512).unwrap();
    let mut sampler = Sampler::new(999_983, 512, Mode::Iid, 5).unwrap();
    let mut replay = vec![0; 512];
    for _ in 0..=300 {
        sampler.fill(&mut replay);
    }
    let mut jumped = vec![0; 512];
    stream.batch_at(300, 0, 1, &mut jumped, None).unwrap();
    assert_eq!(jumped, replay);
}

#[test]
fn shuffle_epochs_cover_everything_but_the_tail() {
    let (n, g) = (1000u64, 64u64);
    let stream = Stream::new(id(n), Mode::Shuffle, 9, g).unwrap();
    let steps = stream.steps_per_epoch().unwrap();
    assert_eq!(steps, n / g);
    let (all, _) = read_split(&stream, 4, 0, 3 * steps);
    let per_epoch = (steps * g) as usize;
    let mut orders = Vec::new();
    for epoch in all.chunks(per_epoch) {
        let set: HashSet<_> = epoch.iter().copied().collect();
        assert_eq!(set.len(), per_epoch, "an index repeats within an epoch");
        assert!(epoch.iter().all(|&i| i < n));
        orders.push(epoch.to_vec());
    }
    assert_ne!(orders[0], orders[1]);
    assert_ne!(orders[1], orders[2]);
    // The dropped tail is the end of that epoch's permutation.
    let p = Permutation::new(n, 9, 1);
    let dropped: HashSet<_> = (steps * g..n).map(|k| p.at(k)).collect();
    let kept: HashSet<_> = orders[1].iter().copied().collect();
    assert!(dropped.is_disjoint(&kept));
    assert_eq!(dropped.len() + kept.len(), n as usize);
    assert_eq!(stream.epoch_of(steps), Some((1, 0)));
}

#[test]
fn construction_errors_are_typed() {
    assert_eq!(Stream::new(id(0), Mode::Iid, 0, 1), Err(StreamError::EmptyDataset));
    assert_eq!(Stream::new(id(5), Mode::Iid, 0, 0), Err(StreamError::ZeroBatch));
    assert_eq!(
        Stream::new(id(5), Mode::Shuffle, 0, 6),
        Err(StreamError::BatchLargerThanEpoch { length: 5, global_batch: 6 })
    );
    let s = Stream::new(id(100), Mode::Shuffle, 0, 12).unwrap();
    assert_eq!(s.shard(0, 5).err(), Some(StreamError::WorldSize { world_size: 5, global_batch: 12 }));
    assert_eq!(s.shard(0, 0).err(), Some(StreamError::WorldSize { world_size: 0, global_batch: 12 }));
    assert_eq!(s.shard(4, 4).err(), Some(StreamError::Rank { rank: 4, world_size: 4 }));
    let mut shard = s.shard(1, 4).unwrap();
    assert_eq!(shard.batch_size(), 3);
    assert!(matches!(shard.seek(MAX_POSITION / 12), Err(StreamError::PositionOverflow { .. })));
    assert!(shard.seek(MAX_POSITION / 12 - 1).is_ok());
}

fn any_stream() -> impl Strategy<Value = (Stream, Vec<u64>)> {
    // (stream, world sizes dividing its global batch)
    // SHUFFLE streams in blocks too (0 records: the full permutation).
    let single = (0u8..3, 1u64..5000, any::<u64>(), 1u64..5, 1u64..5, prop_oneof![Just(0u64), 2u64..60], 1u64..6)
        .prop_filter_map("an epoch holds a global batch", |(mode, n, seed, b, w, records, window)| {
            let g = b * w * 2;
            let stream = Stream::new(id(n), mode_of(mode), seed, g).ok()?;
            let stream = match Blocks::new(records, window) {
                Ok(blocks) if stream.mode() == Mode::Shuffle => stream.with_blocks(blocks).unwrap(),
                _ => stream,
            };
            Some((stream, vec![1, w, 2 * w, g]))
        });
    let mixed = (prop::collection::vec((1u64..300, 0.05f64..5.0), 1..5), any::<u64>(), 1u64..7, 1u64..4).prop_map(
        |(sources, seed, b, w)| {
            let (lengths, weights): (Vec<_>, Vec<_>) = sources.into_iter().unzip();
            let g = b * w;
            (Stream::mixture(mixture(&lengths, &weights), seed, g).unwrap(), vec![1, w, g])
        },
    );
    prop_oneof![single, mixed]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn global_stream_does_not_depend_on_world_size((stream, worlds) in any_stream(), from in 0u64..200, steps in 1u64..12) {
        let reference = read_split(&stream, 1, from, steps);
        let g = stream.global_batch() as usize;
        let mut one = vec![0u64; g];
        let mut src = vec![0u32; g];
        stream.batch_at(from, 0, 1, &mut one, Some(&mut src)).unwrap();
        prop_assert_eq!(&reference.0[..g], &one[..]);
        prop_assert_eq!(&reference.1[..g], &src[..]);
        for w in worlds {
            prop_assert_eq!(&read_split(&stream, w, from, steps), &reference, "world size {}", w);
            let b = g / w as usize;
            let r = w - 1;
            let mut slice = vec![0u64; b];
            stream.batch_at(from, r, w, &mut slice, None).unwrap();
            prop_assert_eq!(&slice[..], &one[r as usize * b..(r as usize + 1) * b]);
        }
    }

    #[test]
    fn resume_under_another_split_continues_the_exact_stream(
        (stream, worlds) in any_stream(),
        at in 0u64..150,
        after in 1u64..10,
        a in 0usize..4,
        b in 0usize..4,
    ) {
        let w_before = worlds[a % worlds.len()];
        let w_after = worlds[b % worlds.len()];
        let uninterrupted = read_split(&stream, w_before, 0, at + after);
        // The job stops after consuming `at` global batches, saves, and restarts elsewhere.
        let saved = stream.state(at).encode();
        let restarted = Stream::clone(&stream);
        let step = restarted.resume(&StreamState::decode(&saved).unwrap()).unwrap();
        prop_assert_eq!(step, at);
        let resumed = read_split(&restarted, w_after, step, after);
        let g = stream.global_batch() as usize;
        prop_assert_eq!(&uninterrupted.0[at as usize * g..], &resumed.0[..]);
        prop_assert_eq!(&uninterrupted.1[at as usize * g..], &resumed.1[..]);
    }

    #[test]
    fn seeking_back_and_forth_reads_the_same_batches((stream, worlds) in any_stream(), steps in prop::collection::vec(0u64..3000, 1..8)) {
        let w = *worlds.last().unwrap();
        let mut shard = stream.shard(w - 1, w).unwrap();
        let fresh = stream.shard(w - 1, w).unwrap();
        let b = shard.batch_size();
        for step in steps {
            let (mut x, mut y) = (vec![0; b], vec![0; b]);
            shard.seek(step).unwrap();
            shard.fill(&mut x);
            let mut other = fresh.clone();
            other.seek(step).unwrap();
            other.fill(&mut y);
            prop_assert_eq!(x, y);
        }
    }
}

// ---------------------------------------------------------------------------------------
// Mixtures.

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn mixture_proportions_hold_over_any_window(
        weights in prop::collection::vec(0.001f64..1.0, 1..7),
        seed: u64,
        start in 0u64..MAX_POSITION - 100_000,
    ) {
        let m = mixture(&vec![10; weights.len()], &weights);
        let total: f64 = weights.iter().sum();
        let n = 100_000u64;
        let mut counts = vec![0u64; weights.len()];
        for p in start..start + n {
            counts[m.source_at(seed, p) as usize] += 1;
        }
        for (s, (&c, &w)) in counts.iter().zip(&weights).enumerate() {
            let share = c as f64 / n as f64;
            let want = w / total;
            // The contract: within 0.5 percentage points. A golden-ratio rotation does far
            // better: the count is within a few dozen of its expectation.
            prop_assert!((share - want).abs() < 0.005, "source {} share {} want {}", s, share, want);
            prop_assert!((c as f64 - want * n as f64).abs() < 40.0, "source {} count {} want {}", s, c, want * n as f64);
        }
    }
}

#[test]
fn mixture_reads_each_source_in_whole_epochs() {
    let lengths = [7u64, 50, 333];
    let stream = Stream::mixture(mixture(&lengths, &[0.2, 0.5, 0.3]), 77, 32).unwrap();
    let (idx, src) = read_split(&stream, 4, 0, 200);
    for (s, &n) in lengths.iter().enumerate() {
        let picks: Vec<u64> = idx.iter().zip(&src).filter(|(_, &o)| o as usize == s).map(|(&i, _)| i).collect();
        assert!(picks.len() as u64 >= 2 * n, "source {s} picked only {} times", picks.len());
        for (e, epoch) in picks.chunks_exact(n as usize).enumerate() {
            let set: HashSet<_> = epoch.iter().copied().collect();
            assert_eq!(set.len() as u64, n, "source {s} epoch {e} repeats an index");
            assert!(epoch.iter().all(|&i| i < n));
            let p = Permutation::for_source(n, 77, s as u32, e as u64);
            assert_eq!(epoch, (0..n).map(|k| p.at(k)).collect::<Vec<_>>());
        }
    }
}

// ---------------------------------------------------------------------------------------
// The state.

proptest! {
    #[test]
    fn state_round_trips(
        seed: u64, mode in 0u8..3, global_batch: u64, step: u64,
        datasets in prop::collection::vec((any::<u64>(), any::<u64>()), 1..9),
        weights in prop::option::of(prop::collection::vec(any::<f64>().prop_filter("finite", |w| w.is_finite()), 8)),
    ) {
        let datasets: Vec<_> = datasets.into_iter().map(|(length, generation)| DatasetId { length, generation }).collect();
        let weights = weights.map(|w| w[..datasets.len()].to_vec());
        let datasets = if weights.is_some() { datasets } else { datasets[..1].to_vec() };
        let state = StreamState { version: 1, seed, mode, global_batch, step, datasets, weights, pack: None, eras: Vec::new(), blocks: None };
        let text = state.encode();
        prop_assert!(text.len() < 1024, "{} bytes: {}", text.len(), text);
        let back = StreamState::decode(&text).unwrap();
        // Compare weights bit for bit (-0.0 and 0.0 differ as bits but compare equal).
        prop_assert_eq!(
            back.weights.as_ref().map(|w| w.iter().map(|x| x.to_bits()).collect::<Vec<_>>()),
            state.weights.as_ref().map(|w| w.iter().map(|x| x.to_bits()).collect::<Vec<_>>())
        );
        prop_assert_eq!(back, state);
    }
}

#[test]
fn state_is_small_and_readable() {
    let stream = Stream::new(DatasetId { length: 1 << 24, generation: 3 }, Mode::Shuffle, 42, 1024).unwrap();
    let text = stream.state(123_456).encode();
    assert_eq!(
        text,
        r#"{"version":1,"seed":42,"mode":2,"global_batch":1024,"step":123456,"datasets":[{"length":16777216,"generation":3}]}"#
    );
    let big = DatasetId { length: u64::MAX, generation: u64::MAX };
    let m = Mixture::new(vec![big; 8], vec![1.0 / 3.0; 8]).unwrap();
    let text = Stream::mixture(m, u64::MAX, u64::MAX).unwrap().state(u64::MAX).encode();
    assert!(text.len() < 1024, "{} bytes", text.len());
}

/// Every integer of a parsed JSON text, as the double a JavaScript `JSON.parse` keeps.
fn doubles_of(value: &serde_json::Value) -> Vec<f64> {
    match value {
        serde_json::Value::Number(n) => vec![n.as_f64().unwrap()],
        serde_json::Value::Array(a) => a.iter().flat_map(doubles_of).collect(),
        serde_json::Value::Object(o) => o.values().flat_map(doubles_of).collect(),
        _ => vec![],
    }
}

#[test]
fn a_state_keeps_its_numbers_through_a_parser_of_doubles() {
    // Identities of stores zrecord creates are 64-bit hashes, and seeds may be too: at
    // 2^53 and above they are written as decimal strings, below as numbers; both read.
    let big = DatasetId { length: 4000, generation: 9_846_341_769_744_536_001 };
    let stream = Stream::new(big, Mode::Shuffle, u64::MAX - 6, 64).unwrap();
    let text = stream.state(30).encode();
    assert!(text.contains(r#""generation":"9846341769744536001""#), "{text}");
    assert!(text.contains(r#""seed":"18446744073709551609""#), "{text}");
    let value: serde_json::Value = serde_json::from_str(&text).unwrap();
    for d in doubles_of(&value) {
        assert!(d < 9_007_199_254_740_992.0, "{d} would lose digits in a double: {text}");
    }
    assert_eq!(stream.resume(&StreamState::decode(&text).unwrap()).unwrap(), 30);
    // What a JavaScript round trip writes back (the same text) and what older builds wrote
    // (numbers) both load.
    let small = Stream::new(DatasetId { length: 4000, generation: (1 << 53) - 1 }, Mode::Shuffle, 7, 64).unwrap();
    let text = small.state(30).encode();
    assert!(text.contains(r#""generation":9007199254740991"#), "{text}");
    let old = text.replace(r#""seed":7"#, r#""seed":"7""#);
    assert_eq!(small.resume(&StreamState::decode(&old).unwrap()).unwrap(), 30);
    let numbers = stream.state(30).encode().replace(r#""9846341769744536001""#, "9846341769744536001");
    let numbers = numbers.replace(r#""18446744073709551609""#, "18446744073709551609");
    assert_eq!(stream.resume(&StreamState::decode(&numbers).unwrap()).unwrap(), 30);
    let e = StreamState::decode(&text.replace(r#"9007199254740991"#, r#""9x""#)).unwrap_err();
    assert!(e.to_string().contains("not an unsigned 64-bit integer"), "{e}");
}

#[test]
fn loading_a_state_into_another_stream_says_why() {
    let base = Stream::new(id(1000), Mode::Shuffle, 1, 64).unwrap();
    let state = base.state(40);
    let check = |s: Stream| s.resume(&state).unwrap_err();
    assert_eq!(
        check(Stream::new(id(999), Mode::Shuffle, 1, 64).unwrap()),
        StateError::DatasetLength { index: 0, saved: 1000, current: 999 }
    );
    assert_eq!(
        check(Stream::new(DatasetId { length: 1000, generation: 8 }, Mode::Shuffle, 1, 64).unwrap()),
        StateError::DatasetGeneration { index: 0, length: 1000, saved: 7, current: 8 }
    );
    assert_eq!(check(Stream::new(id(1000), Mode::Shuffle, 2, 64).unwrap()), StateError::Seed { saved: 1, current: 2 });
    assert_eq!(check(Stream::new(id(1000), Mode::Iid, 1, 64).unwrap()), StateError::Mode { saved: 2, current: 1 });
    let e = check(Stream::new(id(1000), Mode::Shuffle, 1, 128).unwrap());
    assert_eq!(e, StateError::GlobalBatch { saved: 64, current: 128 });
    assert!(e.to_string().contains("batch_size * world_size"), "{e}");
    let mixed = Stream::mixture(mixture(&[1000], &[1.0]), 1, 64).unwrap();
    assert!(matches!(check(mixed), StateError::Kind { .. }));

    let m = Stream::mixture(mixture(&[10, 20], &[0.7, 0.3]), 5, 8).unwrap();
    let saved = m.state(3);
    assert_eq!(Stream::mixture(mixture(&[10, 20], &[7.0, 3.0]), 5, 8).unwrap().resume(&saved), Ok(3));
    assert!(matches!(
        Stream::mixture(mixture(&[10, 20], &[0.6, 0.4]), 5, 8).unwrap().resume(&saved),
        Err(StateError::Weights { .. })
    ));
    assert_eq!(
        Stream::mixture(mixture(&[10, 20, 5], &[0.6, 0.3, 0.1]), 5, 8).unwrap().resume(&saved),
        Err(StateError::SourceCount { saved: 2, current: 3 })
    );
    assert_eq!(
        Stream::mixture(mixture(&[10, 21], &[0.7, 0.3]), 5, 8).unwrap().resume(&saved),
        Err(StateError::DatasetLength { index: 1, saved: 20, current: 21 })
    );
}

#[test]
fn decoding_rejects_what_is_not_a_state() {
    let ok = r#"{"version":1,"seed":42,"mode":2,"global_batch":8,"step":3,"datasets":[{"length":16,"generation":0}]}"#;
    assert!(StreamState::decode(ok).is_ok());
    assert_eq!(
        StreamState::decode(&ok.replace(r#""version":1"#, r#""version":4"#)),
        Err(StateError::UnsupportedVersion { found: 4, supported: 3 })
    );
    // Version 2 is version 1 with the eras of a dataset that grew, version 3 with the
    // blocks of a block shuffle; one without them is no state.
    for v in [2, 3] {
        assert!(matches!(
            StreamState::decode(&ok.replace(r#""version":1"#, &format!(r#""version":{v}"#))),
            Err(StateError::Malformed(_))
        ));
    }
    for bad in [
        "",
        "[]",
        "not json",
        &ok.replace(r#""version":1,"#, ""),
        &ok.replace(r#""step":3"#, r#""step":-3"#),
        &ok.replace(r#""step":3"#, r#""step":3,"epoch":0"#),
        &ok.replace(r#""seed":42,"#, ""),
        &ok.replace(r#"[{"length":16,"generation":0}]"#, "[]"),
        &ok.replace(r#""step":3"#, r#""step":3,"weights":["x"]"#),
    ] {
        assert!(matches!(StreamState::decode(bad), Err(StateError::Malformed(_))), "{bad:?}");
    }
    // A step past the stream's end is refused when loaded, not when a batch is read.
    let s = Stream::new(id(16), Mode::Sequential, 42, 8).unwrap();
    let mut far = s.state(0);
    far.step = u64::MAX;
    assert_eq!(s.resume(&far), Err(StateError::Step { step: u64::MAX }));
}

/// Chi-square per degree of freedom of `(at(0), at(n - 1))` over `seeds` keys, the two
/// positions bucketed into `buckets` ranges each.
fn pair_chi2(n: u64, buckets: u64, seeds: u64) -> f64 {
    let mut cells = vec![0u32; (buckets * buckets) as usize];
    for seed in 0..seeds {
        let p = Permutation::new(n, seed, 0);
        let (a, b) = (p.at(0) * buckets / n, p.at(n - 1) * buckets / n);
        cells[(a * buckets + b) as usize] += 1;
    }
    // Two distinct positions never hold the same index: expected counts per cell follow
    // from the bucket sizes, which are equal here (buckets divides n).
    let size = n / buckets;
    let pairs = (n * (n - 1)) as f64;
    let (mut chi2, mut dof) = (0.0, -1.0);
    for a in 0..buckets {
        for b in 0..buckets {
            let in_cell = if a == b { size * (size - 1) } else { size * size } as f64;
            let got = cells[(a * buckets + b) as usize] as f64;
            if in_cell == 0.0 {
                assert_eq!(got, 0.0, "n {n}: one index at two positions");
                continue;
            }
            let want = seeds as f64 * in_cell / pairs;
            chi2 += (got - want).powi(2) / want;
            dof += 1.0;
        }
    }
    chi2 / dof
}

#[test]
fn pairs_of_positions_are_uniform() {
    // Tiny domains (12 rounds) and a 2^16 domain (6 rounds). A chi-square per degree of
    // freedom near 1 is uniform; a broken round function gives several.
    for (n, buckets, seeds) in [(8, 8, 5_000), (64, 64, 60_000), (40_000, 50, 40_000)] {
        let c = pair_chi2(n, buckets, seeds);
        assert!(c < 1.4, "n {n}: chi-square per dof {c}");
    }
}

#[test]
fn far_positions_agree_whether_reached_by_jump_or_by_walk() {
    // A reader that jumped (IID) or recounted (mixture) to a far step, then walked one
    // batch, reads what a reader jumping straight to the next step reads.
    let streams = [
        Stream::new(id(1 << 24), Mode::Iid, 3, 1024).unwrap(),
        Stream::new(id(1 << 24), Mode::Shuffle, 3, 1024).unwrap(),
        Stream::mixture(mixture(&[1 << 24, 1000, 7], &[0.5, 0.4, 0.1]), 3, 1024).unwrap(),
    ];
    for stream in streams {
        for far in [1_000_000u64, 1 << 40, MAX_POSITION / 1024 - 2] {
            let mut walked = stream.shard(3, 4).unwrap();
            walked.seek(far).unwrap();
            let (mut a, mut b) = (vec![0; 256], vec![0; 256]);
            let (mut sa, mut sb) = (vec![0; 256], vec![0; 256]);
            walked.fill(&mut a);
            walked.fill_with_sources(&mut a, &mut sa);
            let mut jumped = stream.shard(3, 4).unwrap();
            jumped.seek(far + 1).unwrap();
            jumped.fill_with_sources(&mut b, &mut sb);
            assert_eq!((a, sa), (b, sb), "{:?} at step {far}", stream.mode());
        }
    }
}

/// The schedule's next use of each sample is the first position at or after `from` where
/// the stream reads it, SEQUENTIAL and SHUFFLE (dropped tail included).
#[test]
fn schedule_names_each_samples_next_position() {
    use zrecord_core::stream::Schedule;
    let cases = [(Mode::Shuffle, 103u64, 10u64, None), (Mode::Sequential, 50, 7, None), (Mode::Shuffle, 64, 64, None)];
    let blocked = [(Mode::Shuffle, 103, 10, Some((7, 3))), (Mode::Shuffle, 64, 8, Some((4, 2)))];
    for (mode, n, g, blocks) in cases.into_iter().chain(blocked) {
        let stream = Stream::new(DatasetId { length: n, generation: 1 }, mode, 5, g).unwrap();
        let stream = match blocks {
            Some((b, w)) => stream.with_blocks(Blocks::new(b, w).unwrap()).unwrap(),
            None => stream,
        };
        let steps = 40;
        let mut positions = vec![0u64; (steps * g) as usize];
        for step in 0..steps {
            let s = (step * g) as usize;
            stream.batch_at(step, 0, 1, &mut positions[s..s + g as usize], None).unwrap();
        }
        let mut schedule = Schedule::new(stream.clone());
        for from in [0u64, 1, 9, 10, 99, 100, 150, 250] {
            for index in 0..n {
                let want = positions.iter().skip(from as usize).position(|&i| i == index).map(|k| from + k as u64);
                let got = schedule.next_use(index, from);
                if let Some(w) = want {
                    assert_eq!(got, Some(w), "{mode:?} {blocks:?} index {index} from {from}");
                }
            }
        }
    }
    let iid = Stream::new(DatasetId { length: 10, generation: 1 }, Mode::Iid, 5, 2).unwrap();
    assert_eq!(Schedule::new(iid).next_use(3, 0), None);
}

/// One global batch of `stream` at `step`, read by one rank.
fn batch(stream: &Stream, step: u64) -> Vec<u64> {
    let mut out = vec![0u64; stream.global_batch() as usize];
    stream.batch_at(step, 0, 1, &mut out, None).unwrap();
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// A state saved on a dataset of `n` samples resumes on it grown by appends to `n + more`:
    /// the running pass reads exactly what it would have, the grown length takes over where
    /// it ends (for SHUFFLE, the next epoch is the grown dataset's epoch of that number), and
    /// the resumed stream's own states resume it again on any split.
    #[test]
    fn a_state_resumes_on_its_dataset_grown_by_appends(
        mode in 0u8..3, n in 1u64..120, more in 1u64..150, g in 1u64..12, seed in any::<u64>(),
        saved_at in 0u64..40, later in 0u64..30, world in 1u64..4, blocks in 0u64..9,
    ) {
        let mode = mode_of(mode);
        prop_assume!(mode != Mode::Shuffle || n >= g);
        prop_assume!(g % world == 0);
        let (before, after) = (id(n), DatasetId { length: n + more, generation: 8 });
        // A SHUFFLE stream in blocks of 2-8 samples, windows of 2, when `blocks` says so.
        let blocked = |s: Stream| match Blocks::new(blocks, 2) {
            Ok(b) if mode == Mode::Shuffle => s.with_blocks(b).unwrap(),
            _ => s,
        };
        let old = blocked(Stream::new(before, mode, seed, g).unwrap());
        let fresh = blocked(Stream::new(after, mode, seed, g).unwrap());
        let state = old.state(saved_at);
        // Without the dataset's history the state is refused, as before.
        prop_assert!(fresh.resumed(&state, &[]).is_err());
        let (grown, step) = fresh.resumed(&state, &[id(3), before]).unwrap();
        prop_assert_eq!(step, saved_at);
        prop_assert_eq!(grown.datasets(), &[after]);
        let eras = grown.eras().to_vec();
        let takeover = eras.last().unwrap().position;
        prop_assert!(takeover >= saved_at * g || eras.len() == 1 && saved_at == 0);
        for t in saved_at..saved_at + 2 * n / g + 3 {
            let got = batch(&grown, t);
            if (t + 1) * g <= takeover {
                prop_assert_eq!(&got, &batch(&old, t), "step {} of the running pass", t);
            }
            if t * g >= takeover {
                match mode {
                    Mode::Shuffle => {
                        // Epoch e of the grown era is the grown dataset's epoch e.
                        let (e, within) = grown.epoch_of(t).unwrap();
                        let spe = fresh.steps_per_epoch().unwrap();
                        prop_assert_eq!(&got, &batch(&fresh, e * spe + within));
                    }
                    Mode::Sequential => {
                        let want: Vec<u64> = (0..g).map(|i| (t * g + i - takeover) % (n + more)).collect();
                        prop_assert_eq!(&got, &want);
                    }
                    Mode::Iid => prop_assert_eq!(&got, &batch(&fresh, t)),
                }
            }
            prop_assert!(got.iter().all(|&i| i < n + more));
        }
        // Saved again later (on another split) and resumed: the same stream.
        let again = StreamState::decode(&grown.state(saved_at + later).encode()).unwrap();
        let (resumed, at) = fresh.resumed(&again, &[before]).unwrap();
        prop_assert_eq!(resumed.eras(), grown.eras());
        prop_assert_eq!(read_split(&resumed, world, at, 3).0, read_split(&grown, 1, at, 3).0);
    }
}

#[test]
fn a_grown_state_needs_the_grown_stream() {
    let (before, after) = (id(100), DatasetId { length: 150, generation: 8 });
    let old = Stream::new(before, Mode::Shuffle, 1, 32).unwrap();
    let fresh = Stream::new(after, Mode::Shuffle, 1, 32).unwrap();
    let (grown, _) = fresh.resumed(&old.state(4), &[before]).unwrap();
    let saved = StreamState::decode(&grown.state(5).encode()).unwrap();
    assert_eq!(saved.version, 2);
    // The plain resume cannot follow it; the grown dataset again grown can.
    assert!(matches!(fresh.resume(&saved), Err(StateError::Grown { .. })));
    let bigger = Stream::new(DatasetId { length: 400, generation: 9 }, Mode::Shuffle, 1, 32).unwrap();
    let (twice, _) = bigger.resumed(&saved, &[before, after]).unwrap();
    assert_eq!(twice.eras().len(), 2, "the second growth replaces the era nobody read yet");
    assert_eq!(twice.eras()[1].length, 400);
}

// ---------------------------------------------------------------------------------------
// Block shuffle.

/// A stream in blocks reads each epoch's samples once (but the dropped tail), in batches
/// that hold runs of neighbours; its state is version 3 and names the blocks; a state of
/// other blocks, or of none, is refused saying so; only SHUFFLE over one dataset takes
/// blocks.
#[test]
fn a_block_shuffle_reads_epochs_in_runs_and_its_state_names_the_blocks() {
    let (n, g) = (10_000u64, 100u64);
    let blocks = Blocks::new(50, 4).unwrap();
    let stream = Stream::new(id(n), Mode::Shuffle, 3, g).unwrap().with_blocks(blocks).unwrap();
    let full = Stream::new(id(n), Mode::Shuffle, 3, g).unwrap();
    assert_eq!(stream.steps_per_epoch(), Some(100));
    let (all, _) = read_split(&stream, 4, 0, 200);
    for epoch in all.chunks((n / g * g) as usize) {
        let set: HashSet<_> = epoch.iter().copied().collect();
        assert_eq!(set.len(), epoch.len(), "a sample repeats within an epoch");
    }
    assert_ne!(all[..n as usize], all[n as usize..], "epochs differ");
    // A window of 200 samples is 4 runs of 50 neighbours (one of them may wrap around at
    // the rotation); the full permutation has almost no neighbours side by side in a sorted batch.
    let neighbours = |v: &[u64]| {
        let mut v = v.to_vec();
        v.sort_unstable();
        v.windows(2).filter(|p| p[1] == p[0] + 1).count()
    };
    assert!(neighbours(&all[..200]) >= 200 - 4 - 1, "{} neighbours", neighbours(&all[..200]));
    assert!(neighbours(&batch(&full, 0)) < 10);

    let state = stream.state(7);
    assert_eq!(state.version, zrecord_core::stream::STATE_VERSION_BLOCKS);
    let text = state.encode();
    assert!(text.contains(r#""blocks":[50,4]"#), "{text}");
    let back = StreamState::decode(&text).unwrap();
    assert_eq!(back, state);
    assert_eq!(stream.resume(&back), Ok(7));
    assert_eq!(
        full.resume(&back),
        Err(StateError::Blocks { saved: Some(blocks), current: None }),
        "a state in blocks resumes no full permutation"
    );
    let other = Stream::new(id(n), Mode::Shuffle, 3, g).unwrap().with_blocks(Blocks::new(50, 2).unwrap()).unwrap();
    let err = other.resume(&back).unwrap_err();
    assert!(err.to_string().contains("blocks of 50 neighbouring samples, 4 blocks"), "{err}");
    assert!(matches!(stream.resume(&full.state(7)), Err(StateError::Blocks { saved: None, .. })));

    // Versions and blocks go together; bad blocks are malformed.
    let v1 = text.replace(r#""version":3"#, r#""version":1"#);
    assert!(matches!(StreamState::decode(&v1), Err(StateError::Malformed(_))), "{v1}");
    let sequential = text.replace(r#""mode":2"#, r#""mode":0"#);
    assert!(matches!(StreamState::decode(&sequential), Err(StateError::Malformed(m)) if m.contains("SHUFFLE")));
    let bad = text.replace("[50,4]", "[1,4]");
    assert!(matches!(StreamState::decode(&bad), Err(StateError::Malformed(m)) if m.contains("at least 2")));

    for (other, what) in [
        (Stream::new(id(n), Mode::Sequential, 3, g).unwrap(), "SEQUENTIAL"),
        (Stream::new(id(n), Mode::Iid, 3, g).unwrap(), "IID"),
        (Stream::mixture(mixture(&[10, 20], &[1.0, 1.0]), 3, 4).unwrap(), "a mixture"),
    ] {
        assert_eq!(other.with_blocks(blocks).err(), Some(StreamError::BlocksNeedShuffle(what)));
    }
    assert_eq!(Blocks::new(1, 8).err(), Some(StreamError::BadBlocks { records: 1, window: 8 }));
}
