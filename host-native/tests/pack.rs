//! Packed loading over real datasets: rows hold the documents' tokens as the core planned
//! them, and resumes with other world sizes and worker counts continue token for token.

use std::path::Path;
use std::sync::Arc;

use zrecord::{
    Codec, Column, Dataset, DatasetWriter, Field, Loader, LoaderBatch, LoaderOptions, Mixture, Mode, OnError, PackMode,
    PackOptions, RowIndexes, Source, Stream, StreamState, WriteOptions,
};

/// Document `i` of dataset `salt`: `1 + (i * 37) % 90` u32 tokens `salt * 10^8 + i * 1000 + k`,
/// so every token says which document and offset it is.
fn doc(salt: u32, i: u64) -> Vec<u32> {
    (0..1 + (i * 37) % 90).map(|k| salt * 100_000_000 + i as u32 * 1000 + k as u32).collect()
}

fn write_docs(path: &Path, salt: u32, n: u64) -> Arc<Dataset> {
    let fields = vec![Field::ragged("tokens", "<u4", Codec::Flate), Field::fixed("id", "<u8", &[], Codec::Raw)];
    let options = WriteOptions { shard_records: 97, ..WriteOptions::default() };
    let mut w = DatasetWriter::open(path, fields, options).unwrap();
    let mut values = Vec::new();
    let mut offsets = vec![0u64];
    for i in 0..n {
        values.extend(doc(salt, i).iter().flat_map(|t| t.to_le_bytes()));
        offsets.push(values.len() as u64);
    }
    let ids: Vec<u8> = (0..n).flat_map(u64::to_le_bytes).collect();
    w.write(&[Column::Ragged { values: &values, offsets: &offsets }, Column::Fixed(&ids)]).unwrap();
    Arc::new(w.commit().unwrap())
}

fn pack(mode: PackMode, seq_len: u32) -> PackOptions {
    PackOptions {
        field: "tokens".into(),
        seq_len,
        mode,
        bos: Some(1),
        eos: Some(2),
        pad: 3,
        window: None,
        shuffle_rows: Some(false),
        row_indexes: RowIndexes::Off,
        keep_order: zrecord_core::stream::rows::KEEP_DOCS,
    }
}

fn options(rank: u64, world_size: u64, num_workers: usize) -> LoaderOptions {
    LoaderOptions { rank, world_size, num_workers, prefetch: 3, ..LoaderOptions::default() }
}

/// One packed row: its tokens, segment ids and positions.
type Row = (Vec<u32>, Vec<i32>, Vec<i32>);

fn rows_of(batch: &LoaderBatch, seq_len: usize) -> Vec<Row> {
    let words = |b: &[u8]| b.chunks_exact(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect::<Vec<_>>();
    let tokens = words(&batch.fields[0]);
    let segments: Vec<i32> = words(&batch.fields[1]).into_iter().map(|v| v as i32).collect();
    let positions: Vec<i32> = words(&batch.fields[2]).into_iter().map(|v| v as i32).collect();
    (0..tokens.len() / seq_len)
        .map(|r| {
            let span = r * seq_len..(r + 1) * seq_len;
            (tokens[span.clone()].to_vec(), segments[span.clone()].to_vec(), positions[span].to_vec())
        })
        .collect()
}

/// Rows of global batches `from..to` read by `world` ranks of `workers` workers each,
/// starting from `state` (or the start), and the state after them (the same on every rank).
#[allow(clippy::too_many_arguments)]
fn read(
    docs: &Stream,
    sources: &[Source],
    spec: &PackOptions,
    rows: u64,
    world: u64,
    workers: usize,
    state: Option<&str>,
    batches: usize,
) -> (Vec<Row>, String) {
    let mut per_rank: Vec<Vec<Vec<Row>>> = Vec::new();
    let mut states = Vec::new();
    for rank in 0..world {
        let opts = options(rank, world, workers);
        let loader = match state {
            None => Loader::packed(docs.clone(), rows, sources.to_vec(), spec.clone(), opts).unwrap(),
            Some(text) => Loader::resume_packed(
                docs.clone(),
                rows,
                sources.to_vec(),
                spec.clone(),
                opts,
                &StreamState::decode(text).unwrap(),
            )
            .unwrap(),
        };
        let mut mine = Vec::new();
        for _ in 0..batches {
            let batch = loader.next().unwrap().unwrap();
            mine.push(rows_of(&batch, spec.seq_len as usize));
        }
        states.push(loader.state().encode());
        per_rank.push(mine);
    }
    assert!(states.windows(2).all(|w| w[0] == w[1]), "ranks disagree on the state");
    // Global batch by global batch, rank by rank: the rows in order.
    let mut out = Vec::new();
    for b in 0..batches {
        for rank in &per_rank {
            out.extend(rank[b].iter().cloned());
        }
    }
    (out, states.pop().unwrap())
}

/// The expected virtual tokens of document `i` of dataset `salt`: bos, tokens, eos.
fn virtual_doc(salt: u32, i: u64) -> Vec<u32> {
    let mut v = vec![1];
    v.extend(doc(salt, i));
    v.push(2);
    v
}

#[test]
fn concat_rows_are_the_documents_in_stream_order() {
    let dir = tempfile::tempdir().unwrap();
    let ds = write_docs(&dir.path().join("docs"), 1, 500);
    let source = Source::dataset(ds).unwrap();
    let docs = Stream::new(source.id(), Mode::Shuffle, 7, 1).unwrap();
    let spec = pack(PackMode::Concat, 64);
    let (rows, _) = read(&docs, &[source], &spec, 8, 1, 2, None, 20);
    let flat: Vec<u32> = rows.iter().flat_map(|r| r.0.iter().copied()).collect();
    let mut expect = Vec::new();
    let mut ids = [0u64];
    let mut p = 0;
    while expect.len() < flat.len() {
        docs.batch_at(p, 0, 1, &mut ids, None).unwrap();
        expect.extend(virtual_doc(1, ids[0]));
        p += 1;
    }
    assert_eq!(flat, expect[..flat.len()]);
    // Segments count the documents of a row from 1 (no padding in concat); positions
    // count each piece's tokens from 0.
    for (tokens, segments, positions) in &rows {
        assert_eq!(segments[0], 1);
        assert_eq!(positions[0], 0);
        for k in 1..tokens.len() {
            if tokens[k] == 1 {
                assert_eq!((segments[k], positions[k]), (segments[k - 1] + 1, 0), "a bos starts a document");
            } else {
                assert_eq!((segments[k], positions[k]), (segments[k - 1], positions[k - 1] + 1));
            }
        }
    }
}

#[test]
fn best_fit_rows_hold_whole_documents_and_count_padding() {
    let dir = tempfile::tempdir().unwrap();
    let ds = write_docs(&dir.path().join("docs"), 1, 500);
    let source = Source::dataset(ds).unwrap();
    let docs = Stream::new(source.id(), Mode::Shuffle, 7, 1).unwrap();
    let spec = pack(PackMode::BestFit, 128);
    let loader = Loader::packed(docs, 8, vec![source], spec, options(0, 1, 2)).unwrap();
    let mut pads = 0usize;
    for _ in 0..20 {
        let batch = loader.next().unwrap().unwrap();
        for (tokens, segments, positions) in rows_of(&batch, 128) {
            let mut k = 0;
            while k < tokens.len() {
                if segments[k] == 0 {
                    assert_eq!(tokens[k], 3, "padding holds the pad id");
                    pads += 1;
                    k += 1;
                    continue;
                }
                // A whole document: bos, its tokens in order, eos (all are under 128).
                assert_eq!(tokens[k], 1);
                let i = u64::from(tokens[k + 1] % 100_000_000 / 1000);
                let want = virtual_doc(1, i);
                assert_eq!(tokens[k..k + want.len()], want[..], "document {i}");
                assert!(positions[k..k + want.len()].iter().enumerate().all(|(j, &p)| p == j as i32));
                k += want.len();
            }
        }
    }
    let fraction = loader.padding_fraction().unwrap();
    assert!((fraction - pads as f64 / (20.0 * 8.0 * 128.0)).abs() < 1e-12);
}

/// The promise of exact packed resumes: 4 ranks x 2 rows, then 1 x 8, then 2 x 4, with other worker counts,
/// read the very rows one process reads without stopping; for both modes, with a mixture.
#[test]
fn resumes_are_exact_across_world_sizes_and_workers() {
    let dir = tempfile::tempdir().unwrap();
    let a = Source::dataset(write_docs(&dir.path().join("a"), 1, 300)).unwrap();
    let b = Source::dataset(write_docs(&dir.path().join("b"), 2, 200)).unwrap();
    let single = Stream::new(a.id(), Mode::Shuffle, 11, 1).unwrap();
    let mixture = Stream::mixture(Mixture::new(vec![a.id(), b.id()], vec![0.6, 0.4]).unwrap(), 11, 1).unwrap();
    for mode in [PackMode::Concat, PackMode::BestFit] {
        for (docs, sources) in [(&single, vec![a.clone()]), (&mixture, vec![a.clone(), b.clone()])] {
            let spec = pack(mode, 96);
            let (whole, _) = read(docs, &sources, &spec, 8, 1, 3, None, 24);
            let (first, state) = read(docs, &sources, &spec, 8, 4, 2, None, 7);
            let (second, state) = read(docs, &sources, &spec, 8, 1, 0, Some(&state), 9);
            let (third, _) = read(docs, &sources, &spec, 8, 2, 1, Some(&state), 8);
            let joined: Vec<Row> = first.into_iter().chain(second).chain(third).collect();
            assert_eq!(joined.len(), whole.len());
            assert!(joined == whole, "{mode:?}, {} source(s): resumed rows differ", sources.len());
        }
    }
}

#[test]
fn packing_refuses_what_it_cannot_do() {
    let dir = tempfile::tempdir().unwrap();
    let source = Source::dataset(write_docs(&dir.path().join("docs"), 1, 50)).unwrap();
    let docs = Stream::new(source.id(), Mode::Shuffle, 7, 1).unwrap();
    let fail = |spec: PackOptions, opts: LoaderOptions| {
        Loader::packed(docs.clone(), 4, vec![source.clone()], spec, opts).expect_err("refused").to_string()
    };
    let e = fail(PackOptions { field: "id".into(), ..pack(PackMode::Concat, 8) }, options(0, 1, 1));
    assert!(e.contains("ragged") && e.contains("\"id\""), "{e}");
    let e = fail(PackOptions { field: "text".into(), ..pack(PackMode::Concat, 8) }, options(0, 1, 1));
    assert!(e.contains("\"text\"") && e.contains("tokens, id"), "{e}");
    let e = fail(PackOptions { eos: Some(1 << 40), ..pack(PackMode::Concat, 8) }, options(0, 1, 1));
    assert!(e.contains("eos id 1099511627776") && e.contains("<u4"), "{e}");
    let e = fail(pack(PackMode::Concat, 8), LoaderOptions { on_error: OnError::Skip, ..options(0, 1, 1) });
    assert!(e.contains("on_error=skip"), "{e}");
    let e = fail(pack(PackMode::Concat, 8), options(0, 3, 1));
    assert!(e.contains("world_size 3"), "{e}");
    let e = fail(PackOptions { window: Some(8), ..pack(PackMode::BestFit, 8) }, options(0, 1, 1));
    assert!(e.contains("window"), "{e}");
    let blocked = docs.clone().with_blocks(zrecord::Blocks::new(4, 2).unwrap()).unwrap();
    let e = Loader::packed(blocked, 4, vec![source.clone()], pack(PackMode::Concat, 8), options(0, 1, 1))
        .expect_err("refused")
        .to_string();
    assert!(e.contains("block shuffle (shuffle_block) does not apply"), "{e}");

    // A state of a loader of samples, or of another packing, is refused with the reason.
    let loader =
        Loader::packed(docs.clone(), 4, vec![source.clone()], pack(PackMode::Concat, 8), options(0, 1, 0)).unwrap();
    loader.next().unwrap().unwrap();
    let saved = loader.state();
    let e = Loader::resume_packed(
        docs.clone(),
        4,
        vec![source.clone()],
        pack(PackMode::Concat, 16),
        options(0, 1, 0),
        &saved,
    )
    .err()
    .unwrap()
    .to_string();
    assert!(e.contains("concat packing of 8 tokens") && e.contains("16 tokens"), "{e}");
    // A state of sequential rows (saved before rows were shuffled by default) resumed by a
    // loader that shuffles them: the error names the option that resumes it.
    let shuffled = PackOptions { shuffle_rows: None, ..pack(PackMode::Concat, 8) };
    let e = Loader::resume_packed(docs.clone(), 4, vec![source.clone()], shuffled, options(0, 1, 0), &saved)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("sequential rows") && e.contains("Pack(row_order=\"sequential\") resumes this state"), "{e}");
    let e = Loader::resume_packed(
        docs.clone(),
        8,
        vec![source.clone()],
        pack(PackMode::Concat, 8),
        options(0, 1, 0),
        &saved,
    )
    .err()
    .unwrap()
    .to_string();
    assert!(e.contains("global batch of 4"), "{e}");
    let samples = Stream::new(source.id(), Mode::Shuffle, 7, 4).unwrap();
    let e = Loader::resume(samples.clone(), vec![source.clone()], options(0, 1, 0), &saved).err().unwrap().to_string();
    assert!(e.contains("packed rows"), "{e}");
    let plain = Loader::new(samples, vec![source.clone()], options(0, 1, 0)).unwrap().state();
    let e = Loader::resume_packed(docs, 4, vec![source], pack(PackMode::Concat, 8), options(0, 1, 0), &plain)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("loader of samples"), "{e}");
}

/// Shuffled rows: an epoch of `steps_per_epoch` batches reads no token twice and
/// all but the tail; resumes stay exact on other world sizes and worker counts; they are
/// the default for concat over a SHUFFLE stream.
#[test]
fn shuffled_rows_have_epochs_and_resume_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let a = Source::dataset(write_docs(&dir.path().join("a"), 1, 300)).unwrap();
    let b = Source::dataset(write_docs(&dir.path().join("b"), 2, 200)).unwrap();
    let single = Stream::new(a.id(), Mode::Shuffle, 11, 1).unwrap();
    let spec = PackOptions { shuffle_rows: None, ..pack(PackMode::Concat, 96) };
    let only_a = vec![a.clone()];
    let loader = Loader::packed(single.clone(), 8, vec![a.clone()], spec.clone(), options(0, 1, 1)).unwrap();
    let tokens: u64 = (0..300).map(|i| doc(1, i).len() as u64 + 2).sum();
    let per_epoch = tokens / 96 / 8;
    assert_eq!(loader.steps_per_epoch(), Some(per_epoch));
    assert_eq!(loader.epoch_of(per_epoch + 3), Some((1, 3)));
    drop(loader);

    let (whole, _) = read(&single, &only_a, &spec, 8, 1, 3, None, per_epoch as usize + 4);
    for epoch in whole.chunks(per_epoch as usize * 8).take(1) {
        let mut seen = std::collections::HashSet::new();
        for (tokens, segments, _) in epoch {
            for &t in tokens.iter().filter(|&&t| t > 2) {
                assert!(seen.insert(t), "token {t} twice in one epoch");
            }
            // Within a piece, a document's tokens follow each other (token = doc * 1000 + k).
            for j in 1..tokens.len() {
                let (a, b) = (tokens[j - 1], tokens[j]);
                if a > 2 && b > 2 && segments[j - 1] == segments[j] {
                    assert_eq!(b, a + 1, "cells {} and {j} of a row", j - 1);
                }
            }
        }
        let body: u64 = (0..300).map(|i| doc(1, i).len() as u64).sum();
        // Missing: the tokens past the epoch's last whole batch, at most a batch and a row.
        assert!(body - seen.len() as u64 <= 9 * 96, "{} of {body} tokens read", seen.len());
    }
    let (first, state) = read(&single, &only_a, &spec, 8, 4, 2, None, 7);
    let (second, state) = read(&single, &only_a, &spec, 8, 1, 0, Some(&state), 3);
    let (third, _) = read(&single, &only_a, &spec, 8, 2, 1, Some(&state), per_epoch as usize - 6);
    let joined: Vec<Row> = first.into_iter().chain(second).chain(third).collect();
    assert!(joined == whole, "resumed shuffled rows differ");

    // A mixture has shuffled rows by default too, and no epochs; IID documents refuse them.
    let mixture = Stream::mixture(Mixture::new(vec![a.id(), b.id()], vec![0.6, 0.4]).unwrap(), 11, 1).unwrap();
    let both = vec![a.clone(), b.clone()];
    let loader = Loader::packed(mixture.clone(), 8, both.clone(), spec.clone(), options(0, 1, 0)).unwrap();
    assert_eq!(loader.steps_per_epoch(), None);
    drop(loader);
    let asked = PackOptions { shuffle_rows: Some(true), ..spec.clone() };
    let iid = Stream::new(a.id(), Mode::Iid, 11, 1).unwrap();
    let e = Loader::packed(iid, 8, vec![a.clone()], asked, options(0, 1, 0)).expect_err("refused").to_string();
    assert!(e.contains("SHUFFLE"), "{e}");
    // More rows than an epoch holds: refused, naming the way out.
    let e = Loader::packed(single, 4096, vec![a], spec, options(0, 1, 0)).expect_err("refused").to_string();
    assert!(e.contains("fewer than one global batch") && e.contains("sequential"), "{e}");
}

/// Shuffled rows over a mixture: a 0.7/0.3 mixture's sequential rows put from
/// none to all of a global batch's rows in one source; now every batch holds 5 or 6 of 8
/// rows from the first source, each row whole from one source, and a job resumed on
/// another world size and worker count reads the same rows.
#[test]
fn a_mixture_of_shuffled_rows_shares_every_batch_and_resumes_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let a = Source::dataset(write_docs(&dir.path().join("a"), 1, 300)).unwrap();
    let b = Source::dataset(write_docs(&dir.path().join("b"), 2, 200)).unwrap();
    let mixture = Stream::mixture(Mixture::new(vec![a.id(), b.id()], vec![0.7, 0.3]).unwrap(), 5, 1).unwrap();
    let both = vec![a, b];
    let spec = PackOptions { shuffle_rows: None, ..pack(PackMode::Concat, 64) };
    let (whole, _) = read(&mixture, &both, &spec, 8, 1, 2, None, 40);
    let source = |row: &Row| row.0.iter().find(|&&t| t > 3).map(|&t| t / 100_000_000).expect("a row of tokens");
    for (b, batch) in whole.chunks(8).enumerate() {
        let first = batch.iter().filter(|r| source(r) == 1).count();
        assert!(first == 5 || first == 6, "batch {b}: {first} of 8 rows from the 0.7 source");
        for row in batch {
            let s = source(row);
            assert!(row.0.iter().all(|&t| t <= 3 || t / 100_000_000 == s), "a row mixes sources");
        }
    }
    let (first, state) = read(&mixture, &both, &spec, 8, 4, 0, None, 13);
    let (second, state) = read(&mixture, &both, &spec, 8, 2, 3, Some(&state), 11);
    let (third, _) = read(&mixture, &both, &spec, 8, 1, 1, Some(&state), 16);
    let joined: Vec<Row> = first.into_iter().chain(second).chain(third).collect();
    assert!(joined == whole, "resumed mixture rows differ");
}

/// Every batch of a finite pass until the loader ends, rank by rank (each its own loader).
fn until_end(loader: &Loader) -> Vec<LoaderBatch> {
    let mut out = Vec::new();
    while let Some(batch) = loader.next().unwrap() {
        out.push(batch);
        assert!(out.len() < 10_000, "the pass never ended");
    }
    out
}

#[test]
fn a_finite_packed_pass_holds_every_document_once_in_order_then_ends() {
    let dir = tempfile::tempdir().unwrap();
    let ds = write_docs(&dir.path().join("docs"), 1, 300);
    let source = Source::dataset(ds).unwrap();
    let docs = Stream::new(source.id(), Mode::Sequential, 7, 1).unwrap();
    for mode in [PackMode::Concat, PackMode::BestFit] {
        let spec = pack(mode, 64);
        let mut rows_by_rank = Vec::new();
        for rank in 0..2 {
            let opts = LoaderOptions { passes: Some(1), ..options(rank, 2, 2) };
            let loader = Loader::packed(docs.clone(), 8, vec![source.clone()], spec.clone(), opts).unwrap();
            let batches = until_end(&loader);
            assert!(loader.next().unwrap().is_none(), "a finished pass stays finished");
            rows_by_rank.push(batches.iter().map(|b| rows_of(b, 64)).collect::<Vec<_>>());
        }
        assert_eq!(rows_by_rank[0].len(), rows_by_rank[1].len(), "{mode:?}: ranks end together");
        // Every document once: concat in order, the rest padding (segment 0, the pad id).
        let mut tokens = Vec::new();
        let mut seen = std::collections::BTreeSet::new();
        for b in 0..rows_by_rank[0].len() {
            for rank in &rows_by_rank {
                for (row, segments, _) in &rank[b] {
                    for (&t, &s) in row.iter().zip(segments) {
                        if s == 0 {
                            assert_eq!(t, 3, "{mode:?}: padding is the pad id");
                        } else {
                            tokens.push(t);
                            if t > 2 {
                                assert!(seen.insert(t), "{mode:?}: token {t} twice");
                            }
                        }
                    }
                }
            }
        }
        let expect: Vec<u32> = (0..300).flat_map(|i| virtual_doc(1, i)).collect();
        if mode == PackMode::Concat {
            assert_eq!(tokens, expect, "concat: the documents in order");
        } else {
            assert_eq!(tokens.len(), expect.len(), "best fit: every token");
        }
    }
}

#[test]
fn a_finite_pass_of_samples_pads_its_last_batch_and_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let ds = write_docs(&dir.path().join("docs"), 2, 23);
    let source = Source::dataset(ds).unwrap();
    // 23 samples in global batches of 6 over 2 ranks: 4 batches, the last holding 5.
    let stream = Stream::new(source.id(), Mode::Sequential, 0, 6).unwrap();
    let mut got = Vec::new();
    for rank in 0..2 {
        let opts = LoaderOptions { passes: Some(1), ..options(rank, 2, 2) };
        let loader = Loader::new(stream.clone(), vec![source.clone()], opts).unwrap();
        let batches = until_end(&loader);
        assert_eq!(batches.len(), 4);
        assert_eq!(batches.iter().map(|b| b.valid).collect::<Vec<_>>(), [3, 3, 3, if rank == 0 { 3 } else { 2 }]);
        for b in &batches {
            got.extend(b.indices[..b.valid].iter().map(|&i| (b.step, rank, i)));
        }
    }
    got.sort();
    assert_eq!(got.iter().map(|g| g.2).collect::<Vec<_>>(), (0..23).collect::<Vec<_>>(), "every sample once, in order");
    // A state saved mid-pass resumes into the rest of the pass, and ends with it.
    let opts = LoaderOptions { passes: Some(1), ..options(0, 1, 0) };
    let first = Loader::new(stream.clone(), vec![source.clone()], opts).unwrap();
    first.next().unwrap().unwrap();
    first.next().unwrap().unwrap();
    let state = first.state();
    let rest = Loader::resume(stream.clone(), vec![source.clone()], opts, &state).unwrap();
    let batches = until_end(&rest);
    assert_eq!(batches.iter().map(|b| (b.step, b.valid)).collect::<Vec<_>>(), [(2, 6), (3, 5)]);
    // A shuffled stream has no end to stop at.
    let shuffled = Stream::new(source.id(), Mode::Shuffle, 0, 6).unwrap();
    let e = Loader::new(shuffled, vec![source], opts).err().unwrap();
    assert!(e.to_string().contains("SEQUENTIAL"), "{e}");
}

/// Each epoch's row index of shuffled rows is kept in a directory, where the
/// next loader (another rank, process or run) reads it instead of every length; a damaged
/// file is rebuilt, and a long run keeps the last two epochs' files.
#[test]
fn row_indexes_are_kept_for_the_next_loader_and_pruned() {
    let dir = tempfile::tempdir().unwrap();
    let a = Source::dataset(write_docs(&dir.path().join("a"), 1, 300)).unwrap();
    let docs = Stream::new(a.id(), Mode::Shuffle, 5, 1).unwrap();
    let kept = dir.path().join("rows");
    // The row index, not the order kept in memory that a source this small would take.
    let spec = PackOptions {
        shuffle_rows: None,
        row_indexes: RowIndexes::In(kept.clone()),
        keep_order: 0,
        ..pack(PackMode::Concat, 96)
    };
    let files = || {
        let mut names: Vec<String> =
            std::fs::read_dir(&kept).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        names.sort();
        names
    };
    let (first, _) = read(&docs, std::slice::from_ref(&a), &spec, 8, 1, 1, None, 3);
    let saved = files();
    assert_eq!(saved.len(), 1, "{saved:?}");
    assert!(saved[0].ends_with("-0.zrri"), "{saved:?}");
    let file = kept.join(&saved[0]);
    let bytes = std::fs::read(&file).unwrap();
    // Read back: the same rows; with the file damaged: the same rows, and a whole file again.
    let (again, _) = read(&docs, std::slice::from_ref(&a), &spec, 8, 2, 0, None, 3);
    assert!(again == first);
    let mut bad = bytes.clone();
    bad[100] ^= 1;
    std::fs::write(&file, &bad).unwrap();
    let (rebuilt, _) = read(&docs, std::slice::from_ref(&a), &spec, 8, 1, 0, None, 3);
    assert!(rebuilt == first);
    assert_eq!(std::fs::read(&file).unwrap(), bytes, "rebuilt and saved again");
    // Four epochs: the files of epochs 2 and 3 are left.
    let loader = Loader::packed(docs.clone(), 8, vec![a.clone()], spec.clone(), options(0, 1, 0)).unwrap();
    let per_epoch = loader.steps_per_epoch().unwrap();
    for _ in 0..3 * per_epoch + 1 {
        loader.next().unwrap().unwrap();
    }
    drop(loader);
    let left = files();
    assert_eq!(left.len(), 2, "{left:?}");
    assert!(left.iter().any(|n| n.ends_with("-2.zrri")) && left.iter().any(|n| n.ends_with("-3.zrri")), "{left:?}");
    // Off: nothing read or written.
    std::fs::remove_dir_all(&kept).unwrap();
    let none = PackOptions { row_indexes: RowIndexes::Off, ..spec.clone() };
    let (off, _) = read(&docs, std::slice::from_ref(&a), &none, 8, 1, 0, None, 3);
    assert!(off == first);
    assert!(!kept.exists());
    // The order kept in memory: the same rows, and no index read or written.
    let in_memory = PackOptions { keep_order: 1000, ..spec };
    let (kept_rows, _) = read(&docs, std::slice::from_ref(&a), &in_memory, 8, 2, 1, None, 3);
    assert!(kept_rows == first);
    assert!(!kept.exists());
}
