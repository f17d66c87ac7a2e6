//! A keyed bijection on `0..len`, computed rather than stored.
//!
//! [`Permutation`] is a four-round Feistel network over the smallest power of two
//! `2^m >= len`, turned into a permutation of `0..len` by cycle-walking: encrypt, and while
//! the result is `>= len`, encrypt again. Every Feistel round is invertible whatever its
//! round function, so the network is a bijection of `0..2^m`; following the cycle through
//! `k` to the next member of `0..len` is then a bijection of `0..len` (Black and Rogaway,
//! "Ciphers with arbitrary finite domains", 2002). Because `2^m < 2 len`, a walk takes
//! fewer than two encryptions on average.
//!
//! When `m` is odd the halves differ by one bit: rounds alternately rewrite the high half
//! from the low one and the low half from the high one (an unbalanced Feistel network,
//! invertible in the same way), so the domain never needs padding to `4 len`.
//!
//! Memory is the key schedule: five words, whatever `len` (up to `2^64 - 1`).

use super::mix;

/// Feistel rounds. Four is the classic count for a strong pseudo-random permutation
/// (Luby-Rackoff); each costs two multiplies.
const ROUNDS: usize = 4;

/// A permutation of `0..len` keyed by `(seed, source, epoch)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Permutation {
    len: u64,
    low_bits: u32,
    low_mask: u64,
    high_mask: u64,
    keys: [u64; ROUNDS],
}

/// Domain tag of permutation keys, so they never coincide with other keys drawn from a seed.
const PERMUTATION_TAG: u64 = 0x7065_726d_7574_6531; // "permute1"

impl Permutation {
    /// The permutation of `0..len` for `epoch` of a stream seeded with `seed`.
    ///
    /// Equal to [`Permutation::for_source`] with source 0.
    pub fn new(len: u64, seed: u64, epoch: u64) -> Self {
        Self::for_source(len, seed, 0, epoch)
    }

    /// The permutation of `0..len` for `epoch` of source `source` of a mixture seeded with
    /// `seed`. Different `(seed, source, epoch)` give independent-looking permutations.
    pub fn for_source(len: u64, seed: u64, source: u32, epoch: u64) -> Self {
        // m = ceil(log2(len)): the smallest power of two holding 0..len.
        let bits = if len <= 1 { 0 } else { 64 - (len - 1).leading_zeros() };
        let low_bits = bits / 2;
        let high_bits = bits - low_bits;
        let mut state = mix(mix(mix(PERMUTATION_TAG ^ seed) ^ u64::from(source)) ^ epoch);
        let mut keys = [0u64; ROUNDS];
        for k in &mut keys {
            state = mix(state);
            *k = state;
        }
        Permutation { len, low_bits, low_mask: mask(low_bits), high_mask: mask(high_bits), keys }
    }

    /// Size of the permuted range.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// True when the range is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The element at position `k`: `at` maps `0..len` onto `0..len` one to one.
    ///
    /// # Panics
    /// If `k >= len` (the walk could then never end).
    #[inline]
    pub fn at(&self, k: u64) -> u64 {
        assert!(k < self.len, "permutation position {k} out of range 0..{}", self.len);
        let mut x = self.encrypt(k);
        while x >= self.len {
            x = self.encrypt(x);
        }
        x
    }

    /// The position of element `i`: the inverse of [`Permutation::at`].
    ///
    /// # Panics
    /// If `i >= len`.
    pub fn position_of(&self, i: u64) -> u64 {
        assert!(i < self.len, "permutation element {i} out of range 0..{}", self.len);
        let mut x = self.decrypt(i);
        while x >= self.len {
            x = self.decrypt(x);
        }
        x
    }

    #[inline]
    fn encrypt(&self, x: u64) -> u64 {
        let mut high = x >> self.low_bits;
        let mut low = x & self.low_mask;
        high ^= round(low, self.keys[0]) & self.high_mask;
        low ^= round(high, self.keys[1]) & self.low_mask;
        high ^= round(low, self.keys[2]) & self.high_mask;
        low ^= round(high, self.keys[3]) & self.low_mask;
        (high << self.low_bits) | low
    }

    fn decrypt(&self, x: u64) -> u64 {
        let mut high = x >> self.low_bits;
        let mut low = x & self.low_mask;
        low ^= round(high, self.keys[3]) & self.low_mask;
        high ^= round(low, self.keys[2]) & self.high_mask;
        low ^= round(high, self.keys[1]) & self.low_mask;
        high ^= round(low, self.keys[0]) & self.high_mask;
        (high << self.low_bits) | low
    }
}

fn mask(bits: u32) -> u64 {
    // Halves are at most 32 bits wide, so the shift never reaches 64.
    (1u64 << bits) - 1
}

/// The round function: a keyed 64-bit mix whose top 32 bits depend on every input bit.
#[inline(always)]
fn round(half: u64, key: u64) -> u64 {
    let h = (half ^ key).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (h ^ (h >> 32)).wrapping_mul(0xD6E8_FEB8_6659_FD93) >> 32
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    fn assert_permutation(p: &Permutation) {
        let n = p.len() as usize;
        let mut seen = vec![false; n];
        for k in 0..p.len() {
            let i = p.at(k);
            assert!(!seen[i as usize], "len {n}: {i} twice");
            seen[i as usize] = true;
            assert_eq!(p.position_of(i), k);
        }
    }

    #[test]
    fn tiny_domains_are_permutations() {
        for len in 1..=70 {
            for seed in 0..8 {
                assert_permutation(&Permutation::new(len, seed, seed * 3));
            }
        }
    }

    #[test]
    fn keyed_by_seed_source_and_epoch() {
        let base = Permutation::new(1000, 1, 0);
        let first = |p: &Permutation| (0..16).map(|k| p.at(k)).collect::<alloc::vec::Vec<_>>();
        assert_ne!(first(&base), first(&Permutation::new(1000, 2, 0)));
        assert_ne!(first(&base), first(&Permutation::new(1000, 1, 1)));
        assert_ne!(first(&base), first(&Permutation::for_source(1000, 1, 1, 0)));
        assert_eq!(first(&base), first(&Permutation::for_source(1000, 1, 0, 0)));
    }

    #[test]
    fn largest_domain_round_trips() {
        let p = Permutation::new(u64::MAX, 9, 9);
        for k in [0, 1, 12345, u64::MAX / 2, u64::MAX - 1] {
            let i = p.at(k);
            assert!(i < u64::MAX);
            assert_eq!(p.position_of(i), k);
        }
    }

    #[test]
    #[should_panic(expected = "out of range")]
    fn position_past_the_end_panics() {
        Permutation::new(10, 0, 0).at(10);
    }
}
