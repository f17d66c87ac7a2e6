//! Splits of a dataset by reference: train/validation/test subsets of its samples that
//! share its records (nothing is copied), disjoint, and the same for the same seed.
//!
//! Split `k` of fractions `f_0, f_1, ...` is the samples at positions
//! `[round(F_{k-1} N), round(F_k N))` of a keyed permutation of the dataset's `N` samples
//! (`F_k` the running sum of the fractions; [`crate::Permutation`], keyed by the seed and a
//! constant of its own, so a split never lines up with a training epoch's order), in
//! ascending sample order: an evaluation pass over a split reads the dataset front to back.
//! The rounding of running sums makes the splits disjoint and, for fractions summing to 1,
//! covering. A split is held as the smaller of its samples and the samples it leaves out
//! (8 bytes each), so a 99% training split costs what the 1% left out does.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use crate::stream::combine_generations;
use crate::Permutation;

/// The permutation "epoch" splits use: a constant apart from training epochs.
const SPLIT_EPOCH: u64 = 0x5B11_7000_0000_0001;

/// The samples of one split, in ascending order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Subset {
    /// These samples.
    Keep(Vec<u64>),
    /// Every sample of `0..len` but these.
    Drop {
        /// The dataset's length.
        len: u64,
        /// The samples left out.
        gone: Vec<u64>,
    },
}

impl Subset {
    /// Samples in the split.
    pub fn len(&self) -> u64 {
        match self {
            Subset::Keep(v) => v.len() as u64,
            Subset::Drop { len, gone } => len - gone.len() as u64,
        }
    }

    /// True when the split holds no sample.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The dataset sample at position `p` of the split (`p < len()`).
    pub fn at(&self, p: u64) -> u64 {
        match self {
            Subset::Keep(v) => v[p as usize],
            // The j-th sample left out has `gone[j] - j` kept samples before it.
            Subset::Drop { gone, .. } => {
                // The j-th sample left out has `gone[j] - j` kept samples before it (a
                // non-decreasing sequence): the samples left out before the answer are
                // those with at most `p` kept before them.
                let (mut lo, mut hi) = (0usize, gone.len());
                while lo < hi {
                    let mid = (lo + hi) / 2;
                    if gone[mid] - mid as u64 <= p {
                        lo = mid + 1;
                    } else {
                        hi = mid;
                    }
                }
                p + lo as u64
            }
        }
    }
}

/// One split: its samples and the identity it gives a view of the dataset (folded into the
/// dataset's generation, so a state saved on one split never resumes on another).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Split {
    /// Its samples.
    pub subset: Subset,
    /// Its key: the seed and its bounds in the permutation.
    pub key: u64,
}

/// The splits of a dataset of `len` samples by `fractions` (each positive, summing to at
/// most 1; samples past their sum belong to no split), with `seed`.
pub fn split(len: u64, fractions: &[f64], seed: u64) -> Result<Vec<Split>, String> {
    if fractions.is_empty() {
        return Err("a split needs at least one fraction".into());
    }
    if let Some(f) = fractions.iter().find(|f| !(f.is_finite() && **f > 0.0)) {
        return Err(format!("split fractions must be positive, got {f}"));
    }
    let total: f64 = fractions.iter().sum();
    if total > 1.0 + 1e-9 {
        return Err(format!("split fractions sum to {total}, over 1"));
    }
    let perm = Permutation::new(len, seed, SPLIT_EPOCH);
    let mut bounds = Vec::with_capacity(fractions.len() + 1);
    let mut running = 0.0;
    bounds.push(0u64);
    for f in fractions {
        running += f;
        // Rounded half up (no_std has no f64::round; the value is never negative).
        bounds.push(((running.min(1.0) * len as f64 + 0.5) as u64).min(len));
    }
    let mut out = Vec::with_capacity(fractions.len());
    for k in 0..fractions.len() {
        let (lo, hi) = (bounds[k], bounds[k + 1]);
        let key = combine_generations(combine_generations(seed, lo), combine_generations(hi, len));
        let subset = if hi - lo <= len / 2 {
            let mut v: Vec<u64> = (lo..hi).map(|p| perm.at(p)).collect();
            v.sort_unstable();
            Subset::Keep(v)
        } else {
            let mut gone: Vec<u64> = (0..lo).chain(hi..len).map(|p| perm.at(p)).collect();
            gone.sort_unstable();
            Subset::Drop { len, gone }
        };
        out.push(Split { subset, key });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_are_disjoint_covering_sorted_and_reproducible() {
        for len in [0u64, 1, 7, 100, 1001] {
            let splits = split(len, &[0.8, 0.15, 0.05], 3).unwrap();
            let mut all: Vec<u64> = Vec::new();
            for s in &splits {
                let members: Vec<u64> = (0..s.subset.len()).map(|p| s.subset.at(p)).collect();
                assert!(members.windows(2).all(|w| w[0] < w[1]), "ascending");
                all.extend(members);
            }
            all.sort_unstable();
            assert_eq!(all, (0..len).collect::<Vec<_>>(), "len {len}: every sample in one split");
            assert_eq!(split(len, &[0.8, 0.15, 0.05], 3).unwrap(), splits);
        }
        let splits = split(1000, &[0.99, 0.01], 3).unwrap();
        assert!(matches!(splits[0].subset, Subset::Drop { .. }));
        assert_eq!((splits[0].subset.len(), splits[1].subset.len()), (990, 10));
        assert_ne!(split(1000, &[0.99, 0.01], 4).unwrap()[1], splits[1], "another seed, another split");
        assert_ne!(splits[0].key, splits[1].key);
        assert!(split(10, &[0.7, 0.7], 0).is_err() && split(10, &[0.0], 0).is_err());
        // Fractions under 1: the rest belongs to no split.
        assert_eq!(split(100, &[0.1], 0).unwrap()[0].subset.len(), 10);
    }
}
