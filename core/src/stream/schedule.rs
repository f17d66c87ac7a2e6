//! When each sample of a stream is read next: the [`Schedule`] a cache that knows the
//! future evicts by.
//!
//! A schedule only reads its stream: it answers from the same epoch orders a shard fills
//! from (`blocks.rs`, `permutation.rs`), so the position it names for a sample is the one
//! at which a shard reads that sample. Its tables are a cache of those orders, kept for a
//! few epochs and dropped oldest first; an answer never depends on what was asked before.

use alloc::vec::Vec;

use super::global::Source;
use super::{EpochShuffle, Mode, Stream};

/// When each sample is read next: what a cache that knows the future evicts by (the
/// sample needed furthest ahead goes first, Belady's optimal policy).
#[derive(Clone, Debug)]
pub struct Schedule {
    stream: Stream,
    /// The orders of the epochs last asked about.
    epochs: Vec<EpochOrder>,
}

/// One epoch's order as a [`Schedule`] asks it: where each sample is read.
///
/// A cache far smaller than the dataset asks about every sample it reads, each epoch: a
/// permutation's inverse walk per ask (two per sample, this epoch's and the next) was a
/// third of its evictions' time. Once an epoch was asked about a sixteenth of its samples,
/// its positions are laid out in a table (the order filled in vectorised runs and
/// inverted, a few nanoseconds a sample) and every later ask is a lookup; a dataset of
/// more than [`EpochOrder::TABLE_MAX`] samples keeps walking.
#[derive(Clone, Debug)]
struct EpochOrder {
    epoch: u64,
    perm: EpochShuffle,
    /// `positions[i]`: where sample `i` is read in the epoch, once laid out.
    positions: Option<Vec<u32>>,
    /// Asks answered by walking the permutation.
    walked: u64,
}

impl EpochOrder {
    /// The largest epoch laid out in a table: 16 MiB of positions. A schedule keeps at
    /// most [`EpochOrder::KEPT`] epochs, but only the one being read and the next are asked
    /// about often enough to be laid out (a later one only for samples in an epoch's
    /// dropped tail).
    const TABLE_MAX: u64 = 1 << 22;
    /// Epochs a schedule keeps (the one being read, the next, and two more).
    const KEPT: usize = 4;

    fn new(perm: EpochShuffle, epoch: u64) -> EpochOrder {
        EpochOrder { epoch, perm, positions: None, walked: 0 }
    }

    /// Where sample `index` (below the permutation's length) is read in the epoch.
    fn position_of(&mut self, index: u64) -> u64 {
        if let Some(positions) = &self.positions {
            return u64::from(positions[index as usize]);
        }
        let n = self.perm.len();
        self.walked += 1;
        if n > Self::TABLE_MAX || self.walked < n / 16 {
            return self.perm.position_of(index);
        }
        let positions = self.lay_out();
        let at = u64::from(positions[index as usize]);
        self.positions = Some(positions);
        at
    }

    /// Each sample's position, from the epoch's order filled a run at a time.
    fn lay_out(&self) -> Vec<u32> {
        const RUN: usize = 1024;
        let n = self.perm.len();
        let mut positions = alloc::vec![0u32; n as usize];
        let mut run = [0u64; RUN];
        let mut first = 0u64;
        while first < n {
            let len = (n - first).min(RUN as u64) as usize;
            self.perm.fill(first, &mut run[..len]);
            for (k, &sample) in run[..len].iter().enumerate() {
                // n <= TABLE_MAX: every position fits in 32 bits.
                positions[sample as usize] = (first + k as u64) as u32;
            }
            first += len as u64;
        }
        positions
    }
}

impl Schedule {
    /// The schedule of `stream`.
    pub fn new(stream: Stream) -> Schedule {
        Schedule { stream, epochs: Vec::new() }
    }

    /// The first stream position at or after `from` that reads sample `index`, for one
    /// dataset in SEQUENTIAL or SHUFFLE mode. `None` for IID and mixtures (no position is
    /// known), or for an index past the dataset.
    pub fn next_use(&mut self, index: u64, from: u64) -> Option<u64> {
        let Source::Single { mode, .. } = &self.stream.source else { return None };
        // Positions in the last era (the dataset's length now) are planned; before it, a
        // grown dataset's, none are.
        let era = *self.stream.eras.last()?;
        let (n, base) = (era.length, era.position);
        if index >= n || from < base {
            return None;
        }
        let from = from - base;
        match mode {
            Mode::Sequential => Some(base + from + (index + n - from % n) % n),
            Mode::Iid => None,
            Mode::Shuffle => {
                let per_epoch = (n / self.stream.global_batch) * self.stream.global_batch;
                let first = era.epoch + from / per_epoch;
                // An index in the dropped tail of an epoch's order waits for a later epoch;
                // three tries cover all but a vanishing share of them.
                for e in first..first + 3 {
                    let order = match self.epochs.iter().position(|o| o.epoch == e) {
                        Some(k) => &mut self.epochs[k],
                        None => {
                            if self.epochs.len() >= EpochOrder::KEPT {
                                self.epochs.remove(0);
                            }
                            self.epochs.push(EpochOrder::new(self.stream.epoch_order(n, e), e));
                            self.epochs.last_mut().expect("just pushed")
                        }
                    };
                    let at = order.position_of(index);
                    let within_era = (e - era.epoch) * per_epoch + at;
                    if at < per_epoch && within_era >= from {
                        return Some(base + within_era);
                    }
                }
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::Permutation;
    use super::*;

    /// An epoch's table holds the same positions as the permutation's inverse walk, at
    /// every size around a run's length, and an order answers the same before and after
    /// it lays the table out.
    #[test]
    fn an_epochs_table_agrees_with_the_permutations_inverse() {
        for n in [1u64, 2, 3, 17, 1023, 1024, 1025, 2049, 20_000] {
            let perm = Permutation::new(n, 11, 3);
            let mut order = EpochOrder::new(EpochShuffle::Full(perm.clone()), 3);
            let table = order.lay_out();
            for i in 0..n {
                assert_eq!(u64::from(table[i as usize]), perm.position_of(i), "n {n} sample {i}");
                assert_eq!(perm.at(u64::from(table[i as usize])), i, "n {n} sample {i}");
            }
            // Asked in a scattered order, the answers stand whichever way they came.
            for k in 0..2 * n {
                let i = (k * 7919) % n;
                assert_eq!(order.position_of(i), perm.position_of(i), "n {n} ask {k}");
            }
            assert!(order.positions.is_some(), "n {n}: laid out once asked about often enough");
        }
    }
}
