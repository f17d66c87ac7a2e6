//! Fuzz target bodies, plain functions over bytes so that `cargo test` can replay the kept
//! corpus (`fuzz/regressions/<target>/`) on stable without libFuzzer
//! (`core/tests/fuzz_replay.rs` includes this file).
//!
//! - [`open_store`]: a store built from arbitrary meta.zr and chunk bytes is opened and
//!   read every way; anything may fail, nothing may panic.
//! - [`inflate`]: arbitrary DEFLATE into a destination of arbitrary size.
//! - [`ops`]: append/delete/compact/gather/sync/reopen sequences against an in-memory model
//!   (redb's fuzzer style); the store must match the model after every step.
//! - [`long_index`]: a store's long index (samples longer than a record) from arbitrary
//!   bytes, with arbitrary piece lengths and byte ranges: refused or consistent, never a
//!   panic.
//! - [`image`] (feature `images`): arbitrary bytes through a loader's image pipeline (the
//!   header, the decoders, the crop and resize) under a small `max_pixels`: an image or
//!   an error, never a panic, never more memory than the limit allows.

use zrecord_app::tools;
use zrecord_core::codec::{decode_into, inflate_into, Codec};
use zrecord_core::engine::{Batch, Options, Store};
use zrecord_core::format::{CHUNK_FILE_LEN, META_FILE, META_LEN};
use zrecord_core::io::mem::MemBackend;
use zrecord_core::io::{Backend, Serial, StorageFile};

fn u16_at(d: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([*d.get(at).unwrap_or(&0), *d.get(at + 1).unwrap_or(&0)])
}

/// `data` = meta length (u16) | meta bytes | chunk 0 bytes | ... split at u16 lengths.
pub fn open_store(data: &[u8]) {
    let meta_n = usize::from(u16_at(data, 0)).min(data.len().saturating_sub(2));
    let (meta, rest) = data.get(2..).unwrap_or(&[]).split_at(meta_n);
    let b = MemBackend::new();
    let m = b.open_meta(true).unwrap().unwrap();
    m.write_at(0, meta).unwrap();
    // Mostly a full-size meta.zr (so entries are reached); sometimes the raw size.
    if rest.first().is_some_and(|&x| x & 1 == 0) {
        m.set_len(META_LEN).unwrap();
    }
    let mut rest = rest.get(1..).unwrap_or(&[]);
    for id in 0..3u16 {
        if rest.is_empty() && id > 0 {
            break;
        }
        let n = usize::from(u16_at(rest, 0)).min(rest.len().saturating_sub(2));
        let bytes = &rest.get(2..).unwrap_or(&[])[..n];
        let c = b.open_chunk(id, true).unwrap().unwrap();
        c.write_at(0, bytes).unwrap();
        if id % 2 == 0 {
            c.set_len(CHUNK_FILE_LEN).unwrap();
        }
        rest = rest.get(2 + n..).unwrap_or(&[]);
    }
    if let Ok((s, _)) = Store::open(b.clone(), Options::read_only()) {
        read_everything(&s);
    }
    // Writable: may replay nothing, re-initialise a never-used meta.zr, or compact.
    if let Ok((mut s, mut w)) = Store::open(b.clone(), Options { chunk_capacity: 4096, ..Options::default() }) {
        read_everything(&s);
        if s.len() <= 256 {
            let _ = s.compact(&mut w, &mut |_, _| {});
            read_everything(&s);
            let _ = s.delete(&mut w, &[0, 1]);
        }
        let _ = s.append(&mut w, &Batch::Fixed { src: b"fuzz", count: 1, item_len: 4 }, Codec::Flate, &Serial);
        read_everything(&s);
    }
    let _ = b.file(META_FILE);
}

fn read_everything<B: Backend>(s: &Store<B>) {
    let n = u64::from(s.len());
    // A hostile length can claim 2^24 entries; read a bounded sample of them.
    let idxs: Vec<u64> = (0..n.min(64)).chain(n.saturating_sub(4)..n + 2).collect();
    for &i in &idxs {
        let _ = s.read(i);
    }
    let mut dst = vec![0u8; 16 * 4096];
    for w in idxs.chunks(16) {
        let _ = s.gather(w, &mut dst, 4096, &Serial);
        let offsets: Vec<u64> = (0..w.len() as u64).map(|k| k * 3000).collect();
        let _ = s.gather_var(w, &mut dst, &offsets, &Serial);
    }
    let mut lens = vec![0u32; idxs.len()];
    let _ = s.lengths(&idxs, &mut lens);
    if n <= 4096 {
        let _ = tools::verify(s, &Serial, &mut |_, _| {});
        let _ = tools::inspect(s);
        let _ = s.stats();
    }
}

/// `data` = destination length (u16, scaled) | DEFLATE bytes (also fed to the zstd decoder,
/// which must fail typed on them, never panic or write past `dst`).
pub fn inflate(data: &[u8]) {
    let n = usize::from(u16_at(data, 0)) * 17 % ((1 << 20) + 1);
    let src = data.get(2..).unwrap_or(&[]);
    let mut dst = vec![0u8; n];
    // A success produced exactly n bytes; check it against a fresh decode.
    if inflate_into(src, &mut dst).is_ok() {
        let mut again = vec![0xEEu8; n];
        decode_into(Codec::Flate, src, &mut again).unwrap();
        assert_eq!(dst, again);
    }
    let _ = decode_into(Codec::Raw, src, &mut dst);
    let _ = decode_into(Codec::Zstd, src, &mut dst);
}

/// `data` = samples (u16) | extra records (u16) | index bytes (u16 length) | index |
/// piece lengths (u16 each) ...: the index is decoded for a store of that many samples and
/// records; a decoded index's entries get the lengths and every range of their bytes
/// asked, each of which must land inside the sample's records.
pub fn long_index(data: &[u8]) {
    use zrecord_core::dataset::long::LongIndex;
    let records = u64::from(u16_at(data, 0));
    let store_len = records + u64::from(u16_at(data, 2));
    let n = usize::from(u16_at(data, 4));
    let body = data.get(6..).unwrap_or(&[]);
    let (index, rest) = body.split_at(n.min(body.len()));
    let Ok(mut ix) = LongIndex::decode(index, records, store_len) else { return };
    let mut lens = rest.chunks(2).map(|c| u32::from(u16_at(c, 0)));
    for k in 0..ix.samples().len() {
        let s = ix.samples()[k];
        assert!(u64::from(s.sample) < records && u64::from(s.first) >= records && s.more >= 1);
        assert!(u64::from(s.first) + u64::from(s.more) < store_len);
        let mine: Vec<u32> = lens.by_ref().take(s.more as usize + 1).collect();
        if ix.set_lengths(k, &mine).is_err() {
            continue;
        }
        let s = ix.samples()[k];
        let total = s.total;
        for (from, len) in [(0, total), (total / 3, total / 2 + 1), (total.saturating_sub(1), 5), (total, 1)] {
            let mut covered = 0;
            for (record, offset, n) in s.ranges(from, len) {
                assert!(
                    record == u64::from(s.sample)
                        || (u64::from(s.first)..u64::from(s.first) + u64::from(s.more)).contains(&record)
                );
                assert!(offset + n <= u64::from(s.piece) && n > 0);
                covered += n;
            }
            assert_eq!(covered, from.saturating_add(len).min(total).saturating_sub(from.min(total)));
        }
    }
}

/// A byte-code of store operations checked against a model after each.
pub fn ops(data: &[u8]) {
    let b = MemBackend::new();
    let opts = Options { chunk_capacity: 2048, ..Options::default() };
    let (mut s, mut w) = Store::open(b.clone(), opts).unwrap();
    let mut model: Vec<Vec<u8>> = Vec::new();
    let mut d = data.iter().copied();
    let mut serial = 0u32;
    while let Some(op) = d.next() {
        let arg = d.next().unwrap_or(0);
        match op % 6 {
            0 | 1 => {
                let count = usize::from(arg % 8);
                let len = 1 + usize::from(d.next().unwrap_or(0)) * 4;
                let recs: Vec<Vec<u8>> = (0..count)
                    .map(|_| {
                        serial += 1;
                        let s = serial;
                        (0..len)
                            .map(|k| {
                                if op & 8 == 0 {
                                    (k / 5) as u8 ^ s as u8
                                } else {
                                    (k as u32).wrapping_mul(s).wrapping_mul(2654435761) as u8
                                }
                            })
                            .collect()
                    })
                    .collect();
                let src = recs.concat();
                let codec = if op & 16 == 0 { Codec::Flate } else { Codec::Raw };
                let first =
                    s.append(&mut w, &Batch::Fixed { src: &src, count, item_len: len }, codec, &Serial).unwrap();
                assert_eq!(first as usize, model.len());
                model.extend(recs);
            }
            2 => {
                let idxs: Vec<u64> = (0..arg % 5).map(|_| u64::from(d.next().unwrap_or(0))).collect();
                let r = s.delete(&mut w, &idxs);
                if idxs.iter().any(|&i| i >= model.len() as u64) {
                    assert!(r.is_err());
                } else {
                    r.unwrap();
                    let mut sorted = idxs.clone();
                    sorted.sort_unstable_by(|a, b| b.cmp(a));
                    sorted.dedup();
                    for i in sorted {
                        model.swap_remove(i as usize);
                    }
                }
            }
            3 => s.compact(&mut w, &mut |_, _| {}).unwrap(),
            4 => {
                if arg & 1 == 0 {
                    s.sync(&mut w).unwrap();
                } else {
                    drop((s, w));
                    (s, w) = Store::open(b.clone(), opts).unwrap();
                }
            }
            _ => {
                if !model.is_empty() {
                    let idxs: Vec<u64> =
                        (0..1 + arg % 6).map(|_| u64::from(d.next().unwrap_or(0)) % model.len() as u64).collect();
                    let stride = 1 + 4 * 255;
                    let mut dst = vec![0u8; idxs.len() * stride];
                    s.gather(&idxs, &mut dst, stride, &Serial).unwrap();
                    for (k, &i) in idxs.iter().enumerate() {
                        let r = &model[i as usize];
                        assert_eq!(&dst[k * stride..k * stride + r.len()], &r[..]);
                    }
                }
            }
        }
        assert_eq!(s.len() as usize, model.len());
    }
    for (i, r) in model.iter().enumerate() {
        assert_eq!(&s.read(i as u64).unwrap(), r);
    }
}

/// `data` = options byte | image bytes: the options pick the geometry, an output size of
/// 1 to 32, flip, dtype and layout; `max_pixels` is 2^20, so a bomb is refused early.
#[cfg(feature = "images")]
pub fn image(data: &[u8]) {
    use zrecord_core::image::crop::{Dtype, Geometry, Key, Layout, Pipeline};
    use zrecord_core::image::render::{decode, render, Scratch};
    let Some((&options, bytes)) = data.split_first() else { return };
    let geometry = match options % 3 {
        0 => Geometry::RandomResizedCrop { scale: (0.08, 1.0), ratio: (0.75, 4.0 / 3.0) },
        1 => Geometry::CenterCrop { ratio: 0.875 },
        _ => Geometry::Resize,
    };
    let side = u32::from(options >> 3) + 1;
    let pipeline = Pipeline {
        geometry,
        height: side,
        width: side.div_ceil(2),
        flip: f64::from(options & 4) / 4.0,
        dtype: if options & 1 == 0 { Dtype::U8 } else { Dtype::F32 },
        layout: if options & 2 == 0 { Layout::Chw } else { Layout::Hwc },
        mean: [0.5; 3],
        std: [0.25; 3],
        max_pixels: 1 << 20,
    };
    let key = Key { seed: u64::from(options), step: 3, source: 0, index: 9, field: 1 };
    let mut out = vec![0u8; pipeline.sample_bytes()];
    let rendered = render(bytes, &pipeline, &key, &mut out, &mut Scratch::default());
    if let Ok(rgb) = decode(bytes, 1 << 20) {
        assert_eq!(rgb.pixels.len(), rgb.width as usize * rgb.height as usize * 3);
        assert!(rendered.is_ok(), "decodes, but does not render");
    }
}
