//! Replays the kept fuzz corpus (`fuzz/regressions/<target>/`: seeds and every crashing
//! input found so far, each fixed) through the fuzz target bodies, on stable, in every
//! `cargo test`. The fuzzers themselves run with `cargo +nightly fuzz` (see
//! `docs/reliability.md`).

#[path = "../../fuzz/src/lib.rs"]
mod bodies;

use std::path::Path;

fn replay(target: &str, body: fn(&[u8])) -> usize {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/regressions").join(target);
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        let bytes = std::fs::read(&path).unwrap();
        eprintln!("replaying {}", path.display());
        body(&bytes);
        n += 1;
    }
    n
}

#[test]
fn open_store_corpus() {
    assert!(replay("open_store", bodies::open_store) > 0);
}

#[test]
fn inflate_corpus() {
    assert!(replay("inflate", bodies::inflate) > 0);
}

#[test]
fn long_index_corpus() {
    assert!(replay("long_index", bodies::long_index) > 0);
}

#[test]
fn ops_corpus() {
    assert!(replay("ops", bodies::ops) > 0);
}

#[cfg(feature = "images")]
#[test]
fn image_corpus() {
    assert!(replay("image", bodies::image) > 0);
}

/// A stable stand-in for the image fuzzer: every cut and many single-byte changes of its
/// seeds (a JPEG, PNGs and a WebP) through the pipeline: an image or an error, no panic.
#[cfg(feature = "images")]
#[test]
fn image_survives_cut_and_flipped_seeds() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/regressions/image");
    for entry in std::fs::read_dir(&dir).unwrap() {
        let seed = std::fs::read(entry.unwrap().path()).unwrap();
        for cut in (1..seed.len()).step_by(seed.len() / 97 + 1) {
            bodies::image(&seed[..cut]);
        }
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        for _ in 0..300 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let mut bytes = seed.clone();
            let at = 1 + (state as usize) % (bytes.len() - 1);
            bytes[at] ^= (state >> 32) as u8 | 1;
            bodies::image(&bytes);
        }
    }
}

#[test]
fn bodies_accept_degenerate_inputs() {
    for data in [&[][..], &[0], &[0xFF; 7], &[1, 0, 0]] {
        bodies::open_store(data);
        bodies::inflate(data);
        bodies::ops(data);
        bodies::long_index(data);
    }
}

/// A stable stand-in for the fuzzer: the long index body over random mutations of its
/// seeds (a valid index with a bad piece length, and garbage).
#[test]
fn long_index_survives_mutated_seeds() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/regressions/long_index");
    let seeds: Vec<Vec<u8>> =
        std::fs::read_dir(&dir).unwrap().map(|e| std::fs::read(e.unwrap().path()).unwrap()).collect();
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for round in 0..20_000 {
        let mut data = seeds[round % seeds.len()].clone();
        for _ in 0..1 + next() % 4 {
            let at = (next() % data.len() as u64) as usize;
            data[at] = next() as u8;
        }
        bodies::long_index(&data);
    }
}
