//! Helpers shared by the reliability tests: seeded records, a model of the store's contents,
//! and a scripted workload that exercises every write path (rollover, raw and flate,
//! delete with swaps, compact with overlapping moves, sync).
#![allow(dead_code)] // each test crate uses its own subset

use zrecord_core::engine::{Batch, Store, Writer};
use zrecord_core::format::FileLayout;
use zrecord_core::io::{Backend, Serial};
use zrecord_core::{Codec, Result};

/// Record `i` of stream `seed`: 1..=700 bytes, compressible when `i` is even.
pub fn record(seed: u64, i: u64) -> Vec<u8> {
    let mut x = (seed ^ i.wrapping_mul(0x9E37_79B9_7F4A_7C15)) | 1;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let len = 1 + (next() % 700) as usize;
    if i.is_multiple_of(2) {
        let b = next() as u8;
        (0..len).map(|k| b.wrapping_add((k / 9) as u8)).collect()
    } else {
        (0..len).map(|_| next() as u8).collect()
    }
}

/// One step of a workload, with the contents it leads to.
#[derive(Clone, Debug)]
pub enum Step {
    Append {
        first: u64,
        count: u64,
        codec: Codec,
    },
    Delete(Vec<u64>),
    Compact,
    Sync,
    /// Resize the store's files to a layout (records stay where they are).
    Layout(FileLayout),
}

/// What the store must contain after `step`, given `before`.
pub fn apply_model(seed: u64, before: &[Vec<u8>], step: &Step) -> Vec<Vec<u8>> {
    let mut v = before.to_vec();
    match step {
        Step::Append { first, count, .. } => v.extend((*first..first + count).map(|i| record(seed, i))),
        Step::Delete(idxs) => {
            let mut s = idxs.clone();
            s.sort_unstable_by(|a, b| b.cmp(a));
            s.dedup();
            for i in s {
                v.swap_remove(i as usize);
            }
        }
        Step::Compact | Step::Sync | Step::Layout(_) => {}
    }
    v
}

/// Runs one step against the store.
pub fn run_step<B: Backend>(s: &mut Store<B>, w: &mut Writer, seed: u64, step: &Step) -> Result<()> {
    match step {
        Step::Append { first, count, codec } => {
            let recs: Vec<Vec<u8>> = (*first..first + count).map(|i| record(seed, i)).collect();
            let mut src = Vec::new();
            let (mut offsets, mut lens) = (Vec::new(), Vec::new());
            for r in &recs {
                offsets.push(src.len() as u64);
                lens.push(r.len() as u32);
                src.extend_from_slice(r);
            }
            s.append(w, &Batch::Ragged { src: &src, offsets: &offsets, lens: &lens }, *codec, &Serial).map(|_| ())
        }
        Step::Delete(idxs) => s.delete(w, idxs),
        Step::Compact => s.compact(w, &mut |_, _| {}),
        Step::Sync => s.sync(w),
        Step::Layout(layout) => s.set_layout(w, *layout),
    }
}

/// A short workload touching every write path: with a chunk capacity of 4 KiB it rolls
/// over several chunks, and the deletes make compact move records, some onto themselves.
pub fn scripted_workload() -> Vec<Step> {
    vec![
        Step::Append { first: 0, count: 12, codec: Codec::Flate },
        Step::Append { first: 12, count: 6, codec: Codec::Raw },
        Step::Sync,
        Step::Delete(vec![0, 3, 16, 3]),
        Step::Append { first: 18, count: 5, codec: Codec::Flate },
        Step::Delete(vec![1]),
        Step::Compact,
        Step::Append { first: 23, count: 3, codec: Codec::Raw },
        Step::Sync,
    ]
}

/// The scripted workload on a dense store, changing to sparse and back between its steps.
pub fn layout_workload() -> Vec<Step> {
    let mut steps = scripted_workload();
    steps.insert(3, Step::Layout(FileLayout::Sparse));
    steps.insert(7, Step::Layout(FileLayout::Dense));
    steps.push(Step::Layout(FileLayout::Dense));
    steps.push(Step::Append { first: 26, count: 4, codec: Codec::Flate });
    steps
}

/// Every record of the store, decoded (panics on a decode error: callers want to know).
pub fn contents<B: Backend>(s: &Store<B>) -> Vec<Vec<u8>> {
    (0..u64::from(s.len())).map(|i| s.read(i).unwrap_or_else(|e| panic!("record {i}: {e}"))).collect()
}
