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
fn ops_corpus() {
    assert!(replay("ops", bodies::ops) > 0);
}

#[test]
fn bodies_accept_degenerate_inputs() {
    for data in [&[][..], &[0], &[0xFF; 7], &[1, 0, 0]] {
        bodies::open_store(data);
        bodies::inflate(data);
        bodies::ops(data);
    }
}
