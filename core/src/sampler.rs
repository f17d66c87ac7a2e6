//! The endless index generator that feeds a data loader: loaderx's `Sampler`.
//!
//! A [`Sampler`] yields batches forever. [`Mode::Sequential`] slides a window over the index
//! space treated as a circle (batch `i` holds `(cursor + k) % length`, so no batch is ever
//! truncated at the tail); [`Mode::Iid`] draws uniformly with replacement from a
//! Xoshiro256++ stream seeded through SplitMix64, so the same seed gives the same stream on
//! every host and platform; [`Mode::Shuffle`] visits every index once per epoch, in the
//! order of the epoch's [`crate::stream::Permutation`], and drops the `length % batch_size`
//! positions that would not fill a last batch.
//!
//! It is a view of [`crate::stream::Stream`] at world size 1 (global batch = `batch_size`),
//! which owns every mapping from positions to indices; the sampler adds only loaderx's
//! argument checks and fills of any length.

use alloc::vec::Vec;

use crate::error::Error;
use crate::stream::{DatasetId, Shard, Stream};

// How indices are drawn. The mode belongs to the stream (`stream/mode.rs`), which this shim is
// built on; `sampler::Mode` stays a path to it for the callers that name it here.
pub use crate::stream::Mode;

/// An endless generator of index batches over `0..length`.
#[derive(Clone, Debug)]
pub struct Sampler {
    length: u64,
    /// The stream at world size 1.
    shard: Shard,
    /// The batch a fill of another length than `batch_size` cut into, and how much of it
    /// was handed out.
    carry: Vec<u64>,
    used: usize,
}

impl Sampler {
    /// A sampler over `0..length` yielding `batch_size` indices per batch.
    ///
    /// Fails with [`Error::InvalidArgument`] when `length` or `batch_size` is zero, or, in
    /// shuffle mode, when `batch_size > length` (an epoch would hold no batch).
    pub fn new(length: u64, batch_size: usize, mode: Mode, seed: u64) -> Result<Self, Error> {
        if length == 0 {
            return Err(Error::InvalidArgument("sampler length must be at least 1".into()));
        }
        if batch_size == 0 {
            return Err(Error::InvalidArgument("sampler batch size must be at least 1".into()));
        }
        if mode == Mode::Shuffle && batch_size as u64 > length {
            return Err(Error::InvalidArgument(alloc::format!(
                "a shuffle epoch of {length} indices holds no batch of {batch_size}"
            )));
        }
        let invalid = |e: crate::stream::StreamError| Error::InvalidArgument(alloc::string::ToString::to_string(&e));
        let stream =
            Stream::new(DatasetId { length, generation: 0 }, mode, seed, batch_size as u64).map_err(invalid)?;
        let shard = stream.shard(0, 1).map_err(invalid)?;
        Ok(Sampler { length, shard, carry: Vec::new(), used: 0 })
    }

    /// Batches per epoch in shuffle mode (`length / batch_size`); `None` in the endless modes.
    pub fn steps_per_epoch(&self) -> Option<u64> {
        self.shard.stream().steps_per_epoch()
    }

    /// Size of the index space.
    pub fn length(&self) -> u64 {
        self.length
    }

    /// Indices per batch.
    pub fn batch_size(&self) -> usize {
        self.shard.batch_size()
    }

    /// The drawing mode.
    pub fn mode(&self) -> Mode {
        self.shard.stream().mode()
    }

    /// Fills `out` with the next `out.len()` indices of the stream. Calling it with slices of
    /// `batch_size` gives the batches (and allocates nothing); other sizes continue the same
    /// stream. Panics after 2^62 indices ([`crate::stream::MAX_POSITION`]).
    pub fn fill(&mut self, out: &mut [u64]) {
        let b = self.batch_size();
        let take = out.len().min(self.carry.len() - self.used);
        out[..take].copy_from_slice(&self.carry[self.used..self.used + take]);
        self.used += take;
        let mut rest = &mut out[take..];
        while rest.len() >= b {
            let (now, later) = rest.split_at_mut(b);
            self.shard.fill(now);
            rest = later;
        }
        if !rest.is_empty() {
            self.carry.resize(b, 0);
            self.shard.fill(&mut self.carry);
            rest.copy_from_slice(&self.carry[..rest.len()]);
            self.used = rest.len();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;
    use proptest::prelude::*;

    #[test]
    fn sequential_wraps_like_a_circle() {
        let mut s = Sampler::new(10, 4, Mode::Sequential, 42).unwrap();
        let mut b = [0u64; 4];
        let mut got = vec![];
        for _ in 0..4 {
            s.fill(&mut b);
            got.push(b);
        }
        assert_eq!(got, vec![[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 0, 1], [2, 3, 4, 5]]);
    }

    #[test]
    fn sequential_batch_larger_than_length() {
        let mut s = Sampler::new(3, 7, Mode::Sequential, 0).unwrap();
        let mut b = [0u64; 7];
        s.fill(&mut b);
        assert_eq!(b, [0, 1, 2, 0, 1, 2, 0]);
        s.fill(&mut b);
        assert_eq!(b, [1, 2, 0, 1, 2, 0, 1]);
    }

    #[test]
    fn iid_is_seeded_and_pinned() {
        // Pinned values: a change here breaks "same seed, same stream" for every user.
        let mut s = Sampler::new(1_000_000, 4, Mode::Iid, 42).unwrap();
        let mut b = [0u64; 4];
        s.fill(&mut b);
        let mut t = Sampler::new(1_000_000, 4, Mode::Iid, 42).unwrap();
        let mut c = [0u64; 4];
        t.fill(&mut c);
        assert_eq!(b, c);
        assert_eq!(b, PINNED_SEED_42);
        let mut u = Sampler::new(1_000_000, 4, Mode::Iid, 43).unwrap();
        u.fill(&mut c);
        assert_ne!(b, c);
    }

    // Cross-checked against an independent Python SplitMix64 + xoshiro256++ implementation.
    const PINNED_SEED_42: [u64; 4] = [814305, 318821, 983894, 701135];

    #[test]
    fn rejects_empty_space_and_batch() {
        assert!(Sampler::new(0, 1, Mode::Iid, 0).is_err());
        assert!(Sampler::new(1, 0, Mode::Iid, 0).is_err());
    }

    #[test]
    fn iid_is_roughly_uniform() {
        let mut s = Sampler::new(10, 1000, Mode::Iid, 7).unwrap();
        let mut b = vec![0u64; 100_000];
        s.fill(&mut b);
        let mut counts = [0u32; 10];
        for &i in &b {
            counts[i as usize] += 1;
        }
        for c in counts {
            assert!((9_000..11_000).contains(&c), "{counts:?}");
        }
    }

    #[test]
    fn shuffle_visits_every_index_once_per_epoch() {
        let (n, b) = (103u64, 10usize);
        let mut s = Sampler::new(n, b, Mode::Shuffle, 7).unwrap();
        assert_eq!(s.steps_per_epoch(), Some(10));
        let mut batch = vec![0u64; b];
        let mut epochs = vec![];
        for _ in 0..3 {
            let mut epoch = vec![];
            for _ in 0..10 {
                s.fill(&mut batch);
                epoch.extend_from_slice(&batch);
            }
            let mut sorted = epoch.clone();
            sorted.sort_unstable();
            sorted.dedup();
            assert_eq!(sorted.len(), 100, "an index repeats within an epoch");
            assert!(sorted.iter().all(|&i| i < n));
            epochs.push(epoch);
        }
        assert_ne!(epochs[0], epochs[1]);
        // Epoch e is the first 100 positions of the permutation keyed by (seed, e).
        let p = crate::stream::Permutation::new(n, 7, 2);
        assert_eq!(epochs[2], (0..100).map(|k| p.at(k)).collect::<alloc::vec::Vec<_>>());
    }

    #[test]
    fn fills_of_any_size_continue_the_stream_in_every_mode() {
        for mode in [Mode::Sequential, Mode::Iid, Mode::Shuffle] {
            let mut whole = Sampler::new(50, 8, mode, 1).unwrap();
            let mut pieces = whole.clone();
            let mut a = vec![0u64; 8 * 13];
            whole.fill(&mut a);
            let mut b = vec![0u64; 8 * 13];
            let (x, rest) = b.split_at_mut(3);
            let (y, z) = rest.split_at_mut(37);
            pieces.fill(x);
            pieces.fill(y);
            pieces.fill(z);
            assert_eq!(a, b, "{mode:?}");
        }
    }

    #[test]
    fn shuffle_fills_of_any_size_continue_the_stream() {
        let mut whole = Sampler::new(50, 8, Mode::Shuffle, 1).unwrap();
        let mut pieces = whole.clone();
        let mut a = vec![0u64; 8 * 13];
        whole.fill(&mut a);
        let mut b = vec![0u64; 8 * 13];
        let (x, y) = b.split_at_mut(37);
        pieces.fill(x);
        pieces.fill(y);
        assert_eq!(a, b);
    }

    #[test]
    fn shuffle_needs_a_batch_per_epoch() {
        assert!(Sampler::new(9, 10, Mode::Shuffle, 0).is_err());
        assert!(Sampler::new(10, 10, Mode::Shuffle, 0).is_ok());
        assert_eq!(Mode::from_u8(2), Some(Mode::Shuffle));
        assert_eq!(Mode::from_u8(3), None);
        assert_eq!(Sampler::new(10, 3, Mode::Iid, 0).unwrap().steps_per_epoch(), None);
    }

    proptest! {
        #[test]
        fn shuffle_indices_in_range(length in 1u64..u64::MAX, n in 1usize..300, seed: u64) {
            prop_assume!(n as u64 <= length);
            let mut s = Sampler::new(length, n, Mode::Shuffle, seed).unwrap();
            let mut b = vec![0u64; n];
            for _ in 0..3 {
                s.fill(&mut b);
                prop_assert!(b.iter().all(|&i| i < length));
            }
        }

        #[test]
        fn indices_in_range(length in 1u64..u64::MAX, n in 1usize..300, seed: u64, mode in 0u8..2) {
            let mut s = Sampler::new(length, n, Mode::from_u8(mode).unwrap(), seed).unwrap();
            let mut b = vec![0u64; n];
            for _ in 0..3 {
                s.fill(&mut b);
                prop_assert!(b.iter().all(|&i| i < length));
            }
        }
    }
}
