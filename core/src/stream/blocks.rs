//! Block shuffle: a SHUFFLE epoch that reads the dataset in runs of neighbouring records.
//!
//! A full permutation reads every record on its own: from object storage, where a request
//! costs a round trip and a store answers a few hundred to a few thousand a second, an
//! epoch through a cache far smaller than the dataset is then one request per record.
//! Readers built for object storage (LitData, MosaicML Streaming) shuffle coarser: whole
//! chunks in a random order, samples mixed within a chunk or a few. [`Blocks`] does the same
//! over a zrecord dataset, as a pure function of `(seed, epoch)` like [`Permutation`]:
//!
//! 1. The epoch's index space is rotated by an offset drawn from `(seed, epoch)`, so blocks
//!    start at other records each epoch, then cut into blocks of `records` neighbours
//!    (`nb = N / records` whole blocks; the `N mod records` left over form the tail).
//! 2. The blocks are put in a random order (a [`Permutation`] of `0..nb`), and that order is
//!    cut into windows of `window` blocks (the last window may hold fewer).
//! 3. Each window's records are permuted together (a [`Permutation`] of its records keyed
//!    by the window's number), so a batch mixes the records of `window` blocks; the tail's
//!    records, permuted among themselves, come last.
//!
//! A reader that holds one window (`records * window` records) reads each block once, and
//! neighbouring records go out as one request. Any position maps to its record, and any
//! record to its position, in constant time ([`BlockOrder::at`], [`BlockOrder::position_of`]),
//! so rank sharding, seeking and resuming work as for the full permutation.

use super::{mix, Permutation, StreamError};

/// Domain tag of block-shuffle keys ("blocks01"), apart from every other key of a seed.
const BLOCKS_TAG: u64 = 0x626c_6f63_6b73_3031;

/// How a block shuffle groups records: `records` neighbours per block, `window` blocks
/// mixed together. Made by [`Blocks::new`] only, which checks them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Blocks {
    /// Neighbouring records read as one block: at least 2.
    records: u64,
    /// Blocks whose records are mixed together: at least 1.
    window: u64,
}

impl Blocks {
    /// `records` per block and `window` blocks per window. Fails unless `records >= 2`,
    /// `window >= 1` and a window's records fit in a `u64`.
    pub fn new(records: u64, window: u64) -> Result<Blocks, StreamError> {
        if records >= 2 && window >= 1 && records.checked_mul(window).is_some() {
            Ok(Blocks { records, window })
        } else {
            Err(StreamError::BadBlocks { records, window })
        }
    }

    /// Neighbouring records per block.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Blocks per window.
    pub fn window(&self) -> u64 {
        self.window
    }

    /// Records per window: `records * window`, which [`Blocks::new`] checked fits.
    pub fn span(&self) -> u64 {
        self.records * self.window
    }
}

/// One SHUFFLE epoch's order of `0..len` in blocks (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockOrder {
    len: u64,
    blocks: Blocks,
    /// The rotation of the index space.
    offset: u64,
    /// Whole blocks.
    whole: u64,
    /// The order of the whole blocks.
    order: Permutation,
    /// The order of the tail's records.
    tail: Permutation,
    /// Key of the windows' permutations.
    key: u64,
    epoch: u64,
}

impl BlockOrder {
    /// Epoch `epoch`'s order of `0..len` for a stream seeded with `seed`.
    pub fn new(len: u64, blocks: Blocks, seed: u64, epoch: u64) -> BlockOrder {
        let key = mix(mix(BLOCKS_TAG ^ seed) ^ epoch);
        let whole = len / blocks.records;
        BlockOrder {
            len,
            blocks,
            offset: if len == 0 { 0 } else { mix(key) % len },
            whole,
            order: Permutation::new(whole, key, epoch),
            tail: Permutation::new(len - whole * blocks.records, mix(key ^ 1), epoch),
            key: mix(key ^ 2),
            epoch,
        }
    }

    /// Size of the ordered range.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// True when the range is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The blocks.
    pub fn blocks(&self) -> Blocks {
        self.blocks
    }

    /// Records in whole blocks: positions past them read the tail.
    fn in_blocks(&self) -> u64 {
        self.whole * self.blocks.records
    }

    /// Window `w`'s first block position and its permutation of its records.
    fn window(&self, w: u64) -> (u64, Permutation) {
        let first = w * self.blocks.window;
        let count = self.blocks.window.min(self.whole - first);
        (first, Permutation::new(count * self.blocks.records, mix(self.key ^ w), self.epoch))
    }

    /// The record at position `k`: `at` maps `0..len` onto `0..len` one to one.
    ///
    /// # Panics
    /// If `k >= len`.
    pub fn at(&self, k: u64) -> u64 {
        assert!(k < self.len, "block order position {k} out of range 0..{}", self.len);
        if k >= self.in_blocks() {
            return self.at_in(k, 0, &self.tail);
        }
        let w = k / (self.blocks.records * self.blocks.window);
        self.at_in(k, w, &self.window(w).1)
    }

    /// [`BlockOrder::at`] with window `w` (of `k`) and its permutation already built.
    fn at_in(&self, k: u64, w: u64, window: &Permutation) -> u64 {
        let b = self.blocks.records;
        let rotated = if k < self.in_blocks() {
            let span = b * self.blocks.window;
            let o = window.at(k - w * span);
            self.order.at(w * self.blocks.window + o / b) * b + o % b
        } else {
            self.in_blocks() + self.tail.at(k - self.in_blocks())
        };
        self.unrotate(rotated)
    }

    /// Writes the records at positions `first, first + 1, ...` into `out`: the same as
    /// [`BlockOrder::at`] for each, building each window's permutation once.
    ///
    /// # Panics
    /// If the last position is `>= len`.
    pub fn fill(&self, first: u64, out: &mut [u64]) {
        let end = first.checked_add(out.len() as u64);
        assert!(
            end.is_some_and(|e| e <= self.len),
            "block order positions {first}..+{} out of range 0..{}",
            out.len(),
            self.len
        );
        let span = self.blocks.records * self.blocks.window;
        let mut built: Option<(u64, Permutation)> = None;
        for (k, slot) in (first..).zip(out.iter_mut()) {
            if k >= self.in_blocks() {
                *slot = self.at_in(k, 0, &self.tail);
                continue;
            }
            let w = k / span;
            if built.as_ref().is_none_or(|(at, _)| *at != w) {
                built = Some((w, self.window(w).1));
            }
            let (_, window) = built.as_ref().expect("just built");
            *slot = self.at_in(k, w, window);
        }
    }

    /// The position of record `i`: the inverse of [`BlockOrder::at`].
    ///
    /// # Panics
    /// If `i >= len`.
    pub fn position_of(&self, i: u64) -> u64 {
        assert!(i < self.len, "block order record {i} out of range 0..{}", self.len);
        let j = self.rotate(i);
        if j >= self.in_blocks() {
            return self.in_blocks() + self.tail.position_of(j - self.in_blocks());
        }
        let b = self.blocks.records;
        let placed = self.order.position_of(j / b);
        let w = placed / self.blocks.window;
        let (first, window) = self.window(w);
        w * b * self.blocks.window + window.position_of((placed - first) * b + j % b)
    }

    /// Record `i`'s place in the rotated index space.
    fn rotate(&self, i: u64) -> u64 {
        if i >= self.offset {
            i - self.offset
        } else {
            i + (self.len - self.offset)
        }
    }

    /// The record at place `j` of the rotated index space.
    fn unrotate(&self, j: u64) -> u64 {
        if j < self.len - self.offset {
            j + self.offset
        } else {
            j - (self.len - self.offset)
        }
    }
}

/// A SHUFFLE epoch's order: the full permutation, or blocks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EpochShuffle {
    /// Every record on its own ([`Permutation`]).
    Full(Permutation),
    /// Records in blocks ([`BlockOrder`]: two permutations, boxed so that an order is no
    /// larger than the full permutation's).
    Blocks(alloc::boxed::Box<BlockOrder>),
}

impl EpochShuffle {
    /// Epoch `epoch`'s order of `0..len` for a stream seeded with `seed`, in `blocks` or,
    /// without them, the full permutation keyed by `(seed, epoch)`.
    pub fn new(len: u64, blocks: Option<Blocks>, seed: u64, epoch: u64) -> EpochShuffle {
        match blocks {
            None => EpochShuffle::Full(Permutation::new(len, seed, epoch)),
            Some(b) => EpochShuffle::Blocks(alloc::boxed::Box::new(BlockOrder::new(len, b, seed, epoch))),
        }
    }

    /// Size of the ordered range.
    pub fn len(&self) -> u64 {
        match self {
            EpochShuffle::Full(p) => p.len(),
            EpochShuffle::Blocks(b) => b.len(),
        }
    }

    /// True when the range is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The record at position `k`.
    pub fn at(&self, k: u64) -> u64 {
        match self {
            EpochShuffle::Full(p) => p.at(k),
            EpochShuffle::Blocks(b) => b.at(k),
        }
    }

    /// The records at positions `first, first + 1, ...`.
    pub fn fill(&self, first: u64, out: &mut [u64]) {
        match self {
            EpochShuffle::Full(p) => p.fill(first, out),
            EpochShuffle::Blocks(b) => b.fill(first, out),
        }
    }

    /// The position of record `i`.
    pub fn position_of(&self, i: u64) -> u64 {
        match self {
            EpochShuffle::Full(p) => p.position_of(i),
            EpochShuffle::Blocks(b) => b.position_of(i),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;
    use alloc::vec::Vec;

    fn order(len: u64, records: u64, window: u64, seed: u64, epoch: u64) -> BlockOrder {
        BlockOrder::new(len, Blocks::new(records, window).expect("valid blocks"), seed, epoch)
    }

    /// Every size around the block and window edges: `at` is a bijection, `fill` agrees
    /// with it from any start, and `position_of` inverts it.
    #[test]
    fn an_order_is_a_permutation_that_fill_and_position_of_agree_with() {
        for len in [1u64, 2, 3, 7, 8, 9, 31, 32, 33, 100, 1000, 1001] {
            for (records, window) in [(2, 1), (3, 2), (4, 4), (8, 3), (50, 1), (2000, 2)] {
                let o = order(len, records, window, 5, 1);
                let mut seen = vec![false; len as usize];
                let mut all = vec![0u64; len as usize];
                o.fill(0, &mut all);
                for k in 0..len {
                    let i = o.at(k);
                    assert_eq!(all[k as usize], i, "len {len} blocks {records}x{window} position {k}");
                    assert!(!seen[i as usize], "len {len} blocks {records}x{window}: {i} twice");
                    seen[i as usize] = true;
                    assert_eq!(o.position_of(i), k, "len {len} blocks {records}x{window} record {i}");
                }
                let from = len / 3;
                let mut part = vec![0u64; (len - from) as usize];
                o.fill(from, &mut part);
                assert_eq!(part[..], all[from as usize..], "len {len} blocks {records}x{window} from {from}");
            }
        }
    }

    /// A window of the order holds whole blocks of neighbours: the records at positions of
    /// one window, sorted, are `window` runs of `records` consecutive records (modulo the
    /// rotation), so a reader fetches each block as one run.
    #[test]
    fn a_window_reads_whole_blocks_of_neighbours() {
        let (len, records, window) = (10_000u64, 25u64, 4u64);
        let o = order(len, records, window, 9, 3);
        let span = records * window;
        for w in 0..len / span {
            let mut got: Vec<u64> = (w * span..(w + 1) * span).map(|k| (o.at(k) + len - o.offset) % len).collect();
            got.sort_unstable();
            for run in got.chunks(records as usize) {
                assert_eq!(run[0] % records, 0, "window {w}: a block starts at a block's edge");
                assert!(run.windows(2).all(|p| p[1] == p[0] + 1), "window {w}: a block is a run of neighbours");
            }
        }
    }

    /// Orders differ by seed and by epoch (blocks start elsewhere and come in another order),
    /// and the records within a window are mixed, not read in block order.
    #[test]
    fn keyed_by_seed_and_epoch_and_mixed_within_a_window() {
        let a: Vec<u64> = (0..1000).map(|k| order(1000, 10, 4, 1, 0).at(k)).collect();
        let b: Vec<u64> = (0..1000).map(|k| order(1000, 10, 4, 2, 0).at(k)).collect();
        let c: Vec<u64> = (0..1000).map(|k| order(1000, 10, 4, 1, 1).at(k)).collect();
        assert_ne!(a, b);
        assert_ne!(a, c);
        assert_ne!(order(1000, 10, 4, 1, 0).offset, order(1000, 10, 4, 1, 1).offset);
        let neighbours = a.windows(2).filter(|p| p[1] == p[0] + 1).count();
        assert!(neighbours < 100, "{neighbours} of 999 steps go to the next record: not mixed");
    }

    #[test]
    fn blocks_need_two_records_and_one_block_per_window() {
        assert_eq!(Blocks::new(1, 4), Err(StreamError::BadBlocks { records: 1, window: 4 }));
        assert_eq!(Blocks::new(2, 0), Err(StreamError::BadBlocks { records: 2, window: 0 }));
        assert!(Blocks::new(u64::MAX, 2).is_err());
        assert_eq!(Blocks::new(2, 1), Ok(Blocks { records: 2, window: 1 }));
    }
}
