//! Weighted mixtures: which source each stream position reads, as a pure function.
//!
//! Position `p` of a mixture stream reads source `s` when the golden-ratio Weyl point
//! `u(p) = (p * G + offset(seed)) mod 2^64` falls in source `s`'s slice of `0..2^64`, the
//! slices being the sources' weights laid end to end (each at least one point wide). The
//! points `u(p), u(p + 1), ...` of any window are a low-discrepancy sequence: the count that
//! falls in a slice of width `w` differs from `n w` by `O(log n)` (Weyl's rotation by the
//! golden ratio has the smallest discrepancy of all rotations), so realised proportions
//! track the weights over every window, not only on average.
//!
//! How many times source `s` was picked before position `p` is the number of `q < p` whose
//! point lands in the slice: a sum of floors of a linear function, computed exactly in
//! `O(log p)` steps with the Euclid-like floor-sum recursion. A resumed or sharded reader
//! thus finds every source's pick count, and so its place in that source's own epochs,
//! without replaying the stream.

use alloc::vec::Vec;

use super::{mix, DatasetId, StreamError};

/// 2^64 / golden ratio, odd: the Weyl increment.
const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

/// Domain tag of the Weyl offset.
const MIXTURE_TAG: u64 = 0x6d69_7874_7572_6531; // "mixture1"

/// Sources and their weights. Which source a position reads depends only on the weights
/// (through [`Mixture::bounds`]) and the stream's seed.
#[derive(Clone, Debug, PartialEq)]
pub struct Mixture {
    datasets: Vec<DatasetId>,
    weights: Vec<f64>,
    /// Exclusive upper end of source `s`'s slice of `0..2^64`, for `s < S - 1`; the last
    /// source takes the rest.
    bounds: Vec<u64>,
}

impl Mixture {
    /// Sources `datasets` read in proportion to `weights` (any positive scale: `[7, 3]` is
    /// the same mixture as `[0.7, 0.3]`, when the normalised slices come out equal).
    ///
    /// Fails when the lists differ in length or are empty, when there are more than
    /// `u32::MAX` sources, when a dataset is empty, or when a weight is not a positive
    /// finite number or so small next to the total that its source would never be read.
    pub fn new(datasets: Vec<DatasetId>, weights: Vec<f64>) -> Result<Self, StreamError> {
        if datasets.is_empty() {
            return Err(StreamError::NoSources);
        }
        if datasets.len() != weights.len() {
            return Err(StreamError::WeightCount { sources: datasets.len(), weights: weights.len() });
        }
        if u32::try_from(datasets.len()).is_err() {
            return Err(StreamError::TooManySources(datasets.len()));
        }
        if let Some(source) = datasets.iter().position(|d| d.length == 0) {
            return Err(StreamError::EmptySource { index: source });
        }
        let bounds = bounds_of(&weights)?;
        Ok(Mixture { datasets, weights, bounds })
    }

    /// Checks mixture weights on their own, before any dataset is known (the rule
    /// [`Mixture::new`] applies): each a positive finite number, none so small next to the
    /// total that its source would never be read.
    pub fn check_weights(weights: &[f64]) -> Result<(), StreamError> {
        if weights.is_empty() {
            return Err(StreamError::NoSources);
        }
        bounds_of(weights).map(drop)
    }

    /// The sources, in order.
    pub fn datasets(&self) -> &[DatasetId] {
        &self.datasets
    }

    /// The weights as given.
    pub fn weights(&self) -> &[f64] {
        &self.weights
    }

    /// Number of sources.
    pub fn len(&self) -> usize {
        self.datasets.len()
    }

    /// Always false: a mixture has at least one source.
    pub fn is_empty(&self) -> bool {
        self.datasets.is_empty()
    }

    /// The slices of `0..2^64` the weights give: the exclusive upper end of each source's
    /// slice but the last's. Two mixtures with equal bounds read the same sources at every
    /// position.
    pub fn bounds(&self) -> &[u64] {
        &self.bounds
    }

    /// The source read at stream position `position` of a stream seeded with `seed`.
    pub fn source_at(&self, seed: u64, position: u64) -> u32 {
        self.source_of(weyl(offset(seed), position))
    }

    /// Writes into `picks[s]` how many of the positions `0..position` read source `s`.
    /// Costs `O(S log position)`, with no replay.
    ///
    /// # Panics
    /// If `picks.len()` is not the number of sources, or `position > 2^62`.
    pub fn picks_before(&self, seed: u64, position: u64, picks: &mut [u64]) {
        assert_eq!(picks.len(), self.len(), "one pick count per source");
        assert!(position <= super::MAX_POSITION, "stream position {position} beyond 2^62");
        let offset = offset(seed);
        let mut below_prev = 0;
        for (s, &bound) in self.bounds.iter().enumerate() {
            let below = count_below(position, offset, bound);
            picks[s] = below - below_prev;
            below_prev = below;
        }
        picks[self.len() - 1] = position - below_prev;
    }

    #[inline]
    pub(super) fn source_of(&self, point: u64) -> u32 {
        // Sources are few (usually < 10): a linear scan beats a binary search.
        self.bounds.iter().take_while(|&&b| b <= point).count() as u32
    }
}

/// The Weyl offset of a seed.
pub(super) fn offset(seed: u64) -> u64 {
    mix(MIXTURE_TAG ^ mix(seed))
}

/// The Weyl point of `position`.
#[inline]
pub(super) fn weyl(offset: u64, position: u64) -> u64 {
    position.wrapping_mul(GOLDEN).wrapping_add(offset)
}

fn bounds_of(weights: &[f64]) -> Result<Vec<u64>, StreamError> {
    let mut total = 0.0f64;
    for (source, &w) in weights.iter().enumerate() {
        if !(w.is_finite() && w > 0.0) {
            return Err(StreamError::BadWeight { index: source, weight: w });
        }
        total += w;
    }
    if !total.is_finite() {
        return Err(StreamError::BadWeight { index: weights.len() - 1, weight: total });
    }
    // 2^64 as an f64 (exact); `as u64` saturates, so a cumulative share of 1.0 (rounding)
    // becomes u64::MAX rather than wrapping.
    const SCALE: f64 = 18_446_744_073_709_551_616.0;
    let mut bounds = Vec::with_capacity(weights.len() - 1);
    let mut cumulative = 0.0f64;
    let mut lower = 0u64;
    for (source, &w) in weights[..weights.len() - 1].iter().enumerate() {
        cumulative += w;
        let upper = ((cumulative / total) * SCALE) as u64;
        if upper <= lower {
            return Err(StreamError::BadWeight { index: source, weight: w });
        }
        bounds.push(upper);
        lower = upper;
    }
    if lower == u64::MAX {
        return Err(StreamError::BadWeight { index: weights.len() - 1, weight: weights[weights.len() - 1] });
    }
    Ok(bounds)
}

/// `#{q in 0..n : (q * GOLDEN + offset) mod 2^64 < bound}`.
///
/// With `x = q G + o` and `M = 2^64`, `[x mod M < c] = floor(x / M) - floor((x + M - c) / M) + 1`,
/// so the count is two floor sums. Needs `n <= 2^62` so that every partial sum fits a u128.
pub(super) fn count_below(n: u64, offset: u64, bound: u64) -> u64 {
    const M: u128 = 1 << 64;
    let n128 = u128::from(n);
    let a = u128::from(GOLDEN);
    let b = u128::from(offset);
    let with = floor_sum(n128, M, a, b);
    let without = floor_sum(n128, M, a, b + M - u128::from(bound));
    // Each floor sum is at most n (n G + 2M) / M < 2^125, and their difference is in 0..=n.
    (n128 + with - without) as u64
}

/// `sum_{i < n} floor((a i + b) / m)`, by the Euclid-like recursion (the floor-sum
/// algorithm of competitive programming libraries, AtCoder's `floor_sum_unsigned`).
fn floor_sum(mut n: u128, mut m: u128, mut a: u128, mut b: u128) -> u128 {
    let mut sum = 0u128;
    loop {
        if a >= m {
            // n (n - 1) is even; halve before multiplying to stay in range.
            let pairs = if n.is_multiple_of(2) { (n / 2) * (n.saturating_sub(1)) } else { n * ((n - 1) / 2) };
            sum += pairs * (a / m);
            a %= m;
        }
        if b >= m {
            sum += n * (b / m);
            b %= m;
        }
        let y_max = a * n + b;
        if y_max < m {
            return sum;
        }
        n = y_max / m;
        b = y_max % m;
        core::mem::swap(&mut m, &mut a);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;
    use proptest::prelude::*;

    fn id(length: u64) -> DatasetId {
        DatasetId { length, generation: 0 }
    }

    fn brute_floor_sum(n: u128, m: u128, a: u128, b: u128) -> u128 {
        (0..n).map(|i| (a * i + b) / m).sum()
    }

    #[test]
    fn floor_sum_small_cases() {
        for n in 0..20 {
            for m in 1..12 {
                for a in 0..15 {
                    for b in 0..15 {
                        assert_eq!(floor_sum(n, m, a, b), brute_floor_sum(n, m, a, b), "{n} {m} {a} {b}");
                    }
                }
            }
        }
    }

    #[test]
    fn rejects_bad_weights() {
        let two = || vec![id(10), id(10)];
        assert!(matches!(Mixture::new(vec![], vec![]), Err(StreamError::NoSources)));
        assert!(matches!(Mixture::new(two(), vec![1.0]), Err(StreamError::WeightCount { .. })));
        assert!(matches!(Mixture::new(two(), vec![1.0, -1.0]), Err(StreamError::BadWeight { index: 1, .. })));
        assert!(matches!(Mixture::new(two(), vec![0.0, 1.0]), Err(StreamError::BadWeight { index: 0, .. })));
        assert!(matches!(Mixture::new(two(), vec![f64::NAN, 1.0]), Err(StreamError::BadWeight { index: 0, .. })));
        assert!(matches!(Mixture::new(two(), vec![1.0, 1e-30]), Err(StreamError::BadWeight { index: 1, .. })));
        assert!(matches!(Mixture::new(vec![id(1), id(0)], vec![1.0, 1.0]), Err(StreamError::EmptySource { index: 1 })));
        assert!(matches!(Mixture::new(two(), vec![f64::MAX, f64::MAX]), Err(StreamError::BadWeight { .. })));
    }

    #[test]
    fn scale_of_weights_does_not_matter() {
        let a = Mixture::new(vec![id(5), id(5)], vec![0.7, 0.3]).unwrap();
        let b = Mixture::new(vec![id(5), id(5)], vec![7.0, 3.0]).unwrap();
        assert_eq!(a.bounds(), b.bounds());
    }

    proptest! {
        #[test]
        fn picks_before_counts_exactly(
            weights in prop::collection::vec(0.01f64..10.0, 1..6),
            seed: u64,
            start in 0u64..(1 << 62) - 5000,
            len in 0u64..5000,
        ) {
            let m = Mixture::new(weights.iter().map(|_| id(3)).collect(), weights.clone()).unwrap();
            let mut at_start = vec![0; m.len()];
            let mut at_end = vec![0; m.len()];
            m.picks_before(seed, start, &mut at_start);
            m.picks_before(seed, start + len, &mut at_end);
            prop_assert_eq!(at_start.iter().sum::<u64>(), start);
            let mut walked = at_start.clone();
            for p in start..start + len {
                walked[m.source_at(seed, p) as usize] += 1;
            }
            prop_assert_eq!(walked, at_end);
        }

        #[test]
        fn picks_before_from_zero_matches_a_walk(weights in prop::collection::vec(0.01f64..10.0, 1..5), seed: u64, n in 0u64..3000) {
            let m = Mixture::new(weights.iter().map(|_| id(3)).collect(), weights.clone()).unwrap();
            let mut got = vec![0; m.len()];
            m.picks_before(seed, n, &mut got);
            let mut walked = vec![0u64; m.len()];
            for p in 0..n {
                walked[m.source_at(seed, p) as usize] += 1;
            }
            prop_assert_eq!(walked, got);
        }
    }
}
