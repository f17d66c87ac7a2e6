//! Criterion benches for the hot paths: per-record deflate and inflate, a random batch
//! gather from a mapped store (raw and flate), and the sampler fill.
//! Run: cargo bench -p zrecord --bench hot_paths

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use zrecord::{Codec, Mode, Sampler, Zrecord};
use zrecord_core::codec::{inflate_into, Deflater};

const ITEM: usize = 3 * 64 * 64;

/// Smooth image-like records plus a little noise, as in the Python benchmark.
fn records(n: usize) -> Vec<u8> {
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    let mut out = vec![0u8; n * ITEM];
    for (i, b) in out.iter_mut().enumerate() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let (r, k) = (i / ITEM, i % ITEM);
        let (c, y, xx) = (k / 4096, (k % 4096) / 64, k % 64);
        let f = 127.0 + 100.0 * ((0.03 + r as f64 * 1e-4) * xx as f64 + c as f64).sin() * (0.07 * y as f64).cos();
        *b = (f + (x % 9) as f64 - 4.0).clamp(0.0, 255.0) as u8;
    }
    out
}

fn codec(c: &mut Criterion) {
    let data = records(64);
    let mut g = c.benchmark_group("codec");
    g.throughput(Throughput::Bytes(ITEM as u64));
    let mut deflater = Deflater::new();
    let mut packed = vec![0u8; ITEM];
    g.bench_function("deflate 12 KiB", |b| {
        let mut i = 0;
        b.iter(|| {
            i = (i + 1) % 64;
            deflater.compress(&data[i * ITEM..(i + 1) * ITEM], &mut packed)
        })
    });
    let n = deflater.compress(&data[..ITEM], &mut packed).expect("compressible");
    let mut out = vec![0u8; ITEM];
    g.bench_function("inflate 12 KiB", |b| b.iter(|| inflate_into(&packed[..n], &mut out).unwrap()));
    g.finish();
}

fn gather(c: &mut Criterion) {
    let n = 20_000;
    let data = records(n);
    let mut g = c.benchmark_group("gather 256 x 12 KiB");
    g.throughput(Throughput::Bytes((256 * ITEM) as u64));
    for codec in [Codec::Raw, Codec::Flate] {
        let dir = tempfile::tempdir().unwrap();
        let store = Zrecord::open(dir.path()).unwrap();
        store.append(&data, n, ITEM, Some(codec)).unwrap();
        let mut sampler = Sampler::new(n as u64, 256, Mode::Iid, 7).unwrap();
        let mut idxs = vec![0u64; 256];
        let mut out = vec![0u8; 256 * ITEM];
        g.bench_function(BenchmarkId::from_parameter(codec.name()), |b| {
            b.iter(|| {
                sampler.fill(&mut idxs);
                store.gather(&idxs, &mut out, ITEM).unwrap();
            })
        });
    }
    g.finish();
}

fn sampler(c: &mut Criterion) {
    let mut g = c.benchmark_group("sampler fill");
    for (mode, name) in [(Mode::Iid, "iid"), (Mode::Shuffle, "shuffle")] {
        for batch in [256usize, 8192] {
            let mut s = Sampler::new(1 << 24, batch, mode, 42).unwrap();
            let mut out = vec![0u64; batch];
            g.throughput(Throughput::Elements(batch as u64));
            g.bench_function(BenchmarkId::new(name, batch), |b| b.iter(|| s.fill(&mut out)));
        }
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(30).measurement_time(std::time::Duration::from_secs(3));
    targets = codec, gather, sampler
}
criterion_main!(benches);
