//! [`Permutation::fill`] in vector instructions, chosen at run time on x86-64.
//!
//! Builds for the baseline x86-64 (SSE2) have no 64-bit vector multiply, so the portable
//! fill runs its rounds as scalar multiplies, some 30 instructions an index. Most x86-64
//! machines that train models have AVX2 or AVX-512, where one instruction does a step of 4
//! or 8 encryptions: AVX-512DQ multiplies 64-bit lanes (`vpmullq`) and runs the round as
//! written; AVX2 multiplies only 32-bit ones (`vpmuludq`) and runs it split in two products
//! that give the same bits (see [`block_avx2`]). The cycle-walk's rare second steps are
//! scalar. Every path computes the same permutation; the tests compare each one the CPU has
//! with [`Permutation::at`].
//!
//! Its `unsafe` is of one kind: calling a function compiled for CPU features that the
//! caller's own code does not assume, after asking the CPU whether it has them (as
//! `image/write.rs` does; the core's other `unsafe` calls C: `io/std_dir.rs`, `image/turbo.rs`).
#![allow(unsafe_code)]

use core::arch::x86_64::*;

use super::Permutation;

/// Fills `out` as [`Permutation::fill`] does, when this CPU has AVX-512 or AVX2; false,
/// with `out` untouched, when it has neither.
pub(super) fn fill(p: &Permutation, first: u64, out: &mut [u64]) -> bool {
    if avx512() {
        // SAFETY: `fill_avx512` is safe Rust whose only requirement is that the CPU runs the
        // AVX-512F/DQ/VL instructions it was compiled with; `avx512()` just asked the CPU
        // (and the OS, for the saved register state) and found all three.
        unsafe { fill_avx512(p, first, out) };
        return true;
    }
    if std::is_x86_feature_detected!("avx2") {
        // SAFETY: as above, for AVX2, which `is_x86_feature_detected!` just found.
        unsafe { fill_avx2(p, first, out) };
        return true;
    }
    false
}

fn avx512() -> bool {
    std::is_x86_feature_detected!("avx512f")
        && std::is_x86_feature_detected!("avx512dq")
        && std::is_x86_feature_detected!("avx512vl")
}

/// Registers of eight lanes in flight: enough independent multiplies to hide their latency.
const AVX512_REGS: usize = 4;

/// Registers of four lanes in flight.
const AVX2_REGS: usize = 4;

#[target_feature(enable = "avx512f,avx512dq,avx512vl")]
fn fill_avx512(p: &Permutation, first: u64, out: &mut [u64]) {
    let mut k = first;
    let mut chunks = out.chunks_exact_mut(8 * AVX512_REGS);
    for c in &mut chunks {
        block_avx512::<AVX512_REGS>(p, k, c);
        k += c.len() as u64;
    }
    let mut rest = chunks.into_remainder().chunks_exact_mut(8);
    for c in &mut rest {
        block_avx512::<1>(p, k, c);
        k += 8;
    }
    for slot in rest.into_remainder() {
        *slot = p.at(k);
        k += 1;
    }
}

/// Positions `k..k + 8 R` into `out` (`8 R` long): the round of [`super::round`], 64-bit
/// lanes.
#[target_feature(enable = "avx512f,avx512dq,avx512vl")]
fn block_avx512<const R: usize>(p: &Permutation, k: u64, out: &mut [u64]) {
    let shift = _mm_cvtsi64_si128(i64::from(p.low_bits));
    let (low_mask, high_mask) = (_mm512_set1_epi64(p.low_mask as i64), _mm512_set1_epi64(p.high_mask as i64));
    let lanes = _mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0);
    let mut high = [_mm512_setzero_si512(); R];
    let mut low = [_mm512_setzero_si512(); R];
    for r in 0..R {
        let x = _mm512_add_epi64(_mm512_set1_epi64((k + 8 * r as u64) as i64), lanes);
        high[r] = _mm512_srl_epi64(x, shift);
        low[r] = _mm512_and_si512(x, low_mask);
    }
    let round = |half, key: u64| {
        let sum = _mm512_add_epi64(half, _mm512_set1_epi64(key as i64));
        _mm512_srli_epi64::<32>(_mm512_mullo_epi64(sum, _mm512_set1_epi64((key | 1) as i64)))
    };
    for pair in p.keys[..p.rounds].chunks_exact(2) {
        for r in 0..R {
            high[r] = _mm512_xor_si512(high[r], _mm512_and_si512(round(low[r], pair[0]), high_mask));
        }
        for r in 0..R {
            low[r] = _mm512_xor_si512(low[r], _mm512_and_si512(round(high[r], pair[1]), low_mask));
        }
    }
    let last = _mm512_set1_epi64((p.len - 1) as i64);
    for (r, dst) in out.chunks_exact_mut(8).enumerate() {
        let x = _mm512_or_si512(_mm512_sll_epi64(high[r], shift), low[r]);
        // SAFETY: `dst` is 8 u64s, the 64 bytes stored; `storeu` needs no alignment.
        unsafe { _mm512_storeu_si512(dst.as_mut_ptr().cast(), x) };
        walk(p, dst, u32::from(_mm512_cmpgt_epu64_mask(x, last)));
    }
}

#[target_feature(enable = "avx2")]
fn fill_avx2(p: &Permutation, first: u64, out: &mut [u64]) {
    let mut k = first;
    let mut chunks = out.chunks_exact_mut(4 * AVX2_REGS);
    for c in &mut chunks {
        block_avx2::<AVX2_REGS>(p, k, c);
        k += c.len() as u64;
    }
    let mut rest = chunks.into_remainder().chunks_exact_mut(4);
    for c in &mut rest {
        block_avx2::<1>(p, k, c);
        k += 4;
    }
    for slot in rest.into_remainder() {
        *slot = p.at(k);
        k += 1;
    }
}

/// Positions `k..k + 4 R` into `out` (`4 R` long), each round as two 32-bit products
/// (`round_split` below).
#[target_feature(enable = "avx2")]
fn block_avx2<const R: usize>(p: &Permutation, k: u64, out: &mut [u64]) {
    let shift = _mm_cvtsi64_si128(i64::from(p.low_bits));
    let (low_mask, high_mask) = (_mm256_set1_epi64x(p.low_mask as i64), _mm256_set1_epi64x(p.high_mask as i64));
    let lanes = _mm256_set_epi64x(3, 2, 1, 0);
    let mut high = [_mm256_setzero_si256(); R];
    let mut low = [_mm256_setzero_si256(); R];
    for r in 0..R {
        let x = _mm256_add_epi64(_mm256_set1_epi64x((k + 4 * r as u64) as i64), lanes);
        high[r] = _mm256_srl_epi64(x, shift);
        low[r] = _mm256_and_si256(x, low_mask);
    }
    let round = |half, key: u64| {
        let b = key | 1;
        let (b_lo, b_hi) = (_mm256_set1_epi64x((b & 0xffff_ffff) as i64), _mm256_set1_epi64x((b >> 32) as i64));
        let product = _mm256_add_epi64(_mm256_mul_epu32(half, b_lo), _mm256_set1_epi64x(key.wrapping_mul(b) as i64));
        _mm256_add_epi64(_mm256_srli_epi64::<32>(product), _mm256_mul_epu32(half, b_hi))
    };
    for pair in p.keys[..p.rounds].chunks_exact(2) {
        for r in 0..R {
            high[r] = _mm256_xor_si256(high[r], _mm256_and_si256(round(low[r], pair[0]), high_mask));
        }
        for r in 0..R {
            low[r] = _mm256_xor_si256(low[r], _mm256_and_si256(round(high[r], pair[1]), low_mask));
        }
    }
    // AVX2 compares signed lanes: flipping the top bit of both sides orders them unsigned.
    let top = _mm256_set1_epi64x(i64::MIN);
    let last = _mm256_xor_si256(_mm256_set1_epi64x((p.len - 1) as i64), top);
    for (r, dst) in out.chunks_exact_mut(4).enumerate() {
        let x = _mm256_or_si256(_mm256_sll_epi64(high[r], shift), low[r]);
        // SAFETY: `dst` is 4 u64s, the 32 bytes stored; `storeu` needs no alignment.
        unsafe { _mm256_storeu_si256(dst.as_mut_ptr().cast(), x) };
        let over = _mm256_cmpgt_epi64(_mm256_xor_si256(x, top), last);
        walk(p, dst, _mm256_movemask_pd(_mm256_castsi256_pd(over)) as u32);
    }
}

/// [`super::round`] from 32 x 32 -> 64-bit products, which `vpmuludq` makes from the low 32
/// bits of each 64-bit lane. For `half < 2^32` (a half is at most 32 bits wide) and
/// `b = key | 1`, modulo `2^64`: `(half + key) b = half b_lo + key b + (half b_hi) 2^32`, so
/// bits 32..63 of the product are `((half b_lo + key b) >> 32) + half b_hi` modulo `2^32`:
/// the same low 32 bits as the round's, all that the callers keep (every half mask is at
/// most 32 bits wide). The scalar form, which the tests check against the round.
#[cfg(test)]
fn round_split(half: u64, key: u64) -> u64 {
    let b = key | 1;
    let low = (half * (b & 0xffff_ffff)).wrapping_add(key.wrapping_mul(b));
    (low >> 32).wrapping_add(half * (b >> 32))
}

/// Finishes the cycle-walk of the lanes of `dst` flagged in `over` (encrypted past `len`).
#[inline(always)]
fn walk(p: &Permutation, dst: &mut [u64], over: u32) {
    let mut over = over;
    while over != 0 {
        let j = over.trailing_zeros() as usize;
        over &= over - 1;
        let mut v = dst[j];
        while v >= p.len {
            v = p.encrypt(v);
        }
        dst[j] = v;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;
    use alloc::vec::Vec;

    /// Lengths with and without cycle-walking, both round counts, odd and even splits.
    const LENGTHS: [u64; 8] = [5, 1000, 1 << 16, (1 << 16) + 1, 1 << 24, 1_000_003, (1 << 33) + 7, u64::MAX];

    fn check(name: &str, fill: impl Fn(&Permutation, u64, &mut [u64])) {
        for len in LENGTHS {
            let p = Permutation::new(len, len ^ 7, 2);
            // 37: lanes and a remainder; starts near both ends of the range.
            let n = 37.min(len) as usize;
            for first in [0, (len / 3).min(len - n as u64), len - n as u64] {
                let mut got = vec![0u64; n];
                fill(&p, first, &mut got);
                let want: Vec<u64> = (first..first + n as u64).map(|k| p.at(k)).collect();
                assert_eq!(got, want, "{name}, len {len}, first {first}");
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn split_round_equals_round(half in 0u64..1 << 32, key: u64) {
            proptest::prop_assert_eq!(round_split(half, key) & 0xffff_ffff, super::super::round(half, key));
        }
    }

    #[test]
    fn vector_fills_match_at() {
        if avx512() {
            // SAFETY: the CPU has AVX-512F/DQ/VL (just asked).
            check("avx512", |p, first, out| unsafe { fill_avx512(p, first, out) });
        }
        if std::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2 (just asked).
            check("avx2", |p, first, out| unsafe { fill_avx2(p, first, out) });
        }
    }
}
