//! How the rows of a packed mixture's global batches are shared among its sources.
//!
//! Shuffled packed rows over a mixture ([`super::rows`]) give each global batch of `rows`
//! rows a fixed number of rows from every source, so each batch carries the sources'
//! token shares (rows are all `seq_len` tokens long) to within one row: source `s` of
//! weight `w_s` gets `floor(rows w_s)` or that plus one.
//!
//! With `q_s = rows w_s`, source `s` always gets `floor(q_s)` rows; the `k = rows - sum
//! floor(q_s)` rows left over go to `k` distinct sources by systematic sampling: the
//! fractions `f_s = q_s - floor(q_s)` (they add up to `k`) are laid end to end on
//! `0..k`, and batch `b` takes the sources under the points `u_b, u_b + 1, ..., u_b + k -
//! 1`. Each fraction is under one, so no source is hit twice, and source `s` gets its extra
//! row exactly when `u_b` falls in an arc of width `f_s` of the unit circle. `u_b` is the
//! golden-ratio Weyl point of `b` (as [`super::Mixture`] uses for documents): over any run
//! of batches each source's extras track `f_s` per batch with the smallest discrepancy.
//!
//! The rows a source had before batch `b` (its place in its own shuffled rows) is then
//! `b floor(q_s)` plus the Weyl points of `0..b` in its arc: one floor sum, `O(log b)`,
//! so any rank or worker finds any batch's rows without replaying the stream.
//!
//! Weights are the mixture's slices of `0..2^64` ([`super::Mixture::bounds`]), and all of
//! the above is in 64-bit fixed point: the split is exact and the same on every platform.

use alloc::vec::Vec;

use super::mixture::{count_below, weyl};
use super::{mix, Mixture};

/// Domain tag of the Weyl offset of row shares, apart from the mixture's own.
const SHARES_TAG: u64 = 0x726f_7773_6861_7265; // "rowshare"

/// Rows of every global batch per source: see the module documentation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RowShares {
    /// `floor(rows w_s)`: rows every batch gives source `s`.
    base: Vec<u32>,
    /// `rows w_s - floor(rows w_s)` in units of 2^-64: the width of `s`'s arc.
    frac: Vec<u64>,
    /// Where `s`'s arc starts: the fractions of the sources before it, mod 2^64.
    start: Vec<u64>,
    offset: u64,
    rows: u32,
}

impl RowShares {
    /// The shares of `rows` rows per global batch among `mixture`'s sources, for a stream
    /// seeded with `seed`.
    pub fn new(mixture: &Mixture, rows: u32, seed: u64) -> RowShares {
        const M: u128 = 1 << 64;
        let bounds = mixture.bounds();
        let n = mixture.len();
        let (mut base, mut frac, mut start) = (Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n));
        let mut lower = 0u128;
        let mut at = 0u64;
        for s in 0..n {
            let upper = bounds.get(s).map_or(M, |&b| u128::from(b));
            let q = u128::from(rows) * (upper - lower);
            base.push((q >> 64) as u32);
            frac.push(q as u64);
            start.push(at);
            at = at.wrapping_add(q as u64);
            lower = upper;
        }
        RowShares { base, frac, start, offset: mix(SHARES_TAG ^ mix(seed)), rows }
    }

    /// Number of sources.
    pub fn len(&self) -> usize {
        self.base.len()
    }

    /// Always false: a mixture has a source.
    pub fn is_empty(&self) -> bool {
        self.base.is_empty()
    }

    /// Writes into `out[s]` the rows global batch `step` takes from source `s`; they add
    /// up to the batch's rows.
    pub fn in_batch(&self, step: u64, out: &mut [u32]) {
        let u = weyl(self.offset, step);
        for (s, o) in out.iter_mut().enumerate() {
            *o = self.base[s] + u32::from(u.wrapping_sub(self.start[s]) < self.frac[s]);
        }
    }

    /// Writes into `out[s]` the rows source `s` gave global batches `0..step`.
    ///
    /// # Panics
    /// If the rows of batches `0..step` are more than 2^62.
    pub fn before(&self, step: u64, out: &mut [u64]) {
        assert!(
            step.checked_mul(u64::from(self.rows)).is_some_and(|r| r <= super::MAX_POSITION),
            "global batch {step} beyond 2^62 rows"
        );
        for (s, o) in out.iter_mut().enumerate() {
            let extras = count_below(step, self.offset.wrapping_sub(self.start[s]), self.frac[s]);
            *o = step * u64::from(self.base[s]) + extras;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::DatasetId;
    use super::*;
    use alloc::vec;
    use proptest::prelude::*;

    fn mixture(weights: &[f64]) -> Mixture {
        Mixture::new(weights.iter().map(|_| DatasetId { length: 3, generation: 0 }).collect(), weights.to_vec())
            .unwrap()
    }

    #[test]
    fn a_seventy_thirty_batch_of_32_is_22_or_23_to_10_or_9() {
        let shares = RowShares::new(&mixture(&[0.7, 0.3]), 32, 5);
        let mut got = [0u32; 2];
        let mut seen = [0u32; 2];
        for step in 0..1000 {
            shares.in_batch(step, &mut got);
            assert!(got == [22, 10] || got == [23, 9], "batch {step}: {got:?}");
            seen[usize::from(got[0] == 23)] += 1;
        }
        // 0.4 of a row is left over for the first source: 400 of 1000 batches, give or take
        // the Weyl sequence's discrepancy.
        assert!((395..=405).contains(&seen[1]), "{seen:?}");
    }

    proptest! {
        #[test]
        fn every_batch_holds_each_share_within_a_row(
            weights in prop::collection::vec(0.001f64..10.0, 1..7),
            rows in 1u32..600,
            seed: u64,
            first in 0u64..(1 << 40),
        ) {
            let m = mixture(&weights);
            let total: f64 = weights.iter().sum();
            let shares = RowShares::new(&m, rows, seed);
            let mut got = vec![0u32; m.len()];
            for step in first..first + 50 {
                shares.in_batch(step, &mut got);
                prop_assert_eq!(got.iter().sum::<u32>(), rows);
                for (s, &g) in got.iter().enumerate() {
                    let q = f64::from(rows) * weights[s] / total;
                    // The fixed-point split may round q across an integer by 2^-40 or so.
                    prop_assert!((f64::from(g) - q).abs() < 1.0 + 1e-9, "source {} got {} of {}", s, g, q);
                }
            }
        }

        #[test]
        fn rows_before_a_batch_add_up_the_batches(
            weights in prop::collection::vec(0.001f64..10.0, 1..6),
            rows in 1u32..300,
            seed: u64,
            first in 0u64..(1 << 50),
            len in 0u64..400,
        ) {
            let m = mixture(&weights);
            let shares = RowShares::new(&m, rows, seed);
            let mut at_first = vec![0u64; m.len()];
            let mut at_end = vec![0u64; m.len()];
            shares.before(first, &mut at_first);
            shares.before(first + len, &mut at_end);
            prop_assert_eq!(at_first.iter().sum::<u64>(), first * u64::from(rows));
            let mut got = vec![0u32; m.len()];
            for step in first..first + len {
                shares.in_batch(step, &mut got);
                for (a, &g) in at_first.iter_mut().zip(&got) {
                    *a += u64::from(g);
                }
            }
            prop_assert_eq!(at_first, at_end);
        }
    }
}
