//! Packing documents into rows: every token once (concat), no needless split (best fit),
//! resumes that continue token for token, and mixtures in tokens.

use std::collections::HashMap;

use proptest::prelude::*;
use zrecord_core::stream::pack::{DocLengths, PackCursor, PackError, PackMode, PackSpec, Packer, Plan};
use zrecord_core::{DatasetId, Mixture, Mode, Stream};

/// Document lengths as a function of (source, index), as a store's table would give them.
struct Lengths {
    /// Per source: the length of each sample.
    of: Vec<Vec<u64>>,
    lookups: usize,
}

#[derive(Debug)]
enum Fail {
    Pack(PackError),
}

impl From<PackError> for Fail {
    fn from(e: PackError) -> Self {
        Fail::Pack(e)
    }
}

impl DocLengths for Lengths {
    type Error = Fail;
    fn lengths(&mut self, source: usize, indices: &[u64], out: &mut [u64]) -> Result<(), Fail> {
        self.lookups += 1;
        for (o, &i) in out.iter_mut().zip(indices) {
            *o = self.of[source][i as usize];
        }
        Ok(())
    }
}

fn lengths_of(n: usize, max: u64, salt: u64) -> Vec<u64> {
    (0..n as u64).map(|i| 1 + (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ salt).rotate_left(17) % max).collect()
}

fn spec(seq_len: u32, mode: PackMode, rows: u32, bos: bool, eos: bool) -> PackSpec {
    PackSpec {
        seq_len,
        mode,
        bos: bos.then_some(1),
        eos: eos.then_some(2),
        pad: 0,
        window: if mode == PackMode::BestFit { 2 * u64::from(rows) * u64::from(seq_len) } else { 0 },
        shuffle_rows: false,
    }
}

fn docs(n: u64, mode: Mode, seed: u64) -> Stream {
    Stream::new(DatasetId { length: n, generation: 1 }, mode, seed, 1).unwrap()
}

/// `(row, col, source, position, start, len)` of every piece of `batches` global batches.
type Rows = Vec<(u64, u32, u32, u32, u64, u64, u32)>;

fn run(packer: &mut Packer, lengths: &mut Lengths, batches: usize) -> (Rows, Vec<u64>, PackCursor) {
    let mut plan = Plan::default();
    let mut out = Vec::new();
    let mut padding = Vec::new();
    for _ in 0..batches {
        packer.plan(lengths, &mut plan).unwrap();
        for p in &plan.placed {
            out.push((plan.step, p.row, p.col, p.piece.doc.source, p.piece.doc.position, p.piece.start, p.piece.len));
        }
        padding.push(plan.padding);
    }
    (out, padding, packer.cursor())
}

/// Checks that the pieces of each batch tile its rows without overlap, and (concat) fill
/// every row.
fn check_tiling(rows: &Rows, seq_len: u32, full: bool) {
    let mut by_row: HashMap<(u64, u32), Vec<(u32, u32)>> = HashMap::new();
    for &(step, row, col, _, _, _, len) in rows {
        assert!(len > 0);
        assert!(col + len <= seq_len, "piece past the row's end");
        by_row.entry((step, row)).or_default().push((col, len));
    }
    for ((step, row), mut pieces) in by_row {
        pieces.sort();
        let mut at = 0;
        for (col, len) in &pieces {
            assert!(*col >= at, "overlap in step {step} row {row}");
            if full {
                assert_eq!(*col, at, "a gap in step {step} row {row}");
            }
            at = col + len;
        }
        if full {
            assert_eq!(at, seq_len);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Concat: the rows, read row by row, are the documents' virtual tokens in stream
    /// order, each exactly once, with no gap: every token of an epoch appears once.
    #[test]
    fn concat_every_token_once(n in 1u64..200, max in 1u64..300, seq_len in 1u32..200, rows in 1u32..6,
                               bos: bool, eos: bool, seed: u64, shuffle: bool) {
        let of = vec![lengths_of(n as usize, max, seed)];
        let mut lengths = Lengths { of: of.clone(), lookups: 0 };
        let s = spec(seq_len, PackMode::Concat, rows, bos, eos);
        let mode = if shuffle { Mode::Shuffle } else { Mode::Sequential };
        let stream = docs(n, mode, seed);
        let mut packer = Packer::new(&stream, s, rows, 0, None, &mut lengths).unwrap();
        let total: u64 = of[0].iter().map(|&l| s.virtual_len(l)).sum();
        // Enough batches for two epochs and a bit.
        let batches = (2 * total / (u64::from(rows) * u64::from(seq_len)) + 2) as usize;
        let (placed, padding, _) = run(&mut packer, &mut lengths, batches);
        check_tiling(&placed, seq_len, true);
        prop_assert!(padding.iter().all(|&p| p == 0));
        // Row-major order is stream order: each piece starts where the last one ended.
        let mut expect_pos = 0u64;
        let mut expect_start = 0u64;
        let mut per_doc_epoch: HashMap<(u64, u64), u64> = HashMap::new();
        let mut ids = [0u64];
        for &(_, _, _, _, pos, start, len) in &placed {
            prop_assert_eq!((pos, start), (expect_pos, expect_start));
            stream.batch_at(pos, 0, 1, &mut ids, None).unwrap();
            *per_doc_epoch.entry((pos / n, ids[0])).or_default() += u64::from(len);
            let vlen = s.virtual_len(of[0][ids[0] as usize]);
            expect_start += u64::from(len);
            if expect_start == vlen {
                expect_pos += 1;
                expect_start = 0;
            }
        }
        // Every document of each whole epoch read: all its tokens, once.
        let whole_epochs = expect_pos / n;
        for e in 0..whole_epochs {
            for i in 0..n {
                prop_assert_eq!(per_doc_epoch.get(&(e, i)).copied(), Some(s.virtual_len(of[0][i as usize])));
            }
        }
    }

    /// Best fit: a document no longer than a row is never split; a longer one is cut into
    /// full rows and a rest; every document appears once per epoch of the document stream.
    #[test]
    fn best_fit_splits_only_long_documents(n in 1u64..200, max in 1u64..300, seq_len in 1u32..200,
                                           rows in 1u32..6, eos: bool, seed: u64) {
        let of = vec![lengths_of(n as usize, max, seed)];
        let mut lengths = Lengths { of: of.clone(), lookups: 0 };
        let s = spec(seq_len, PackMode::BestFit, rows, false, eos);
        let stream = docs(n, Mode::Shuffle, seed);
        let mut packer = Packer::new(&stream, s, rows, 0, None, &mut lengths).unwrap();
        let (placed, padding, cursor) = run(&mut packer, &mut lengths, 40);
        check_tiling(&placed, seq_len, false);
        let mut pieces: HashMap<u64, Vec<(u64, u32)>> = HashMap::new();
        for &(_, _, _, _, pos, start, len) in &placed {
            pieces.entry(pos).or_default().push((start, len));
        }
        let waiting: Vec<u64> = cursor.waiting.iter().map(|w| w.1).collect();
        let mut ids = [0u64];
        for pos in 0..cursor.taken[0] {
            stream.batch_at(pos, 0, 1, &mut ids, None).unwrap();
            let vlen = s.virtual_len(of[0][ids[0] as usize]);
            let mut got = pieces.remove(&pos).unwrap_or_default();
            got.sort();
            if waiting.contains(&pos) {
                continue; // some pieces still wait for a later batch
            }
            let expect: Vec<(u64, u32)> = (0..vlen.div_ceil(u64::from(seq_len)))
                .map(|k| (k * u64::from(seq_len), (vlen - k * u64::from(seq_len)).min(u64::from(seq_len)) as u32))
                .collect();
            prop_assert_eq!(got, expect, "document at position {}", pos);
        }
        // Padding is what the rows do not hold.
        let held: u64 = placed.iter().map(|p| u64::from(p.6)).sum();
        prop_assert_eq!(held + padding.iter().sum::<u64>(), 40 * u64::from(rows) * u64::from(seq_len));
    }

    /// A packer rebuilt from the cursor after any batch plans the same batches as one that
    /// never stopped.
    #[test]
    fn resume_continues_token_for_token(n in 1u64..150, max in 1u64..400, seq_len in 1u32..128, rows in 1u32..5,
                                        best_fit: bool, bos: bool, eos: bool, seed: u64, stop in 0usize..20,
                                        mixture: bool) {
        let mode = if best_fit { PackMode::BestFit } else { PackMode::Concat };
        let s = spec(seq_len, mode, rows, bos, eos);
        let of = vec![lengths_of(n as usize, max, seed), lengths_of(n as usize + 7, max / 2 + 1, !seed)];
        let stream = if mixture {
            let m = Mixture::new(
                vec![DatasetId { length: n, generation: 1 }, DatasetId { length: n + 7, generation: 2 }],
                vec![0.7, 0.3],
            ).unwrap();
            Stream::mixture(m, seed, 1).unwrap()
        } else {
            docs(n, Mode::Shuffle, seed)
        };
        let mut lengths = Lengths { of, lookups: 0 };
        let mut whole = Packer::new(&stream, s, rows, 0, None, &mut lengths).unwrap();
        let (all, _, _) = run(&mut whole, &mut lengths, stop + 10);
        let mut first = Packer::new(&stream, s, rows, 0, None, &mut lengths).unwrap();
        let (_, _, cursor) = run(&mut first, &mut lengths, stop);
        let mut resumed = Packer::new(&stream, s, rows, stop as u64, Some(&cursor), &mut lengths).unwrap();
        let (rest, _, _) = run(&mut resumed, &mut lengths, 10);
        let tail: Rows = all.into_iter().filter(|p| p.0 >= stop as u64).collect();
        prop_assert_eq!(rest, tail);
    }
}

/// Mixture weights count tokens: over 10^6 tokens each source's share is within 0.5% of
/// its weight, although their documents differ in length by 20x.
#[test]
fn mixture_shares_are_in_tokens() {
    let of = vec![lengths_of(5000, 40, 1), lengths_of(3000, 800, 2), lengths_of(100, 200, 3)];
    let ids: Vec<DatasetId> =
        of.iter().enumerate().map(|(s, l)| DatasetId { length: l.len() as u64, generation: s as u64 }).collect();
    let weights = vec![0.5, 0.3, 0.2];
    let stream = Stream::mixture(Mixture::new(ids, weights.clone()).unwrap(), 9, 1).unwrap();
    for mode in [PackMode::Concat, PackMode::BestFit] {
        let s = spec(1024, mode, 8, false, true);
        let mut lengths = Lengths { of: of.clone(), lookups: 0 };
        let mut packer = Packer::new(&stream, s, 8, 0, None, &mut lengths).unwrap();
        let mut plan = Plan::default();
        let mut by_source = [0u64; 3];
        let mut total = 0u64;
        while total < 1_000_000 {
            packer.plan(&mut lengths, &mut plan).unwrap();
            for p in &plan.placed {
                by_source[p.piece.doc.source as usize] += u64::from(p.piece.len);
                total += u64::from(p.piece.len);
            }
        }
        for (s, &w) in weights.iter().enumerate() {
            let share = by_source[s] as f64 / total as f64;
            assert!((share - w).abs() < 0.005, "{mode:?}: source {s} has {share:.4} of the tokens, weight {w}");
        }
    }
}

/// First fit over the same documents and window (what Grain's packing does): each piece
/// into the lowest row with room. Returns the padding fraction of `batches` batches.
fn first_fit_padding(of: &[u64], stream: &Stream, seq_len: u64, rows: usize, window: u64, batches: usize) -> f64 {
    let mut waiting: Vec<u64> = Vec::new();
    let mut next = 0u64;
    let mut ids = [0u64];
    let mut pad = 0u64;
    for _ in 0..batches {
        while waiting.iter().sum::<u64>() < window {
            stream.batch_at(next, 0, 1, &mut ids, None).unwrap();
            next += 1;
            let mut len = of[ids[0] as usize] + 1; // with the eos
            while len > 0 {
                waiting.push(len.min(seq_len));
                len -= len.min(seq_len);
            }
        }
        let mut room = vec![seq_len; rows];
        waiting.retain(|&len| match room.iter_mut().find(|r| **r >= len) {
            Some(r) => {
                *r -= len;
                false
            }
            None => true,
        });
        pad += room.iter().sum::<u64>();
    }
    pad as f64 / (batches as u64 * rows as u64 * seq_len) as f64
}

/// Best fit pads no more than first fit over the same window, little, and reports it.
#[test]
fn best_fit_padding_is_small_and_counted() {
    let of = vec![lengths_of(20_000, 1500, 5)];
    let first_fit = first_fit_padding(&of[0], &docs(20_000, Mode::Shuffle, 3), 2048, 16, 2 * 16 * 2048, 200);
    let mut lengths = Lengths { of, lookups: 0 };
    let s = spec(2048, PackMode::BestFit, 16, false, true);
    let stream = docs(20_000, Mode::Shuffle, 3);
    let mut packer = Packer::new(&stream, s, 16, 0, None, &mut lengths).unwrap();
    let (placed, padding, _) = run(&mut packer, &mut lengths, 200);
    let pad: u64 = padding.iter().sum();
    let all = 200 * 16 * 2048u64;
    assert_eq!(pad + placed.iter().map(|p| u64::from(p.6)).sum::<u64>(), all);
    let fraction = pad as f64 / all as f64;
    assert!(fraction < 0.035, "best fit left {fraction:.4} of the rows as padding");
    assert!(fraction <= first_fit, "best fit pads {fraction:.4}, first fit {first_fit:.4}");
    eprintln!("padding: best fit {fraction:.4}, first fit {first_fit:.4}");
    // Lengths are read 64 documents at a time, not one by one.
    assert!(lengths.lookups < 200 * 16 * 2, "{} length lookups", lengths.lookups);
}

#[test]
fn bad_specs_and_empty_documents_fail() {
    let stream = docs(10, Mode::Shuffle, 1);
    let mut lengths = Lengths { of: vec![vec![0; 10]], lookups: 0 };
    let zero = PackSpec { seq_len: 0, ..spec(8, PackMode::Concat, 1, false, false) };
    assert!(matches!(Packer::new(&stream, zero, 1, 0, None, &mut lengths), Err(Fail::Pack(PackError::Spec(_)))));
    let small_window = PackSpec { window: 7, ..spec(8, PackMode::BestFit, 1, false, false) };
    assert!(Packer::new(&stream, small_window, 1, 0, None, &mut lengths).is_err());
    let wide = Stream::new(DatasetId { length: 10, generation: 1 }, Mode::Shuffle, 1, 2).unwrap();
    assert!(Packer::new(&wide, spec(8, PackMode::Concat, 1, false, false), 1, 0, None, &mut lengths).is_err());
    // Every document empty and nothing added: an error, not an endless loop.
    let mut packer =
        Packer::new(&stream, spec(8, PackMode::Concat, 1, false, false), 1, 0, None, &mut lengths).unwrap();
    let mut plan = Plan::default();
    assert!(matches!(packer.plan(&mut lengths, &mut plan), Err(Fail::Pack(PackError::Empty))));
    // With an eos, an empty document is one token.
    let mut packer = Packer::new(&stream, spec(8, PackMode::Concat, 1, false, true), 1, 0, None, &mut lengths).unwrap();
    packer.plan(&mut lengths, &mut plan).unwrap();
    assert_eq!(plan.placed.len(), 8);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// A finite pass (evaluation) packs every document once, in order, and stops: the
    /// batch placing the last token says so, its rows past that token are padding, and
    /// later batches hold nothing.
    #[test]
    fn a_finite_pass_packs_every_document_once_then_pads(
        n in 1u64..120,
        max in 1u64..300,
        seq_len in 1u32..64,
        rows in 1u32..6,
        passes in 1u64..3,
        best in any::<bool>(),
    ) {
        let mode = if best { PackMode::BestFit } else { PackMode::Concat };
        let stream = docs(n, Mode::Sequential, 9);
        let mut lengths = Lengths { of: vec![lengths_of(n as usize, max, 3)], lookups: 0 };
        let s = spec(seq_len, mode, rows, false, true);
        let mut packer = Packer::new(&stream, s, rows, 0, None, &mut lengths).unwrap();
        packer.finish_after(passes * n).unwrap();
        let mut plan = Plan::default();
        let mut got: HashMap<u64, u64> = HashMap::new();
        let mut lasts = Vec::new();
        let cells = u64::from(rows) * u64::from(seq_len);
        for step in 0..(passes * n * (max + 1)).div_ceil(cells) * 2 + 4 {
            packer.plan(&mut lengths, &mut plan).unwrap();
            let placed: u64 = plan.placed.iter().map(|p| u64::from(p.piece.len)).sum();
            prop_assert_eq!(placed + plan.padding, cells, "step {}", step);
            for p in &plan.placed {
                *got.entry(p.piece.doc.position).or_default() += u64::from(p.piece.len);
            }
            if plan.last {
                lasts.push(step);
            }
            if !lasts.is_empty() && lasts[0] < step {
                prop_assert!(plan.placed.is_empty(), "tokens after the last batch");
            }
        }
        prop_assert_eq!(lasts.len(), 1, "one last batch");
        prop_assert_eq!(got.len() as u64, passes * n, "every position once");
        for (&position, &tokens) in &got {
            prop_assert_eq!(tokens, lengths.of[0][(position % n) as usize] + 1, "document at {} whole", position);
        }
        if !best {
            // Concat: the documents in order, so only the last batch pads.
            prop_assert!(packer.finished());
        }
    }
}

#[test]
fn a_finite_pass_refuses_shuffled_rows_and_mixtures() {
    let stream = docs(50, Mode::Shuffle, 1);
    let mut lengths = Lengths { of: vec![lengths_of(50, 40, 1)], lookups: 0 };
    let shuffled = PackSpec { shuffle_rows: true, ..spec(16, PackMode::Concat, 2, false, true) };
    let mut packer = Packer::new(&stream, shuffled, 2, 0, None, &mut lengths).unwrap();
    assert!(packer.finish_after(50).is_err());
}
