//! Measures the shuffled-rows index (`stream/rows.rs`) over N documents: how long one
//! epoch's index takes to build and to plan global batches, its size, and how long a
//! planner takes to start from a saved index file (`stream/row_index.rs`) instead.
//!
//! `cargo run --release -p zrecord-core --example row_index -- 100000000`

use std::time::Instant;

use zrecord_core::stream::pack::{DocLengths, PackError, PackMode, PackSpec, Packer, Plan};
use zrecord_core::stream::row_index::{self, RowIndexKey};
use zrecord_core::stream::rows::STRIDE;
use zrecord_core::{DatasetId, Mode, Stream};

/// Lengths of 1 to 2,000 tokens from a hash of the index, as a table would give them;
/// a saved index kept as its file's bytes.
struct Hashed {
    file: Option<Vec<u8>>,
}

impl DocLengths for Hashed {
    type Error = PackError;
    fn lengths(&mut self, _source: usize, indices: &[u64], out: &mut [u64]) -> Result<(), PackError> {
        for (o, &i) in out.iter_mut().zip(indices) {
            *o = 1 + (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 20) % 2000;
        }
        Ok(())
    }
    fn saved_index(&mut self, _source: usize, key: &RowIndexKey) -> Option<Vec<u64>> {
        row_index::decode(self.file.as_ref()?, key)
    }
    fn save_index(&mut self, _source: usize, key: &RowIndexKey, counts: &[u64]) {
        self.file = Some(row_index::encode(key, counts));
    }
}

fn main() {
    let n: u64 = std::env::args().nth(1).map_or(10_000_000, |a| a.parse().expect("a number of documents"));
    let docs = Stream::new(DatasetId { length: n, generation: 1 }, Mode::Shuffle, 1, 1).unwrap();
    let spec = PackSpec {
        seq_len: 2048,
        mode: PackMode::Concat,
        bos: None,
        eos: Some(0),
        pad: 0,
        window: 0,
        shuffle_rows: true,
    };
    let mut lengths = Hashed { file: None };
    let t = Instant::now();
    let mut packer = Packer::new(&docs, spec, 512, 0, None, &mut lengths).unwrap();
    let built = t.elapsed().as_secs_f64();
    let file = lengths.file.clone().expect("the index was handed over");
    // A second planner from the saved file's bytes (decoded and spot-checked).
    let t = Instant::now();
    let mut second = Packer::new(&docs, spec, 512, 0, None, &mut lengths).unwrap();
    let loaded = t.elapsed().as_secs_f64();
    let mut plan = Plan::default();
    let mut other = Plan::default();
    second.plan(&mut lengths, &mut other).unwrap();
    packer.plan(&mut lengths, &mut plan).unwrap();
    assert_eq!(plan.placed, other.placed, "the saved index plans the same rows");
    let t = Instant::now();
    for _ in 0..100 {
        packer.plan(&mut lengths, &mut plan).unwrap();
    }
    let per_batch = t.elapsed().as_secs_f64() / 100.0;
    let bytes = (n.div_ceil(STRIDE) + 1) * 8;
    println!(
        "{n} documents: index built in {built:.2} s, {:.1} MB ({:.1} MB saved); started from the saved \
         index in {loaded:.3} s; {} batches of 512 x 2048 per epoch, {:.2} ms to plan one",
        bytes as f64 / 1e6,
        file.len() as f64 / 1e6,
        packer.steps_per_epoch().unwrap(),
        per_batch * 1e3
    );
}
