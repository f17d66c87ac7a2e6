//! DEFLATE (as zrecord writes and reads it) against zstd's fast levels and LZ4, record by
//! record, one core: encode MB/s, decode MB/s and ratio on each `.npy` given.
//!
//!     cargo run --release --manifest-path bench/codecs/Cargo.toml -- bench/.data/*.npy
//!
//! Every record is compressed on its own (no dictionary, no shared window), as a store
//! does; a record a codec does not shrink counts at its raw size and decodes as a copy,
//! the rule a store applies. Speeds are over logical (uncompressed) bytes.

use std::time::Instant;

use zrecord_core::codec::{decode_into, Codec, Deflater};

/// Most bytes of a set measured: enough records for stable numbers, small enough to run on
/// a shared machine.
const SAMPLE_BYTES: usize = 48 << 20;

/// Interleaved decode rounds per set; each candidate's best round counts.
const ROUNDS: usize = 5;

struct Packed {
    /// Per record: `None` stored raw, else its compressed bytes.
    recs: Vec<Option<Vec<u8>>>,
}

trait Candidate {
    fn name(&self) -> String;
    fn compress(&mut self, src: &[u8]) -> Option<Vec<u8>>;
    fn decompress(&mut self, src: &[u8], dst: &mut [u8]);
}

/// zrecord's DEFLATE level 1, inflated as each build of the core does.
#[derive(Clone, Copy)]
enum Inflater {
    /// The native host (`libdeflate` feature).
    Libdeflate,
    /// The no_std core.
    Miniz,
    /// The wasm guest (`zlib-rs` feature).
    ZlibRs,
}

struct Flate(Deflater, Inflater, flate2::Decompress);

impl Candidate for Flate {
    fn name(&self) -> String {
        match self.1 {
            Inflater::Libdeflate => "deflate-1 (zrecord; libdeflate inflate, native)".into(),
            Inflater::Miniz => "deflate-1 (zrecord; miniz inflate, no_std)".into(),
            Inflater::ZlibRs => "deflate-1 (zrecord; zlib-rs inflate, wasm)".into(),
        }
    }
    fn compress(&mut self, src: &[u8]) -> Option<Vec<u8>> {
        let mut out = vec![0u8; src.len()];
        self.0.compress(src, &mut out).map(|n| out[..n].to_vec())
    }
    fn decompress(&mut self, src: &[u8], dst: &mut [u8]) {
        match self.1 {
            Inflater::Libdeflate => decode_into(Codec::Flate, src, dst).unwrap(),
            Inflater::Miniz => miniz(src, dst),
            Inflater::ZlibRs => {
                // The core's zlib-rs path: one state, reset per record.
                let z = &mut self.2;
                z.reset(false);
                let status = z.decompress(src, dst, flate2::FlushDecompress::Finish).unwrap();
                assert!(status == flate2::Status::StreamEnd && z.total_out() as usize == dst.len());
            }
        }
    }
}

/// The pure-Rust inflate the no_std core uses, with the same call and flags.
fn miniz(src: &[u8], dst: &mut [u8]) {
    use miniz_oxide::inflate::core::{decompress, inflate_flags, DecompressorOxide};
    let mut state = DecompressorOxide::new();
    let flags = inflate_flags::TINFL_FLAG_USING_NON_WRAPPING_OUTPUT_BUF;
    let (status, _, produced) = decompress(&mut state, src, dst, 0, flags);
    assert!(status == miniz_oxide::inflate::TINFLStatus::Done && produced == dst.len());
}

/// DEFLATE at another miniz_oxide level, decoded by libdeflate as zrecord reads it: what a
/// higher level would buy in ratio and decode speed, and cost in encode speed.
struct FlateLevel(u8);

impl Candidate for FlateLevel {
    fn name(&self) -> String {
        format!("deflate-{} (miniz; libdeflate inflate)", self.0)
    }
    fn compress(&mut self, src: &[u8]) -> Option<Vec<u8>> {
        let out = miniz_oxide::deflate::compress_to_vec(src, self.0);
        (out.len() < src.len()).then_some(out)
    }
    fn decompress(&mut self, src: &[u8], dst: &mut [u8]) {
        decode_into(Codec::Flate, src, dst).unwrap();
    }
}

struct Zstd(i32, zstd::bulk::Compressor<'static>, zstd::bulk::Decompressor<'static>);

impl Candidate for Zstd {
    fn name(&self) -> String {
        format!("zstd {}", self.0)
    }
    fn compress(&mut self, src: &[u8]) -> Option<Vec<u8>> {
        let out = self.1.compress(src).unwrap();
        (out.len() < src.len()).then_some(out)
    }
    fn decompress(&mut self, src: &[u8], dst: &mut [u8]) {
        let n = self.2.decompress_to_buffer(src, dst).unwrap();
        assert_eq!(n, dst.len());
    }
}

/// zstd as a pure-Rust build (what a no_std core and the wasm guest could run) would write
/// it: ruzstd's encoder at its Fastest level. Decoded by C zstd (`c_decode`, what the native
/// host would link) or by ruzstd itself (what the guest would run).
struct Ruzstd {
    c_decode: bool,
    c: zstd::bulk::Decompressor<'static>,
    r: ruzstd::decoding::FrameDecoder,
}

impl Candidate for Ruzstd {
    fn name(&self) -> String {
        format!("zstd (ruzstd Fastest encode; {} decode)", if self.c_decode { "C zstd" } else { "ruzstd" })
    }
    fn compress(&mut self, src: &[u8]) -> Option<Vec<u8>> {
        let out = ruzstd::encoding::compress_to_vec(src, ruzstd::encoding::CompressionLevel::Fastest);
        (out.len() < src.len()).then_some(out)
    }
    fn decompress(&mut self, src: &[u8], dst: &mut [u8]) {
        let n = if self.c_decode {
            self.c.decompress_to_buffer(src, dst).unwrap()
        } else {
            self.r.decode_all(src, dst).unwrap()
        };
        assert_eq!(n, dst.len());
    }
}

struct Lz4;

impl Candidate for Lz4 {
    fn name(&self) -> String {
        "lz4 (lz4_flex block)".into()
    }
    fn compress(&mut self, src: &[u8]) -> Option<Vec<u8>> {
        let out = lz4_flex::block::compress(src);
        (out.len() < src.len()).then_some(out)
    }
    fn decompress(&mut self, src: &[u8], dst: &mut [u8]) {
        let n = lz4_flex::block::decompress_into(src, dst).unwrap();
        assert_eq!(n, dst.len());
    }
}

/// The first [`SAMPLE_BYTES`] of records of a `.npy`: (bytes, rows, record length).
fn load(path: &str) -> (Vec<u8>, usize, usize) {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let h = zrecord_app::npy::parse_header(&bytes).unwrap();
    let item: u64 = h.shape[1..].iter().product::<u64>() * zrecord_core::dtype::itemsize(&h.descr).unwrap();
    let item = item as usize;
    let rows = (h.shape[0] as usize).min(SAMPLE_BYTES / item);
    let start = h.data_offset as usize;
    (bytes[start..start + rows * item].to_vec(), rows, item)
}

fn best_of<F: FnMut()>(reps: usize, mut f: F) -> f64 {
    (0..reps)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

fn main() {
    let paths: Vec<String> = std::env::args().skip(1).collect();
    assert!(!paths.is_empty(), "usage: codec-bench FILE.npy...");
    println!("| data set | codec | ratio | encode MB/s | decode MB/s (1 core) | decode vs deflate |");
    println!("|---|---|---|---|---|---|");
    for path in &paths {
        let (data, _rows, item) = load(path);
        let name = std::path::Path::new(path).file_stem().unwrap().to_string_lossy().into_owned();
        let mut cands: Vec<Box<dyn Candidate>> = [Inflater::Libdeflate, Inflater::Miniz, Inflater::ZlibRs]
            .into_iter()
            .map(|i| Box::new(Flate(Deflater::new(), i, flate2::Decompress::new(false))) as Box<dyn Candidate>)
            .collect();
        for level in [2, 3, 6] {
            cands.push(Box::new(FlateLevel(level)));
        }
        for level in [-1, 1, 3] {
            cands.push(Box::new(Zstd(
                level,
                zstd::bulk::Compressor::new(level).unwrap(),
                zstd::bulk::Decompressor::new().unwrap(),
            )));
        }
        for c_decode in [true, false] {
            cands.push(Box::new(Ruzstd {
                c_decode,
                c: zstd::bulk::Decompressor::new().unwrap(),
                r: ruzstd::decoding::FrameDecoder::new(),
            }));
        }
        cands.push(Box::new(Lz4));
        let mut out = vec![0u8; item];
        let mb = data.len() as f64 / 1e6;
        // Compress with every candidate, then time decodes in interleaved rounds (best of
        // ROUNDS each), so that load from other processes hits every candidate alike.
        let mut packed = Vec::new();
        let mut enc = Vec::new();
        for c in &mut cands {
            let mut p = Packed { recs: Vec::new() };
            enc.push(best_of(1, || p.recs = data.chunks(item).map(|r| c.compress(r)).collect()));
            // Check once that what is measured round-trips.
            for (r, src) in p.recs.iter().zip(data.chunks(item)).take(50) {
                if let Some(bytes) = r {
                    c.decompress(bytes, &mut out);
                    assert_eq!(&out[..], src, "{} does not round-trip", c.name());
                }
            }
            packed.push(p);
        }
        let mut dec = vec![f64::INFINITY; cands.len()];
        for _ in 0..ROUNDS {
            for (k, c) in cands.iter_mut().enumerate() {
                let t = best_of(1, || {
                    for (r, src) in packed[k].recs.iter().zip(data.chunks(item)) {
                        match r {
                            Some(p) => c.decompress(p, &mut out),
                            None => out.copy_from_slice(src),
                        }
                        std::hint::black_box(&out);
                    }
                });
                dec[k] = dec[k].min(t);
            }
        }
        for (k, c) in cands.iter().enumerate() {
            let stored: usize = packed[k].recs.iter().map(|r| r.as_ref().map_or(item, Vec::len)).sum();
            println!(
                "| {name} | {} | {:.2}x | {:.0} | {:.0} | {:.2}x |",
                c.name(),
                data.len() as f64 / stored as f64,
                mb / enc[k],
                mb / dec[k],
                dec[0] / dec[k]
            );
        }
    }
}
