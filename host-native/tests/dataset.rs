//! Datasets of named fixed and ragged fields over shards: written by `DatasetWriter`, read
//! by `Dataset` and the `Loader`, as one index space.

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;

use zrecord::{
    Codec, Column, Dataset, DatasetWriter, Error, Field, Loader, LoaderError, LoaderOptions, Mode, RaggedField, Source,
    Stream, StreamState, WriteOptions,
};

/// Sample `i`: a 3x4 u8 image of `i % 251`, label `i` as i64, and `1 + i % 7` u16 tokens
/// counting up from `i`.
fn image(i: u64) -> Vec<u8> {
    vec![(i % 251) as u8; 12]
}
fn tokens(i: u64) -> Vec<u16> {
    (0..1 + i % 7).map(|k| (i + k) as u16).collect()
}

fn fields() -> Vec<Field> {
    vec![
        Field::fixed("image", "|u1", &[3, 4], Codec::Flate),
        Field::fixed("label", "<i8", &[], Codec::Raw),
        Field::ragged("tokens", "<u2", Codec::Flate),
    ]
}

/// Writes samples `from..to` in blocks of `block`.
fn write(path: &Path, from: u64, to: u64, shard_records: u64, block: u64) -> Dataset {
    let options = WriteOptions { shard_records, ..WriteOptions::default() };
    let mut w = DatasetWriter::open(path, fields(), options).unwrap();
    let mut start = from;
    while start < to {
        let end = (start + block).min(to);
        let images: Vec<u8> = (start..end).flat_map(image).collect();
        let labels: Vec<u8> = (start..end).flat_map(|i| (i as i64).to_le_bytes()).collect();
        let mut values = Vec::new();
        let mut offsets = vec![0u64];
        for i in start..end {
            values.extend(tokens(i).iter().flat_map(|t| t.to_le_bytes()));
            offsets.push(values.len() as u64);
        }
        w.write(&[
            Column::Fixed(&images),
            Column::Fixed(&labels),
            Column::Ragged { values: &values, offsets: &offsets },
        ])
        .unwrap();
        start = end;
    }
    w.commit().unwrap()
}

fn check_sample(ds: &Dataset, i: u64) {
    let mut img = vec![0u8; 12];
    ds.gather_fixed(0, &[i], &mut img, None, false).unwrap();
    assert_eq!(img, image(i), "image of {i}");
    let (values, offsets) = ds.gather_ragged(2, &[i]).unwrap();
    let toks: Vec<u16> = values.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])).collect();
    assert_eq!(toks, tokens(i), "tokens of {i}");
    assert_eq!(offsets, vec![0, values.len() as u64]);
}

#[test]
fn a_sharded_dataset_is_one_index_space() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ds");
    let ds = write(&path, 0, 2500, 1000, 700);
    assert_eq!(ds.len(), 2500);
    assert_eq!(ds.shard_count(), 3);
    assert_eq!(ds.fields().iter().map(|f| f.name.as_str()).collect::<Vec<_>>(), ["image", "label", "tokens"]);
    for i in [0, 999, 1000, 1001, 1999, 2000, 2499] {
        check_sample(&ds, i);
    }
    // A batch across shards, in any order, lands slot by slot.
    let idx = [2499u64, 3, 1500, 999, 1000];
    let mut labels = vec![0u8; idx.len() * 8];
    ds.gather_fixed(1, &idx, &mut labels, None, false).unwrap();
    let got: Vec<i64> = labels.chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().unwrap())).collect();
    assert_eq!(got, idx.iter().map(|&i| i as i64).collect::<Vec<_>>());
    // Past the end: an index error naming the dataset.
    let e = ds.gather_ragged(2, &[2500]).unwrap_err();
    assert!(matches!(e.source, Error::IndexOutOfRange { index: 2500, .. }), "{e}");
    // Every fixed field store of every shard is a loaderx dataset of its own.
    let schema = std::fs::read_to_string(path.join("shard-000001/image/schema.json")).unwrap();
    assert!(schema.contains("\"|u1\"") && schema.contains("loaderx-zrecord"), "{schema}");
    assert!(!path.join("shard-000001/tokens/schema.json").exists());
    // Appending adds shards; the old ones are untouched.
    drop(ds);
    let ds = write(&path, 2500, 2600, 1000, 64);
    assert_eq!((ds.len(), ds.shard_count()), (2600, 4));
    check_sample(&ds, 2550);
    check_sample(&ds, 10);
}

#[test]
fn a_dropped_writer_leaves_the_dataset_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ds");
    write(&path, 0, 300, 100, 300);
    {
        let mut w =
            DatasetWriter::open(&path, fields(), WriteOptions { shard_records: 100, ..Default::default() }).unwrap();
        let images = vec![1u8; 250 * 12];
        let labels = vec![0u8; 250 * 8];
        let values = vec![0u8; 250 * 2];
        let offsets: Vec<u64> = (0..=250u64).map(|k| 2 * k).collect();
        w.write(&[
            Column::Fixed(&images),
            Column::Fixed(&labels),
            Column::Ragged { values: &values, offsets: &offsets },
        ])
        .unwrap();
        // Dropped without commit, as an exception or KeyboardInterrupt would.
    }
    let ds = Dataset::open(&path).unwrap();
    assert_eq!(ds.len(), 300);
    let mut dirs: Vec<String> =
        std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    dirs.sort();
    assert_eq!(dirs, [".zrecord-write.lock", "dataset.json", "shard-000000", "shard-000001", "shard-000002"]);
}

#[test]
fn bad_columns_name_the_field_and_sample() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = DatasetWriter::open(dir.path().join("ds"), fields(), WriteOptions::default()).unwrap();
    let images = vec![0u8; 2 * 12];
    let labels = vec![0u8; 2 * 8];
    let empty_second = [0u64, 2, 2];
    let values = [0u8; 2];
    let e = w
        .write(&[
            Column::Fixed(&images),
            Column::Fixed(&labels),
            Column::Ragged { values: &values, offsets: &empty_second },
        ])
        .unwrap_err();
    assert!(e.to_string().contains("tokens") && e.to_string().contains("sample 1 is empty"), "{e}");
    assert!(e.to_string().contains("skip_empty=True") && e.to_string().contains("--skip-empty"), "{e}");
    let odd = [0u64, 1, 2];
    let e =
        w.write(&[Column::Fixed(&images), Column::Fixed(&labels), Column::Ragged { values: &values, offsets: &odd }]);
    assert!(e.unwrap_err().to_string().contains("whole number of elements"));
    let three_labels = vec![0u8; 3 * 8];
    let ok = [0u64, 2, 4];
    let four = [0u8; 4];
    let e = w
        .write(&[Column::Fixed(&images), Column::Fixed(&three_labels), Column::Ragged { values: &four, offsets: &ok }])
        .unwrap_err();
    assert!(e.to_string().contains("label") && e.to_string().contains("3 samples"), "{e}");
    // Another dataset's fields cannot be added.
    drop(w);
    write(&dir.path().join("ds2"), 0, 10, 100, 10);
    let other = vec![Field::fixed("image", "|u1", &[3, 5], Codec::Flate)];
    let e = DatasetWriter::open(dir.path().join("ds2"), other, WriteOptions::default()).err().unwrap();
    assert!(e.to_string().contains("cannot add samples"), "{e}");
}

fn shuffle_loader(ds: &Arc<Dataset>, global: u64, rank: u64, world: u64, state: Option<&StreamState>) -> Loader {
    let source = Source::dataset(Arc::clone(ds)).unwrap();
    let stream = Stream::new(source.id(), Mode::Shuffle, 7, global).unwrap();
    let options = LoaderOptions { rank, world_size: world, num_workers: 2, ..LoaderOptions::default() };
    match state {
        None => Loader::new(stream, vec![source], options).unwrap(),
        Some(s) => Loader::resume(stream, vec![source], options, s).unwrap(),
    }
}

/// The labels and token lists of a batch, checked against each other.
fn batch_samples(batch: &zrecord::LoaderBatch) -> Vec<u64> {
    let labels: Vec<u64> =
        batch.fields[1].chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().unwrap()) as u64).collect();
    assert_eq!(labels, batch.indices);
    let Some(RaggedField::Offsets(offsets)) = &batch.ragged[2] else { panic!("tokens come flat") };
    assert_eq!(offsets.len(), labels.len() + 1);
    let toks: Vec<u16> = batch.fields[2].chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])).collect();
    for (k, &i) in labels.iter().enumerate() {
        assert_eq!(&toks[offsets[k] as usize..offsets[k + 1] as usize], &tokens(i)[..]);
        assert_eq!(&batch.fields[0][k * 12..(k + 1) * 12], &image(i)[..]);
    }
    labels
}

#[test]
fn a_shuffled_epoch_over_shards_visits_every_sample_once_and_resumes_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let ds = Arc::new(write(&dir.path().join("ds"), 0, 2500, 1000, 1000));
    let loader = shuffle_loader(&ds, 100, 0, 1, None);
    assert_eq!(loader.steps_per_epoch(), Some(25));
    let mut seen = HashSet::new();
    let mut first_epoch = Vec::new();
    for _ in 0..25 {
        let labels = batch_samples(&loader.next().unwrap().unwrap());
        first_epoch.push(labels.clone());
        seen.extend(labels);
    }
    assert_eq!(seen.len(), 2500);
    loader.close();

    // Stop after 9 batches, resume on 4 ranks of 25: the same global batches.
    let loader = shuffle_loader(&ds, 100, 0, 1, None);
    for _ in 0..9 {
        loader.next().unwrap().unwrap();
    }
    let state = StreamState::decode(&loader.state().encode()).unwrap();
    loader.close();
    let ranks: Vec<Loader> = (0..4).map(|r| shuffle_loader(&ds, 100, r, 4, Some(&state))).collect();
    for expected in &first_epoch[9..] {
        let mut global = Vec::new();
        for r in &ranks {
            global.extend(batch_samples(&r.next().unwrap().unwrap()));
        }
        assert_eq!(&global, expected);
    }
}

#[test]
fn a_loader_of_three_fields_reuses_every_buffer_once_it_runs_steadily() {
    // Four workers hold a buffer per field of up to 9 batches at once (each has one queued
    // and one waiting to be queued, and the consumer one): 27 buffers for 3 fields. The
    // pool must keep them all, or batch after batch allocates (and faults in) new ones. The
    // fields' sizes are far apart, as an image's, a label's and a document's are, so that
    // no field's request fits another field's buffer.
    let dir = tempfile::tempdir().unwrap();
    let (n, image_len) = (3000u64, 64usize);
    let fields = vec![
        Field::fixed("image", "|u1", &[image_len as u64], Codec::Raw),
        Field::fixed("label", "<i8", &[], Codec::Raw),
        Field::ragged("tokens", "<u2", Codec::Raw),
    ];
    let mut w = DatasetWriter::open(dir.path().join("ds"), fields, WriteOptions::default()).unwrap();
    let images = vec![7u8; n as usize * image_len];
    let labels: Vec<u8> = (0..n).flat_map(|i| (i as i64).to_le_bytes()).collect();
    let mut offsets = vec![0u64];
    for i in 0..n {
        offsets.push(offsets[i as usize] + 2 * (200 + i % 41));
    }
    let values = vec![1u8; *offsets.last().unwrap() as usize];
    w.write(&[Column::Fixed(&images), Column::Fixed(&labels), Column::Ragged { values: &values, offsets: &offsets }])
        .unwrap();
    let ds = Arc::new(w.commit().unwrap());
    let source = Source::dataset(Arc::clone(&ds)).unwrap();
    let stream = Stream::new(source.id(), Mode::Shuffle, 3, 256).unwrap();
    let options = LoaderOptions { num_workers: 4, prefetch: 4, ..LoaderOptions::default() };
    let loader = Loader::new(stream, vec![source], options).unwrap();
    let pool = loader.buffers();
    for _ in 0..400 {
        let batch = loader.next().unwrap().unwrap();
        assert_eq!(batch.fields[0].len(), 256 * image_len);
        batch.fields.into_iter().for_each(|buf| pool.give(buf));
    }
    // New buffers only for as many as were ever in flight at once; none after that.
    let most_in_flight = 3 * (2 * 4 + 1);
    assert!(pool.allocated() <= most_in_flight, "{} buffers allocated for 400 batches", pool.allocated());
    loader.close();
}

#[test]
fn a_padded_ragged_field_comes_as_rows_and_lengths() {
    let dir = tempfile::tempdir().unwrap();
    let ds = Arc::new(write(&dir.path().join("ds"), 0, 300, 128, 300));
    let source = Source::dataset(Arc::clone(&ds)).unwrap().padded("tokens", 0xFFFFu16.to_le_bytes().to_vec()).unwrap();
    let stream = Stream::new(source.id(), Mode::Sequential, 0, 16).unwrap();
    let loader =
        Loader::new(stream, vec![source], LoaderOptions { num_workers: 0, ..LoaderOptions::default() }).unwrap();
    for _ in 0..20 {
        let batch = loader.next().unwrap().unwrap();
        let Some(RaggedField::Padded { lengths, width }) = &batch.ragged[2] else { panic!("padded") };
        let toks: Vec<u16> = batch.fields[2].chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])).collect();
        assert_eq!(toks.len(), 16 * width);
        assert_eq!(*width as u64, lengths.iter().copied().max().unwrap());
        for (k, &i) in batch.indices.iter().enumerate() {
            let row = &toks[k * width..(k + 1) * width];
            let want = tokens(i);
            assert_eq!(lengths[k], want.len() as u64);
            assert_eq!(&row[..want.len()], &want[..]);
            assert!(row[want.len()..].iter().all(|&t| t == 0xFFFF));
        }
    }
    let bad = Source::dataset(Arc::clone(&ds)).unwrap().padded("label", vec![0; 8]);
    assert!(matches!(bad, Err(LoaderError::Sources(_))));
}

#[test]
fn a_damaged_record_names_its_shard_store() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ds");
    drop(write(&path, 0, 300, 100, 300));
    // Flip a byte in the middle of shard 1's image chunk file.
    let chunk = path.join("shard-000001/image/0.zr");
    let used = {
        let ds = Dataset::open(&path).unwrap();
        ds.store(1, 0).unwrap().stats().unwrap().chunk_bytes
    };
    {
        // One byte in place: the chunk file is 4 GiB, sparse.
        use std::os::unix::fs::FileExt;
        let file = std::fs::OpenOptions::new().read(true).write(true).open(&chunk).unwrap();
        let mut byte = [0u8];
        file.read_exact_at(&mut byte, used / 2).unwrap();
        file.write_all_at(&[byte[0] ^ 0x55], used / 2).unwrap();
    }
    let ds = Dataset::open(&path).unwrap();
    let all: Vec<u64> = (100..200).collect();
    let mut out = vec![0u8; all.len() * 12];
    let e = ds.gather_fixed(0, &all, &mut out, None, false).unwrap_err();
    assert_eq!(e.code(), -11, "{e}");
    assert!(e.to_string().contains("shard-000001/image"), "{e}");
    let damaged = e.record().expect("a checksum error names its record");
    assert!(damaged < 100, "{e}");
    // A batch over every shard, read in one pass, names the same store and record.
    let every: Vec<u64> = (0..300).rev().collect();
    let mut out = vec![0u8; every.len() * 12];
    let e = ds.gather_fixed(0, &every, &mut out, None, false).unwrap_err();
    assert!(e.to_string().contains("shard-000001/image"), "{e}");
    assert_eq!(e.record(), Some(damaged), "{e}");
    assert_eq!(e.field.as_deref(), Some("image"), "{e}");
    // Shards 0 and 2 still read.
    ds.gather_fixed(0, &[5, 250], &mut out[..24], None, false).unwrap();
}

// NumPy files in and out: `import_npy` / `export_npy` (what `zr convert` and `zr export` run).

use zrecord::dataset::{export_npy, import_npy, ExportTo, ImportOptions};

fn import(
    input: &Path,
    output: &Path,
    shard_records: u64,
    chunk_bytes: usize,
) -> Result<Dataset, zrecord::DatasetError> {
    let options = ImportOptions {
        codec: Codec::Flate,
        write: WriteOptions { shard_records, ..WriteOptions::default() },
        chunk_bytes,
    };
    import_npy(input, output, &options, &mut |_, _| {}).map(|done| done.dataset)
}

fn npy(path: &Path, descr: &str, shape: &[u64], data: &[u8]) {
    let mut bytes = zrecord_app::npy::write_header(descr, shape);
    bytes.extend_from_slice(data);
    std::fs::write(path, bytes).unwrap();
}

fn shard_dirs(path: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(path)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with("shard-"))
        .collect();
    v.sort();
    v
}

#[test]
fn fields_round_trip_through_npy_files_and_npz() {
    let dir = tempfile::tempdir().unwrap();
    let ds = write(&dir.path().join("ds"), 0, 2500, 1000, 700);
    let mut seen = Vec::new();
    let files = dir.path().join("files");
    std::fs::create_dir(&files).unwrap();
    assert_eq!(export_npy(&ds, &files, ExportTo::Dir, 4096, &mut |d, t| seen.push((d, t))).unwrap(), 2500);
    assert_eq!(seen.first(), Some(&(0, 7500)));
    assert_eq!(seen.last(), Some(&(7500, 7500)));
    assert!(seen.windows(2).all(|w| w[0].0 <= w[1].0), "progress only grows");
    let mut names: Vec<String> =
        std::fs::read_dir(&files).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    names.sort();
    assert_eq!(names, ["image.npy", "label.npy", "tokens.npy", "tokens_offsets.npy"]);
    // The offsets file is n + 1 int64 element offsets from 0.
    let raw = std::fs::read(files.join("tokens_offsets.npy")).unwrap();
    let h = zrecord_app::npy::parse_header(&raw).unwrap();
    assert_eq!((h.descr.as_str(), h.shape.as_slice()), ("<i8", &[2501u64][..]));
    let offs: Vec<i64> =
        raw[h.data_offset as usize..].chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().unwrap())).collect();
    let total: i64 = (0..2500).map(|i| tokens(i).len() as i64).sum();
    assert_eq!((offs[0], offs[2500]), (0, total));

    let npz = dir.path().join("all.npz");
    export_npy(&ds, &npz, ExportTo::Npz, 1 << 20, &mut |_, _| {}).unwrap();
    // Small blocks and shards: many blocks, ragged blocks cut short, rolls mid-block.
    for (input, chunk) in [(&files, 999usize), (&npz, 64 << 10)] {
        let out = dir.path().join(format!("back-{chunk}"));
        let back = import(input, &out, 600, chunk).unwrap();
        assert_eq!(back.len(), 2500);
        assert_eq!(back.shard_count(), 5);
        // The same fields; the codec is the import's (raw labels come back as flate).
        let shape = |f: &Field| (f.name.clone(), f.kind, f.dtype.clone(), f.shape.clone());
        assert_eq!(
            back.fields().iter().map(shape).collect::<Vec<_>>(),
            ds.fields().iter().map(shape).collect::<Vec<_>>()
        );
        for i in 0..2500 {
            check_sample(&back, i);
        }
        let mut label = [0u8; 8];
        back.gather_fixed(1, &[1234], &mut label, None, false).unwrap();
        assert_eq!(i64::from_le_bytes(label), 1234);
    }
    // Appending the same files again doubles the dataset, sample for sample.
    let again = import(&files, &dir.path().join("back-999"), 600, 1 << 20).unwrap();
    assert_eq!(again.len(), 5000);
    let (mut img, mut label) = (vec![0u8; 12], [0u8; 8]);
    again.gather_fixed(0, &[4999], &mut img, None, false).unwrap();
    again.gather_fixed(1, &[4999], &mut label, None, false).unwrap();
    assert_eq!((img, i64::from_le_bytes(label)), (image(2499), 2499), "sample 2499 again, at index 4999");
}

#[test]
fn a_bad_input_file_is_named_and_the_dataset_is_left_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("ds");
    write(&target, 0, 300, 100, 300);
    let good = dir.path().join("good");
    std::fs::create_dir(&good).unwrap();
    let ds = Dataset::open(&target).unwrap();
    export_npy(&ds, &good, ExportTo::Dir, 1 << 20, &mut |_, _| {}).unwrap();
    drop(ds);
    let before = shard_dirs(&target);
    let manifest = std::fs::read(target.join("dataset.json")).unwrap();

    let offsets_of = |v: &[i64]| v.iter().flat_map(|o| o.to_le_bytes()).collect::<Vec<u8>>();
    let total: i64 = (0..300).map(|i| tokens(i).len() as i64).sum();
    let mut good_offsets = vec![0i64];
    for i in 0..300 {
        good_offsets.push(good_offsets[i as usize] + tokens(i).len() as i64);
    }
    type Damage = Box<dyn Fn(&Path)>;
    let cases: Vec<(&str, Damage, &str, &str)> = vec![
        (
            "a field with fewer samples",
            Box::new(|d: &Path| npy(&d.join("label.npy"), "<i8", &[299], &[0u8; 299 * 8])),
            "label.npy",
            "299 samples",
        ),
        (
            "offsets that do not start at 0",
            Box::new({
                let mut o = good_offsets.clone();
                o[0] = 1;
                move |d: &Path| npy(&d.join("tokens_offsets.npy"), "<i8", &[301], &offsets_of(&o))
            }),
            "tokens_offsets.npy",
            "start at 0",
        ),
        (
            "offsets going back",
            Box::new({
                let mut o = good_offsets.clone();
                o[200] = o[198];
                move |d: &Path| npy(&d.join("tokens_offsets.npy"), "<i8", &[301], &offsets_of(&o))
            }),
            "tokens_offsets.npy",
            "offset 200",
        ),
        (
            "a last offset short of the values",
            Box::new({
                let mut o = good_offsets.clone();
                o[300] = total - 1;
                move |d: &Path| npy(&d.join("tokens_offsets.npy"), "<i8", &[301], &offsets_of(&o))
            }),
            "tokens_offsets.npy",
            "last offset",
        ),
        (
            "float offsets",
            Box::new(|d: &Path| npy(&d.join("tokens_offsets.npy"), "<f8", &[301], &[0u8; 301 * 8])),
            "tokens_offsets.npy",
            "int32/int64",
        ),
        (
            "a truncated file",
            Box::new(|d: &Path| {
                let p = d.join("image.npy");
                let bytes = std::fs::read(&p).unwrap();
                std::fs::write(&p, &bytes[..bytes.len() - 5]).unwrap();
            }),
            "image.npy",
            "truncated",
        ),
        (
            "a ragged sample that is empty",
            Box::new({
                let mut o = good_offsets.clone();
                o[5] = o[4];
                o[4] = o[3];
                o[5] = o[4];
                move |d: &Path| npy(&d.join("tokens_offsets.npy"), "<i8", &[301], &offsets_of(&o))
            }),
            "ds",
            "empty",
        ),
    ];
    for (what, damage, file, words) in cases {
        let input = dir.path().join("bad");
        let _ = std::fs::remove_dir_all(&input);
        std::fs::create_dir(&input).unwrap();
        for name in ["image.npy", "label.npy", "tokens.npy", "tokens_offsets.npy"] {
            std::fs::copy(good.join(name), input.join(name)).unwrap();
        }
        damage(&input);
        let err = import(&input, &target, 100, 1000).expect_err(what);
        let text = err.to_string();
        assert!(err.path.ends_with(file), "{what}: {text}");
        assert!(text.contains(words), "{what}: {text}");
        assert_eq!(shard_dirs(&target), before, "{what}: no shard is left behind");
        assert_eq!(std::fs::read(target.join("dataset.json")).unwrap(), manifest, "{what}");
        assert_eq!(Dataset::open(&target).unwrap().len(), 300, "{what}");
    }

    // A damaged .npz member fails its CRC-32 check, named inside the archive.
    let npz = dir.path().join("x.npz");
    export_npy(&Dataset::open(&target).unwrap(), &npz, ExportTo::Npz, 1 << 20, &mut |_, _| {}).unwrap();
    let mut bytes = std::fs::read(&npz).unwrap();
    let at = bytes.windows(9).position(|w| w == b"image.npy").unwrap() + 9 + 200;
    bytes[at] ^= 0xff;
    std::fs::write(&npz, &bytes).unwrap();
    let err = import(&npz, &target, 100, 1000).unwrap_err();
    assert!(err.path.ends_with("x.npz/image.npy"), "{err}");
    assert!(err.to_string().contains("CRC-32"), "{err}");
    assert_eq!(shard_dirs(&target), before);
    // An archive that is not one.
    std::fs::write(&npz, b"PK not really").unwrap();
    assert!(import(&npz, &target, 100, 1000).unwrap_err().to_string().contains("not an .npz"));
}

/// Apparent size (what `stat` says, what a copy tool writes) and allocated size of every
/// file under `dir`.
fn sizes(dir: &Path) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    let (mut apparent, mut allocated) = (0, 0);
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let meta = entry.metadata().unwrap();
        if meta.is_dir() {
            let (a, b) = sizes(&entry.path());
            apparent += a;
            allocated += b;
        } else {
            apparent += meta.len();
            allocated += meta.blocks() * 512;
        }
    }
    (apparent, allocated)
}

#[test]
fn a_dataset_is_written_dense_and_changes_layout_both_ways() {
    use zrecord::{FileLayout, Zrecord};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ds");
    let ds = write(&path, 0, 900, 300, 128);
    let id = ds.id().unwrap();
    let stored: u64 = ds.stores().unwrap().iter().map(|s| s.stats().unwrap().live_bytes).sum();
    let store_count = ds.stores().unwrap().len() as u64;
    assert_eq!(store_count, 9);
    for s in ds.stores().unwrap() {
        assert_eq!(s.layout(), FileLayout::Dense);
    }
    drop(ds);
    // Payloads, a 16-byte entry and a 32-byte checksum slot per record, small side files.
    let (apparent, _) = sizes(&path);
    assert!(apparent <= stored + 900 * 3 * 48 + store_count * 4096, "{apparent} bytes on disk for {stored} stored");

    // A reader holds the stores it opened (a loader opens them all): no layout change
    // under it.
    let reader = Dataset::open(&path).unwrap();
    reader.open_all().unwrap();
    let e = zrecord::dataset::set_layout(&path, FileLayout::Sparse, &mut |_, _| {}).unwrap_err();
    assert!(matches!(e.source, Error::Locked(_)), "{e}");
    drop(reader);

    let done = zrecord::dataset::set_layout(&path, FileLayout::Sparse, &mut |_, _| {}).unwrap();
    assert_eq!((done.stores, done.changed), (9, 9));
    let meta = path.join("shard-000001/image/meta.zr");
    assert_eq!(std::fs::metadata(&meta).unwrap().len(), 268_435_472);
    assert_eq!(std::fs::metadata(path.join("shard-000001/image/0.zr")).unwrap().len(), 1 << 32);
    let ds = Dataset::open(&path).unwrap();
    for s in ds.stores().unwrap() {
        assert_eq!(s.layout(), FileLayout::Sparse);
    }
    // No record moved: a state saved before resumes after.
    assert_eq!(ds.id().unwrap(), id);
    for i in (0..900).step_by(37) {
        check_sample(&ds, i);
    }
    drop(ds);

    let done = zrecord::dataset::set_layout(&path, FileLayout::Dense, &mut |_, _| {}).unwrap();
    assert_eq!((done.stores, done.changed), (9, 9));
    assert_eq!(sizes(&path).0, apparent);
    // Appends to a dense dataset stay dense; a store on its own changes too.
    let ds = write(&path, 900, 1000, 300, 64);
    for i in (0..1000).step_by(13) {
        check_sample(&ds, i);
    }
    drop(ds);
    let mut store = Zrecord::open(path.join("shard-000003/tokens")).unwrap();
    assert_eq!(store.layout(), FileLayout::Dense);
    store.set_layout(FileLayout::Sparse).unwrap();
    assert_eq!(store.layout(), FileLayout::Sparse);
    drop(store);
    assert_eq!(Zrecord::open_read_only(path.join("shard-000003/tokens")).unwrap().layout(), FileLayout::Sparse);
}

#[test]
fn bytes_and_string_fields_read_back_their_values_and_name_a_damaged_record() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ds");
    let texts = ["", "caption one", "naïve ✓", "", "last"];
    let fields = vec![Field::string("caption", Codec::Raw), Field::bytes("blob", Codec::Raw)];
    let mut w =
        DatasetWriter::open(&path, fields, WriteOptions { shard_records: 3, ..WriteOptions::default() }).unwrap();
    let mut values = Vec::new();
    let mut offsets = vec![0u64];
    for t in texts {
        values.extend_from_slice(t.as_bytes());
        offsets.push(values.len() as u64);
    }
    let column = Column::Ragged { values: &values, offsets: &offsets };
    // A string that is not UTF-8 is refused, naming the field and the sample.
    let bad = [b'a', 0xff];
    let e = w.write(&[Column::Ragged { values: &bad, offsets: &[0, 1, 2] }, column]).unwrap_err();
    assert!(e.to_string().contains("caption") && e.to_string().contains("sample 1: not UTF-8"), "{e}");
    w.write(&[column, column]).unwrap();
    w.commit().unwrap();

    let ds = Arc::new(Dataset::open(&path).unwrap());
    let (got, at) = ds.gather_ragged(0, &[4, 0, 2, 1]).unwrap();
    let strings: Vec<&str> =
        at.windows(2).map(|w| std::str::from_utf8(&got[w[0] as usize..w[1] as usize]).unwrap()).collect();
    assert_eq!(strings, ["last", "", "naïve ✓", "caption one"]);
    // The loader's batches hold the values, without stop bytes, across both shards.
    let source = Source::dataset(ds.clone()).unwrap();
    let stream = Stream::new(source.id(), Mode::Sequential, 0, 5).unwrap();
    let loader =
        Loader::new(stream, vec![source], LoaderOptions { num_workers: 1, ..LoaderOptions::default() }).unwrap();
    let batch = loader.next().unwrap().unwrap();
    let Some(RaggedField::Offsets(bounds)) = &batch.ragged[1] else { panic!("{:?}", batch.ragged) };
    assert_eq!(bounds, &[0, 0, 11, 21, 21, 25]);
    assert_eq!(batch.fields[1], values);
    loader.close();
    drop(ds);

    // Record 1 of shard 1 ("last" and its stop byte, raw): its stop byte made another
    // byte. With checksums off, the read still refuses it, naming store and record.
    let chunk = path.join("shard-000001").join("caption").join("0.zr");
    let mut bytes = std::fs::read(&chunk).unwrap();
    let at = bytes.windows(5).position(|w| w == b"last\0").expect("the record's bytes");
    bytes[at + 4] = b'!';
    std::fs::write(&chunk, &bytes).unwrap();
    let unchecked =
        Dataset::open_with(&path, zrecord::DatasetOptions { verify: zrecord::Verify::Never, ..Default::default() })
            .unwrap();
    let e = unchecked.gather_ragged(0, &[3, 4]).unwrap_err();
    assert!(e.path.ends_with("shard-000001/caption"), "{e}");
    assert_eq!(e.record(), Some(1), "{e}");
    assert!(matches!(e.source, Error::Decode { source: zrecord::DecodeError::NoStopByte { found: b'!' }, .. }), "{e}");
}

#[test]
fn a_field_is_added_and_dropped_and_saved_states_still_resume() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ds");
    let ds = Arc::new(write(&path, 0, 1000, 300, 128));
    let id = ds.id().unwrap();
    // A state saved before the change, and the batches an uninterrupted run reads after it.
    let source = Source::dataset(ds.clone()).unwrap();
    let stream = Stream::new(source.id(), Mode::Shuffle, 9, 50).unwrap();
    let state = stream.state(7);
    drop(ds);

    // Scores for every sample, in blocks that cross the shards (300, 300, 300, 100).
    let score = |i: u64| (i as f32 * 0.5).to_le_bytes();
    let mut adder =
        zrecord::FieldAdder::open(&path, Field::fixed("score", "<f4", &[], Codec::Raw), WriteOptions::default())
            .unwrap();
    assert_eq!(adder.len(), 1000);
    let e = adder.write(Column::Fixed(&[0u8; 6])).unwrap_err();
    assert!(e.to_string().contains("not a whole number of 4-byte samples"), "{e}");
    for block in [0..250u64, 250..710, 710..1000] {
        let bytes: Vec<u8> = block.clone().flat_map(score).collect();
        adder.write(Column::Fixed(&bytes)).unwrap();
    }
    let too_many: Vec<u8> = score(0).to_vec();
    assert!(adder.write(Column::Fixed(&too_many)).unwrap_err().to_string().contains("1001 samples given"));
    let ds = Arc::new(adder.commit().unwrap());
    let names: Vec<&str> = ds.fields().iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names, ["image", "label", "tokens", "score"]);
    let mut out = vec![0u8; 4 * 4];
    ds.gather_fixed(3, &[0, 299, 300, 999], &mut out, None, false).unwrap();
    assert_eq!(out, [0u64, 299, 300, 999].iter().flat_map(|&i| score(i)).collect::<Vec<u8>>());
    assert_eq!(ds.id().unwrap(), id, "a new column keeps the rows' identity");
    let source = Source::dataset(ds.clone()).unwrap();
    assert!(Loader::resume(stream.clone(), vec![source], LoaderOptions::default(), &state).is_ok());

    // A second add of the same name is refused; an add dropped half-way leaves nothing.
    let again =
        zrecord::FieldAdder::open(&path, Field::fixed("score", "<f8", &[], Codec::Raw), WriteOptions::default());
    assert!(again.err().unwrap().to_string().contains("already has a field \"score\""));
    // ... and touches nothing of the field there.
    let kept = Dataset::open(&path).unwrap();
    let mut out = vec![0u8; 4 * 4];
    kept.gather_fixed(3, &[0, 299, 300, 999], &mut out, None, false).unwrap();
    assert_eq!(out, [0u64, 299, 300, 999].iter().flat_map(|&i| score(i)).collect::<Vec<u8>>());
    let mut half =
        zrecord::FieldAdder::open(&path, Field::string("note", Codec::Flate), WriteOptions::default()).unwrap();
    let text = b"abc";
    half.write(Column::Ragged { values: text, offsets: &[0, 3, 3] }).unwrap();
    assert!(half.commit().unwrap_err().to_string().contains("2 samples given, the dataset holds 1000"));
    assert!(!path.join("shard-000000").join("note").exists());

    // Dropping a field: gone from the manifest and the disk, identity kept.
    drop(ds);
    let dropped = zrecord::drop_field(&path, "image").unwrap();
    assert_eq!(dropped.name, "image");
    assert!(!path.join("shard-000001").join("image").exists());
    let ds = Dataset::open(&path).unwrap();
    assert_eq!(ds.fields().len(), 3);
    assert_eq!(ds.id().unwrap(), id);
    assert!(zrecord::drop_field(&path, "image").unwrap_err().to_string().contains("no field \"image\""));

    // An append after the change gives the rows a new identity.
    let mut w = DatasetWriter::open(&path, ds.fields().to_vec(), WriteOptions::default()).unwrap();
    let labels = 5i64.to_le_bytes();
    let tok = [1u8, 0];
    let sc = score(5);
    w.write(&[Column::Fixed(&labels), Column::Ragged { values: &tok, offsets: &[0, 2] }, Column::Fixed(&sc)]).unwrap();
    let grown = w.commit().unwrap();
    assert_eq!(grown.len(), 1001);
    assert_ne!(grown.id().unwrap().generation, id.generation);
}

#[test]
fn deleted_samples_are_gone_from_every_field_and_every_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ds");
    let fields = vec![Field::fixed("label", "<i8", &[], Codec::Raw), Field::bytes("blob", Codec::Raw)];
    let mut w =
        DatasetWriter::open(&path, fields, WriteOptions { shard_records: 100, ..WriteOptions::default() }).unwrap();
    let n = 350u64;
    let labels: Vec<u8> = (0..n).flat_map(|i| (i as i64).to_le_bytes()).collect();
    let blob = |i: u64| format!("<secret {i:05}>").into_bytes();
    let mut values = Vec::new();
    let mut offsets = vec![0u64];
    for i in 0..n {
        values.extend(blob(i));
        offsets.push(values.len() as u64);
    }
    w.write(&[Column::Fixed(&labels), Column::Ragged { values: &values, offsets: &offsets }]).unwrap();
    w.commit().unwrap();
    let old_id = Dataset::open(&path).unwrap().id().unwrap();

    // Samples in shards 0 and 2 (shards 1 and 3 are not touched), with a repeat.
    let gone = [5u64, 0, 99, 205, 5, 250];
    let e = zrecord::dataset::delete_samples(&path, &[1, 350], &mut |_, _| {}).unwrap_err();
    assert!(e.to_string().contains("index 350 is out of range for a dataset of 350 samples"), "{e}");
    let untouched = std::fs::read(path.join("shard-000001").join("blob").join("0.zr")).unwrap();
    let mut reports = Vec::new();
    let done = zrecord::dataset::delete_samples(&path, &gone, &mut |d, t| reports.push((d, t))).unwrap();
    assert_eq!((done.samples, done.shards, done.remaining), (5, 2, 345));
    assert_eq!(reports.last(), Some(&(2 * 195, 2 * 195)));

    let ds = Dataset::open(&path).unwrap();
    assert_eq!(ds.len(), 345);
    assert_ne!(ds.id().unwrap(), old_id);
    let keep: Vec<u64> = (0..n).filter(|i| !gone.contains(i)).collect();
    let mut out = vec![0u8; 8 * keep.len()];
    let all: Vec<u64> = (0..ds.len()).collect();
    ds.gather_fixed(0, &all, &mut out, None, false).unwrap();
    assert_eq!(out, keep.iter().flat_map(|&i| (i as i64).to_le_bytes()).collect::<Vec<u8>>(), "order kept");
    let (got, at) = ds.gather_ragged(1, &all).unwrap();
    for (k, &i) in keep.iter().enumerate() {
        assert_eq!(&got[at[k] as usize..at[k + 1] as usize], blob(i).as_slice());
    }
    // The untouched shard is the same folder with the same bytes.
    assert_eq!(std::fs::read(path.join("shard-000001").join("blob").join("0.zr")).unwrap(), untouched);
    // No file of the dataset holds a deleted sample's bytes.
    let mut files = vec![path.clone()];
    while let Some(p) = files.pop() {
        if p.is_dir() {
            files.extend(std::fs::read_dir(&p).unwrap().map(|e| e.unwrap().path()));
            continue;
        }
        let bytes = std::fs::read(&p).unwrap();
        for &i in &gone {
            let secret = blob(i);
            assert!(!bytes.windows(secret.len()).any(|w| w == secret), "{} holds sample {i}", p.display());
        }
    }
}

#[test]
fn concat_makes_one_dataset_of_two_by_linking_their_files() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let (a, b, out) = (dir.path().join("a"), dir.path().join("b"), dir.path().join("out"));
    write(&a, 0, 250, 100, 64);
    write(&b, 250, 400, 1000, 64);
    let done = zrecord::dataset::concat(&[a.clone(), b.clone()], &out).unwrap();
    assert_eq!((done.samples, done.shards, done.copied), (400, 4, 0));
    let ds = Dataset::open(&out).unwrap();
    let mut labels = vec![0u8; 8 * 400];
    ds.gather_fixed(1, &(0..400).collect::<Vec<u64>>(), &mut labels, None, false).unwrap();
    assert_eq!(labels, (0..400i64).flat_map(|i| i.to_le_bytes()).collect::<Vec<u8>>());
    let (tokens_got, at) = ds.gather_ragged(2, &[399, 0]).unwrap();
    let want: Vec<u8> = tokens(399).iter().chain(&tokens(0)).flat_map(|t| t.to_le_bytes()).collect();
    assert_eq!(
        (tokens_got, at),
        (want, vec![0, 2 * tokens(399).len() as u64, 2 * (tokens(399).len() + tokens(0).len()) as u64])
    );
    // The records are the sources' bytes, not copies of them.
    let chunk = |p: &Path| std::fs::metadata(p.join("image").join("0.zr")).unwrap();
    assert_eq!(chunk(&out.join("shard-000003")).ino(), chunk(&b.join("shard-000000")).ino());
    assert_eq!(chunk(&a.join("shard-000000")).nlink(), 2);
    // Appending to the new dataset leaves the sources as they were.
    drop(ds);
    write(&out, 400, 410, 1000, 64);
    assert_eq!((Dataset::open(&a).unwrap().len(), Dataset::open(&out).unwrap().len()), (250, 410));
    // Refusals: an existing destination, and fields that differ, saying how.
    let e = zrecord::dataset::concat(std::slice::from_ref(&a), &out).unwrap_err();
    assert!(e.to_string().contains("exists"), "{e}");
    let other = dir.path().join("other");
    let mut w =
        DatasetWriter::open(&other, vec![Field::fixed("label", "<i4", &[], Codec::Raw)], WriteOptions::default())
            .unwrap();
    w.write(&[Column::Fixed(&[0u8; 4])]).unwrap();
    w.commit().unwrap();
    let e = zrecord::dataset::concat(&[a.clone(), other], &dir.path().join("bad")).unwrap_err();
    assert!(e.to_string().contains("missing image, tokens; label is <i8[] here, <i4[] there"), "{e}");
    assert!(!dir.path().join("bad").exists());
}

/// Global batches `steps` of `loaders` (the ranks of one job), put back together.
fn global_batches(loaders: &[Loader], steps: usize) -> Vec<Vec<u64>> {
    (0..steps).map(|_| loaders.iter().flat_map(|l| batch_samples(&l.next().unwrap().unwrap())).collect()).collect()
}

#[test]
fn a_state_resumes_on_the_dataset_grown_by_appends_locally_and_in_an_object_store() {
    use zrecord::dataset::{commit_remote, finish_part, write_tag};
    use zrecord::remote::{push::push, Remote};
    // A state saved before an append used to be refused as another dataset. Now
    // the running epoch finishes over the 1000 samples exactly as it would have, and the
    // grown dataset's epochs follow.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ds");
    let ds = Arc::new(write(&path, 0, 1000, 300, 1000));
    let url = "memory://grown-state/ds";
    push(&path, &Remote::open(url, &[]).unwrap(), &mut |_, _| {}).unwrap();
    let whole = global_batches(&[shuffle_loader(&ds, 100, 0, 1, None)], 10);
    let loader = shuffle_loader(&ds, 100, 0, 1, None);
    global_batches(std::slice::from_ref(&loader), 4);
    let saved = StreamState::decode(&loader.state().encode()).unwrap();
    loader.close();
    drop(ds);

    // Grown locally by 500 samples (two shards), and in the object store by the same.
    let grown = Arc::new(write(&path, 1000, 1500, 300, 500));
    assert_eq!(grown.grown_from().len(), 1);
    let remote = Remote::open(url, &[]).unwrap();
    write(&dir.path().join("part"), 1000, 1500, 300, 500);
    let part = finish_part(&dir.path().join("part"), Some(&remote), 0, &write_tag()).unwrap();
    commit_remote(&remote, &[part], true).unwrap();
    let far = Arc::new(Dataset::open_remote(url, &[], zrecord::Verify::Auto).unwrap());
    assert_eq!(far.len(), 1500);

    for ds in [&grown, &far] {
        // Resumed on 2 ranks of 50: the rest of epoch 0 as before, over the first 1000.
        let ranks: Vec<Loader> = (0..2).map(|r| shuffle_loader(ds, 100, r, 2, Some(&saved))).collect();
        assert_eq!(ranks[0].steps_per_epoch(), Some(10));
        assert_eq!(global_batches(&ranks, 6), whole[4..]);
        // Epoch 1 is the grown dataset's: 15 batches, every sample once.
        assert_eq!(ranks[0].steps_per_epoch(), Some(15));
        let epoch1 = global_batches(&ranks, 15);
        let seen: HashSet<u64> = epoch1.iter().flatten().copied().collect();
        assert_eq!(seen.len(), 1500);
        // Saved in epoch 1 and resumed on one rank: the same batches.
        let again = StreamState::decode(&ranks[1].state().encode()).unwrap();
        let more = global_batches(&ranks, 3);
        let one = shuffle_loader(ds, 100, 0, 1, Some(&again));
        assert_eq!(global_batches(std::slice::from_ref(&one), 3), more);
    }

    // A delete breaks the chain: the rows a state pointed at may be gone.
    drop(grown);
    zrecord::dataset::delete_samples(&path, &[3], &mut |_, _| {}).unwrap();
    let after = Arc::new(Dataset::open(&path).unwrap());
    assert!(after.grown_from().is_empty());
    let source = Source::dataset(Arc::clone(&after)).unwrap();
    let stream = Stream::new(source.id(), Mode::Shuffle, 7, 100).unwrap();
    let e = Loader::resume(stream, vec![source], LoaderOptions::default(), &saved).err().unwrap();
    assert!(e.to_string().contains("grew from 1000 to 1499 samples, and not by appends"), "{e}");
}

/// One rule for empty documents in every writer: refused by default (above),
/// left out whole and counted with `skip_empty`.
#[test]
fn skip_empty_leaves_out_whole_samples_and_counts_them() {
    let dir = tempfile::tempdir().unwrap();
    let options = WriteOptions { skip_empty: true, shard_records: 3, ..WriteOptions::default() };
    let mut w = DatasetWriter::open(dir.path().join("ds"), fields(), options).unwrap();
    let images: Vec<u8> = (0..5 * 12).map(|b| b as u8).collect();
    let labels: Vec<u8> = (0..5i64).flat_map(i64::to_le_bytes).collect();
    // Samples 1 and 3 have no tokens.
    let values: Vec<u8> = [10u16, 11, 30, 40, 41].iter().flat_map(|t| t.to_le_bytes()).collect();
    let offsets = [0u64, 4, 4, 6, 6, 10];
    let cols = [Column::Fixed(&images), Column::Fixed(&labels), Column::Ragged { values: &values, offsets: &offsets }];
    assert_eq!(w.write(&cols).unwrap(), 3);
    assert_eq!(w.skipped(), 2);
    let ds = w.commit().unwrap();
    assert_eq!(ds.len(), 3);
    let (labels, _) = ds.gather_ragged(1, &[0, 1, 2]).unwrap();
    let labels: Vec<i64> = labels.chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().unwrap())).collect();
    assert_eq!(labels, [0, 2, 4], "the kept samples, every field of them");
    let (images, _) = ds.gather_ragged(0, &[1]).unwrap();
    assert_eq!(images[0], 24, "sample 2's image");
    let (tokens, at) = ds.gather_ragged(2, &[0, 1, 2]).unwrap();
    let tokens: Vec<u16> = tokens.chunks_exact(2).map(|c| u16::from_le_bytes(c.try_into().unwrap())).collect();
    assert_eq!((tokens, at), (vec![10, 11, 30, 40, 41], vec![0, 4, 6, 10]));
}

/// A piece of a record reads as the same bytes of the whole record, raw (from the map)
/// and compressed (decoded whole); past the record's end is an error naming it.
#[test]
fn a_piece_of_a_record_is_those_bytes_of_it() {
    let dir = tempfile::tempdir().unwrap();
    for codec in [Codec::Raw, Codec::Flate] {
        let path = dir.path().join(format!("{codec:?}"));
        let fields = vec![Field::ragged("tokens", "<u2", codec)];
        let mut w = DatasetWriter::open(&path, fields, WriteOptions::default()).unwrap();
        let values: Vec<u8> = (0..3000u16).flat_map(|t| (t % 7).to_le_bytes()).collect();
        w.write(&[Column::Ragged { values: &values, offsets: &[0, 2000, 6000] }]).unwrap();
        let ds = w.commit().unwrap();
        let (whole, _) = ds.gather_ragged(0, &[1]).unwrap();
        let mut scratch = Vec::new();
        for (from, len) in [(0usize, 4000usize), (2, 10), (3990, 10), (1234, 1)] {
            let mut out = vec![0u8; len];
            ds.read_piece(0, 1, from as u64, &mut out, &mut scratch).unwrap();
            assert_eq!(out, whole[from..from + len], "{codec:?} {from}+{len}");
        }
        let e = ds.read_piece(0, 1, 3999, &mut [0u8; 2], &mut scratch).unwrap_err().to_string();
        assert!(e.contains("bytes 3999..+2 of record 1, which holds 4000"), "{e}");
    }
}
