//! Shuffled packed rows (`stream/rows.rs`): each epoch's batches read distinct rows of
//! that epoch's concatenation, every row whole and in place; a planner started at any step
//! plans what one that ran from the start plans; batches draw from across the epoch; a
//! mixture's batches hold each source's share to within a row.

use std::collections::{HashMap, HashSet};

use proptest::prelude::*;
use zrecord_core::stream::pack::{DocLengths, PackError, PackMode, PackSpec, Packer, Plan};
use zrecord_core::stream::row_index::RowIndexKey;
use zrecord_core::stream::Permutation;
use zrecord_core::{DatasetId, Mixture, Mode, Stream};

struct Lengths(Vec<u64>);

impl DocLengths for Lengths {
    type Error = PackError;
    fn lengths(&mut self, _source: usize, indices: &[u64], out: &mut [u64]) -> Result<(), PackError> {
        for (o, &i) in out.iter_mut().zip(indices) {
            *o = self.0[i as usize];
        }
        Ok(())
    }
}

/// Each mixture source's document lengths.
struct SourceLengths(Vec<Vec<u64>>);

impl DocLengths for SourceLengths {
    type Error = PackError;
    fn lengths(&mut self, source: usize, indices: &[u64], out: &mut [u64]) -> Result<(), PackError> {
        for (o, &i) in out.iter_mut().zip(indices) {
            *o = self.0[source][i as usize];
        }
        Ok(())
    }
}

fn mixture_docs(of: &[Vec<u64>], weights: &[f64], seed: u64) -> Stream {
    let ids = of.iter().map(|l| DatasetId { length: l.len() as u64, generation: 1 }).collect();
    Stream::mixture(Mixture::new(ids, weights.to_vec()).unwrap(), seed, 1).unwrap()
}

fn spec(seq_len: u32, bos: bool, eos: bool) -> PackSpec {
    PackSpec {
        seq_len,
        mode: PackMode::Concat,
        bos: bos.then_some(1),
        eos: eos.then_some(2),
        pad: 0,
        window: 0,
        shuffle_rows: true,
    }
}

fn docs(n: u64, seed: u64) -> Stream {
    Stream::new(DatasetId { length: n, generation: 1 }, Mode::Shuffle, seed, 1).unwrap()
}

/// Lengths 0..max-1 (some documents empty), spread by a hash.
fn lengths_of(n: u64, max: u64, salt: u64) -> Vec<u64> {
    (0..n).map(|i| (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ salt).rotate_left(23) % max).collect()
}

/// Virtual tokens before each position of epoch `epoch`'s order.
fn running(lengths: &[u64], s: &PackSpec, seed: u64, epoch: u64) -> Vec<u64> {
    running_of(lengths, s, seed, 0, epoch)
}

/// The same for mixture source `source`.
fn running_of(lengths: &[u64], s: &PackSpec, seed: u64, source: u32, epoch: u64) -> Vec<u64> {
    let order = Permutation::for_source(lengths.len() as u64, seed, source, epoch);
    let mut at = vec![0u64];
    for k in 0..lengths.len() as u64 {
        let next = at.last().unwrap() + s.virtual_len(lengths[order.at(k) as usize]);
        at.push(next);
    }
    at
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(40))]

    /// Over each of two epochs: every row whole, each piece the document the epoch's order
    /// puts at its position, and the rows of the epoch's batches distinct rows of it.
    #[test]
    fn each_epoch_reads_distinct_whole_rows(n in 1u64..150, max in 1u64..90, seq_len in 1u32..64, rows in 1u32..5,
                                            bos: bool, eos: bool, seed: u64) {
        let s = spec(seq_len, bos, eos);
        let of = lengths_of(n, max, seed);
        let tokens: u64 = of.iter().map(|&l| s.virtual_len(l)).sum();
        let stream = docs(n, seed);
        let mut lengths = Lengths(of.clone());
        let Ok(mut packer) = Packer::new(&stream, s, rows, 0, None, &mut lengths) else {
            // Fewer rows than one batch: refused, and only then.
            prop_assert!(tokens / u64::from(seq_len) < u64::from(rows));
            return Ok(());
        };
        let per_epoch = packer.steps_per_epoch().unwrap();
        prop_assert_eq!(per_epoch, tokens / u64::from(seq_len) / u64::from(rows));
        let mut plan = Plan::default();
        for epoch in 0..2u64 {
            let at = running(&of, &s, seed, epoch);
            let order = Permutation::new(n, seed, epoch);
            let mut seen = HashSet::new();
            for _ in 0..per_epoch {
                packer.plan(&mut lengths, &mut plan).unwrap();
                let mut row_of: HashMap<u32, (u64, u32)> = HashMap::new();
                for p in &plan.placed {
                    let d = &p.piece.doc;
                    prop_assert!(d.position / n == epoch, "a piece of another epoch");
                    let k = d.position % n;
                    prop_assert_eq!(d.index, order.at(k));
                    prop_assert_eq!(d.len, s.virtual_len(of[d.index as usize]));
                    prop_assert!(p.piece.len > 0 && p.piece.start + u64::from(p.piece.len) <= d.len);
                    // Where the piece sits in the epoch's concatenation gives its row.
                    let offset = at[k as usize] + p.piece.start - u64::from(p.col);
                    prop_assert_eq!(offset % u64::from(seq_len), 0);
                    let filled = row_of.entry(p.row).or_insert((offset, 0));
                    prop_assert_eq!(filled.0, offset, "one row, one stretch of tokens");
                    prop_assert_eq!(filled.1, p.col, "pieces follow each other");
                    filled.1 += p.piece.len;
                }
                prop_assert_eq!(row_of.len(), rows as usize);
                for (offset, filled) in row_of.values() {
                    prop_assert_eq!(*filled, seq_len);
                    prop_assert!(offset + u64::from(seq_len) <= tokens);
                    prop_assert!(seen.insert(*offset), "row at {} twice in one epoch", offset);
                }
            }
        }
    }

    /// A packer made at step `k` plans what the one that ran from step 0 plans there.
    #[test]
    fn a_planner_at_any_step_plans_the_same(n in 1u64..120, seq_len in 1u32..40, rows in 1u32..4, seed: u64,
                                            stop in 0u64..20) {
        let s = spec(seq_len, false, true);
        let of = lengths_of(n, 70, !seed);
        let stream = docs(n, seed);
        let mut lengths = Lengths(of);
        let Ok(mut whole) = Packer::new(&stream, s, rows, 0, None, &mut lengths) else { return Ok(()) };
        let mut plan = Plan::default();
        for _ in 0..stop {
            whole.plan(&mut lengths, &mut plan).unwrap();
        }
        let mut resumed = Packer::new(&stream, s, rows, stop, Some(&whole.cursor()), &mut lengths).unwrap();
        let mut other = Plan::default();
        for _ in 0..5 {
            whole.plan(&mut lengths, &mut plan).unwrap();
            resumed.plan(&mut lengths, &mut other).unwrap();
            prop_assert_eq!(plan.step, other.step);
            prop_assert_eq!(&plan.placed, &other.placed);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(40))]

    /// A mixture: every batch holds each source's rows to within one of its share; every
    /// row is one whole stretch of its source's epoch of tokens, read once in that epoch;
    /// a packer made at any step plans what the one that ran from the start plans.
    #[test]
    fn a_mixture_shares_every_batch_and_reads_each_source_row_once(
        sizes in prop::collection::vec(1u64..40, 1..4),
        weights in prop::collection::vec(0.05f64..5.0, 4),
        seq_len in 1u32..24,
        rows in 1u32..9,
        seed: u64,
    ) {
        let s = spec(seq_len, false, true);
        let of: Vec<Vec<u64>> = sizes.iter().enumerate().map(|(k, &n)| lengths_of(n, 30, seed ^ k as u64)).collect();
        let weights = &weights[..of.len()];
        let total_weight: f64 = weights.iter().sum();
        let stream = mixture_docs(&of, weights, seed);
        let mut lengths = SourceLengths(of.clone());
        let per_epoch: Vec<u64> = of.iter().map(|l| l.iter().map(|&x| s.virtual_len(x)).sum::<u64>() / u64::from(seq_len)).collect();
        let Ok(mut packer) = Packer::new(&stream, s, rows, 0, None, &mut lengths) else {
            prop_assert!(per_epoch.contains(&0), "refused only for a source without a row");
            return Ok(());
        };
        prop_assert_eq!(packer.steps_per_epoch(), None);
        let mut plan = Plan::default();
        // Offsets read per (source, epoch).
        let mut seen: HashMap<(u32, u64), HashSet<u64>> = HashMap::new();
        let mut at: HashMap<(u32, u64), Vec<u64>> = HashMap::new();
        let steps = 30u64;
        let mut plans = Vec::new();
        for _ in 0..steps {
            packer.plan(&mut lengths, &mut plan).unwrap();
            plans.push(plan.placed.clone());
            let mut row_of: HashMap<u32, (u32, u64, u64, u32)> = HashMap::new();
            for p in &plan.placed {
                let d = &p.piece.doc;
                let n = of[d.source as usize].len() as u64;
                let epoch = d.position / n;
                let counts = at.entry((d.source, epoch))
                    .or_insert_with(|| running_of(&of[d.source as usize], &s, seed, d.source, epoch));
                let k = d.position % n;
                prop_assert_eq!(d.index, Permutation::for_source(n, seed, d.source, epoch).at(k));
                let offset = counts[k as usize] + p.piece.start - u64::from(p.col);
                prop_assert_eq!(offset % u64::from(seq_len), 0);
                let filled = row_of.entry(p.row).or_insert((d.source, epoch, offset, 0));
                prop_assert_eq!((filled.0, filled.1, filled.2), (d.source, epoch, offset), "one row, one stretch");
                prop_assert_eq!(filled.3, p.col, "pieces follow each other");
                filled.3 += p.piece.len;
            }
            prop_assert_eq!(row_of.len(), rows as usize);
            let mut per_source = vec![0u32; of.len()];
            for &(source, epoch, offset, filled) in row_of.values() {
                prop_assert_eq!(filled, seq_len);
                prop_assert!(offset / u64::from(seq_len) < per_epoch[source as usize], "a row past the epoch's rows");
                prop_assert!(seen.entry((source, epoch)).or_default().insert(offset), "a row twice in one epoch");
                per_source[source as usize] += 1;
            }
            for (k, &got) in per_source.iter().enumerate() {
                let share = f64::from(rows) * weights[k] / total_weight;
                prop_assert!((f64::from(got) - share).abs() < 1.0 + 1e-9, "source {} has {} rows of {}", k, got, share);
            }
        }
        // Every epoch a source finished: all of its rows, once each.
        for (&(source, epoch), offsets) in &seen {
            if seen.contains_key(&(source, epoch + 1)) {
                prop_assert_eq!(offsets.len() as u64, per_epoch[source as usize]);
            }
        }
        for stop in [0, 7, 29] {
            let mut resumed = Packer::new(&stream, s, rows, stop, None, &mut lengths).unwrap();
            resumed.plan(&mut lengths, &mut plan).unwrap();
            prop_assert_eq!(&plan.placed, &plans[stop as usize]);
        }
    }
}

/// A mixture's rows were sequential, so a global batch of a 0.7/0.3 mixture held
/// anywhere from none to all of its rows from one source. Shuffled rows give each batch 22
/// or 23 of 32 rows from the 0.7 source, and every rank's slice mixes them too.
#[test]
fn every_batch_of_a_mixture_holds_its_share() {
    let seed = 11u64;
    let of: Vec<Vec<u64>> = (0..2).map(|k| lengths_of(400, 300, k)).collect();
    let stream = mixture_docs(&of, &[0.7, 0.3], seed);
    let mut lengths = SourceLengths(of);
    let mut plan = Plan::default();
    let mut packer = Packer::new(&stream, spec(64, false, true), 32, 0, None, &mut lengths).unwrap();
    let (mut rank0, mut batches) = (0u32, 0u32);
    for _ in 0..200 {
        packer.plan(&mut lengths, &mut plan).unwrap();
        let mut source_of_row = [u32::MAX; 32];
        for p in &plan.placed {
            source_of_row[p.row as usize] = p.piece.doc.source;
        }
        let first = source_of_row.iter().filter(|&&s| s == 0).count();
        assert!(first == 22 || first == 23, "batch {}: {first} of 32 rows from the 0.7 source", plan.step);
        rank0 += source_of_row[..8].iter().filter(|&&s| s == 0).count() as u32;
        batches += 1;
    }
    // Rank 0 of 4 (rows 0..8): about 0.7 of its rows from the first source too.
    let share = f64::from(rank0) / f64::from(batches * 8);
    assert!((0.62..0.78).contains(&share), "rank 0 read {share:.3} of its rows from the 0.7 source");
}

/// Sequential packing put a handful of documents in a 32-row batch (median 4 at
/// L=256) where nanoGPT's random windows over the same tokens draw about 33. Shuffled rows
/// draw as many as the windows do, within a loose bound here (`make bench` holds 0.8x).
#[test]
fn a_batch_draws_from_across_the_epoch() {
    let (n, seq_len, rows, seed) = (500u64, 256u32, 32u32, 7u64);
    let of: Vec<u64> = (0..n).map(|i| 20 + (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40) % 1500).collect();
    let distinct = |plan: &Plan| plan.placed.iter().map(|p| p.piece.doc.index).collect::<HashSet<_>>().len();
    let median = |mut v: Vec<usize>| {
        v.sort_unstable();
        v[v.len() / 2]
    };
    let mut lengths = Lengths(of.clone());
    let mut plan = Plan::default();
    let mut counts = |shuffle_rows: bool| {
        let s = PackSpec { shuffle_rows, ..spec(seq_len, false, true) };
        let mut packer = Packer::new(&docs(n, seed), s, rows, 0, None, &mut lengths).unwrap();
        (0..40)
            .map(|_| {
                packer.plan(&mut lengths, &mut plan).unwrap();
                distinct(&plan)
            })
            .collect::<Vec<_>>()
    };
    let (shuffled, sequential) = (median(counts(true)), median(counts(false)));
    // nanoGPT: 32 windows at uniform offsets into the tokens laid end to end.
    let starts: Vec<u64> = of.iter().scan(0, |at, &l| Some(std::mem::replace(at, *at + l + 1))).collect();
    let total = starts.last().unwrap() + of.last().unwrap() + 1;
    let mut state = seed;
    let windows: Vec<usize> = (0..40)
        .map(|_| {
            let mut docs = HashSet::new();
            for _ in 0..rows {
                state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let first = (state >> 11) % (total - u64::from(seq_len));
                let lo = starts.partition_point(|&s| s <= first) - 1;
                let hi = starts.partition_point(|&s| s < first + u64::from(seq_len));
                docs.extend(lo..hi);
            }
            docs.len()
        })
        .collect();
    let windows = median(windows);
    eprintln!("documents per batch: shuffled {shuffled}, sequential {sequential}, windows {windows}");
    assert!(sequential * 3 < windows, "sequential {sequential} vs windows {windows}: the test measures nothing");
    assert!(shuffled * 10 >= windows * 7, "shuffled rows: {shuffled} documents per batch, windows {windows}");
}

/// Lengths that keep the row indexes they are given, and count the lengths read. They ask
/// for the index path (no order kept in memory), which is what saved indexes serve.
struct Saving {
    lengths: Vec<u64>,
    saved: HashMap<RowIndexKey, Vec<u64>>,
    read: usize,
}

impl DocLengths for Saving {
    type Error = PackError;
    fn lengths(&mut self, _source: usize, indices: &[u64], out: &mut [u64]) -> Result<(), PackError> {
        self.read += indices.len();
        for (o, &i) in out.iter_mut().zip(indices) {
            *o = self.lengths[i as usize];
        }
        Ok(())
    }
    fn saved_index(&mut self, _source: usize, key: &RowIndexKey) -> Option<Vec<u64>> {
        self.saved.get(key).cloned()
    }
    fn save_index(&mut self, _source: usize, key: &RowIndexKey, counts: &[u64]) {
        self.saved.insert(*key, counts.to_vec());
    }
    fn keep_docs(&self) -> u64 {
        0
    }
}

/// Each source's lengths, counting the lengths read, keeping epochs' orders in memory for
/// sources of at most `keep` documents.
struct Keeping {
    lengths: Vec<Vec<u64>>,
    keep: u64,
    read: usize,
}

impl DocLengths for Keeping {
    type Error = PackError;
    fn lengths(&mut self, source: usize, indices: &[u64], out: &mut [u64]) -> Result<(), PackError> {
        self.read += indices.len();
        for (o, &i) in out.iter_mut().zip(indices) {
            *o = self.lengths[source][i as usize];
        }
        Ok(())
    }
    fn keep_docs(&self) -> u64 {
        self.keep
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Rows placed from an epoch's order kept in memory are the rows the index and table
    /// lookups place, over several epochs, one dataset or a mixture; and once an epoch is
    /// counted, placing its rows reads no length.
    #[test]
    fn a_kept_order_plans_what_the_index_plans(
        n in 40u64..1500,
        second in 0u64..400,
        max in 2u64..400,
        seq_len in 16u32..300,
        bos in any::<bool>(),
        eos in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let s = spec(seq_len, bos, eos);
        let mut of = vec![lengths_of(n, max, seed)];
        if second > 0 {
            of.push(lengths_of(second + 20, max, seed ^ 7));
        }
        let stream = match of.len() {
            1 => docs(n, seed),
            _ => mixture_docs(&of, &[0.6, 0.4], seed),
        };
        let rows = 4;
        let plans = |lengths: &mut Keeping| -> Option<Vec<Vec<_>>> {
            let mut packer = Packer::new(&stream, s, rows, 0, None, lengths).ok()?;
            let mut plan = Plan::default();
            Some((0..30).map(|_| {
                packer.plan(lengths, &mut plan).unwrap();
                plan.placed.clone()
            }).collect())
        };
        let mut kept = Keeping { lengths: of.clone(), keep: u64::MAX, read: 0 };
        let mut looked_up = Keeping { lengths: of.clone(), keep: 0, read: 0 };
        let (a, b) = (plans(&mut kept), plans(&mut looked_up));
        prop_assert_eq!(&a, &b);
        if a.is_some() {
            // Reads are whole epochs counted: a multiple of each source's documents.
            let per_epoch: Vec<usize> = of.iter().map(Vec::len).collect();
            let counted_only = match per_epoch.as_slice() {
                [one] => kept.read.is_multiple_of(*one),
                _ => (0..=kept.read / per_epoch[0]).any(|i| (kept.read - i * per_epoch[0]).is_multiple_of(per_epoch[1])),
            };
            prop_assert!(counted_only, "kept: {} lengths read for sources of {:?}", kept.read, per_epoch);
            prop_assert!(looked_up.read > kept.read);
        }
    }
}

/// A saved row index spares the next planner reading every length (here 20,000
/// of them) and plans the same rows; a saved index of other documents under the same key
/// (a dataset rewritten in place) is caught by its spot checks and rebuilt.
#[test]
fn a_saved_row_index_is_used_when_it_matches_and_rebuilt_when_not() {
    let (n, seed) = (20_000u64, 3u64);
    let s = spec(512, false, true);
    let stream = docs(n, seed);
    let plans = |lengths: &mut Saving| {
        let mut packer = Packer::new(&stream, s, 8, 0, None, lengths).unwrap();
        let mut plan = Plan::default();
        (0..5)
            .map(|_| {
                packer.plan(lengths, &mut plan).unwrap();
                plan.placed.clone()
            })
            .collect::<Vec<_>>()
    };
    let mut first = Saving { lengths: lengths_of(n, 300, 1), saved: HashMap::new(), read: 0 };
    let built = plans(&mut first);
    assert_eq!(first.saved.len(), 1, "the epoch's index was handed over");
    assert!(first.read >= n as usize, "built from every length: {}", first.read);
    let mut second = Saving { lengths: first.lengths.clone(), saved: first.saved.clone(), read: 0 };
    assert_eq!(plans(&mut second), built);
    assert!(second.read < 2_000, "the saved index read {} lengths", second.read);
    // The same key over other documents: the saved counts are refused, the rows are right.
    let mut other = Saving { lengths: lengths_of(n, 300, 2), saved: first.saved.clone(), read: 0 };
    let fresh = plans(&mut Saving { lengths: other.lengths.clone(), saved: HashMap::new(), read: 0 });
    assert_eq!(plans(&mut other), fresh);
    assert!(other.read >= n as usize, "rebuilt: {}", other.read);
    assert_ne!(fresh, built);
}
