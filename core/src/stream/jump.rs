//! Moving a xoshiro256++ generator ahead by any number of draws without drawing them.
//!
//! xoshiro256's state transition `T` is linear over GF(2), so `c` draws multiply the state
//! by `T^c`, and `T^c = r(T)` where `r(x) = x^c mod P(x)`, `P` the characteristic polynomial
//! of `T` (Cayley-Hamilton). Applying `r(T)` is 256 draws that XOR up the states at `r`'s set
//! coefficients; computing `r` is square-and-multiply-by-`x` in `GF(2)[x] / P`. This is
//! what `rand_xoshiro`'s `jump_ce` does, with schoolbook multiplication (256 shift-and-add
//! steps per squaring, some 70 µs per jump here). Squaring over GF(2) is linear, though: it
//! spreads the coefficients apart, and the reduction of the upper half goes a byte at a
//! time through a 256-entry table, so a jump costs a few microseconds. The tests check it
//! against `jump_ce` and against drawing.

use rand_core::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

/// A polynomial over GF(2) of degree < 256, coefficient `i` in bit `i % 64` of word `i / 64`.
type Poly = [u64; 4];

/// The low 256 coefficients of xoshiro256's characteristic polynomial (the `x^256` term is
/// implicit). The same constant `rand_xoshiro` uses; [`tests`] derive the published jump
/// constants (`2^128` and `2^192` draws) from it.
const CHARPOLY: Poly = [0x9d11_6f2b_b0f0_f001, 0x0280_002b_cefd_1a5e, 0x04b4_edcf_2625_9f85, 0x0003_c03c_3f3e_cb19];

/// `REDUCE[b] = b(x) x^256 mod P` for every polynomial `b` of degree < 8.
static REDUCE: [Poly; 256] = reduce_table();

const fn mul_x(a: Poly) -> Poly {
    let carry = a[3] >> 63;
    let mut r = [a[0] << 1, (a[1] << 1) | (a[0] >> 63), (a[2] << 1) | (a[1] >> 63), (a[3] << 1) | (a[2] >> 63)];
    if carry != 0 {
        // x^256 = P_low (mod P).
        r[0] ^= CHARPOLY[0];
        r[1] ^= CHARPOLY[1];
        r[2] ^= CHARPOLY[2];
        r[3] ^= CHARPOLY[3];
    }
    r
}

const fn reduce_table() -> [Poly; 256] {
    let mut table = [[0u64; 4]; 256];
    let mut b = 0;
    while b < 256 {
        let mut acc = [0u64; 4];
        let mut term = CHARPOLY; // x^256 mod P, then x^257, ...
        let mut j = 0;
        while j < 8 {
            if (b >> j) & 1 == 1 {
                acc = [acc[0] ^ term[0], acc[1] ^ term[1], acc[2] ^ term[2], acc[3] ^ term[3]];
            }
            term = mul_x(term);
            j += 1;
        }
        table[b] = acc;
        b += 1;
    }
    table
}

/// The bits of `x` moved to the even positions of a u64 (its square as a polynomial).
fn spread(x: u32) -> u64 {
    let mut x = u64::from(x);
    x = (x | (x << 16)) & 0x0000_FFFF_0000_FFFF;
    x = (x | (x << 8)) & 0x00FF_00FF_00FF_00FF;
    x = (x | (x << 4)) & 0x0F0F_0F0F_0F0F_0F0F;
    x = (x | (x << 2)) & 0x3333_3333_3333_3333;
    (x | (x << 1)) & 0x5555_5555_5555_5555
}

/// `a^2 mod P`.
fn square(a: Poly) -> Poly {
    let mut v = [0u64; 8];
    for (i, &w) in a.iter().enumerate() {
        v[2 * i] = spread(w as u32);
        v[2 * i + 1] = spread((w >> 32) as u32);
    }
    // Fold the upper 256 coefficients down a byte at a time, from the top: the byte at
    // x^(256 + 8k) becomes REDUCE[byte] x^(8k), which lands below it.
    for k in (0..32).rev() {
        let bit = 256 + 8 * k;
        let byte = (v[bit / 64] >> (bit % 64)) & 0xff;
        if byte == 0 {
            continue;
        }
        v[bit / 64] ^= byte << (bit % 64);
        let (word, shift) = ((8 * k) / 64, (8 * k) % 64);
        for (i, &r) in REDUCE[byte as usize].iter().enumerate() {
            v[word + i] ^= r << shift;
            if shift != 0 {
                v[word + i + 1] ^= r >> (64 - shift);
            }
        }
    }
    [v[0], v[1], v[2], v[3]]
}

/// `x^c mod P`.
fn x_pow(c: u64) -> Poly {
    let mut r: Poly = [1, 0, 0, 0];
    if c == 0 {
        return r;
    }
    for bit in (0..64 - c.leading_zeros()).rev() {
        r = square(r);
        if (c >> bit) & 1 == 1 {
            r = mul_x(r);
        }
    }
    r
}

fn words(rng: &Xoshiro256PlusPlus) -> Poly {
    let bytes = rng.state();
    core::array::from_fn(|i| u64::from_le_bytes(bytes[8 * i..8 * i + 8].try_into().unwrap_or_default()))
}

/// Moves `rng` ahead by `draws` outputs, as `draws` calls of `next_u64` would, in constant
/// time.
pub(super) fn advance(rng: &mut Xoshiro256PlusPlus, draws: u64) {
    let poly = x_pow(draws);
    let mut acc = [0u64; 4];
    for i in 0..256 {
        if (poly[i / 64] >> (i % 64)) & 1 == 1 {
            for (a, w) in acc.iter_mut().zip(words(rng)) {
                *a ^= w;
            }
        }
        rng.next_u64();
    }
    let mut seed = [0u8; 32];
    for (chunk, w) in seed.chunks_exact_mut(8).zip(acc) {
        chunk.copy_from_slice(&w.to_le_bytes());
    }
    // `acc` is T^draws applied to a non-zero state, so it is non-zero, and `from_seed`
    // takes it as it is.
    *rng = Xoshiro256PlusPlus::from_seed(seed);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// `x^(c * 2^e) mod P` by schoolbook squaring.
    fn x_pow_slow(c: u64, e: u32) -> Poly {
        let mul = |a: Poly, b: Poly| {
            let mut r = [0u64; 4];
            for k in (0..256).rev() {
                r = mul_x(r);
                if (a[k / 64] >> (k % 64)) & 1 == 1 {
                    for i in 0..4 {
                        r[i] ^= b[i];
                    }
                }
            }
            r
        };
        let mut r = [1, 0, 0, 0];
        for k in (0..64).rev() {
            r = mul(r, r);
            if (c >> k) & 1 == 1 {
                r = mul_x(r);
            }
        }
        for _ in 0..e {
            r = mul(r, r);
        }
        r
    }

    #[test]
    fn published_jump_constants_follow_from_the_polynomial() {
        // xoshiro256's jump() and long_jump() polynomials: x^(2^128) and x^(2^192) mod P.
        // x, squared 128 times.
        let mut jump: Poly = [2, 0, 0, 0];
        for _ in 0..128 {
            jump = square(jump);
        }
        assert_eq!(jump, [0x180ec6d33cfd0aba, 0xd5a61266f0c9392c, 0xa9582618e03fc9aa, 0x39abdc4529b1661c]);
        let mut long = [2, 0, 0, 0];
        for _ in 0..192 {
            long = square(long);
        }
        assert_eq!(long, [0x76e15d3efefdcbbf, 0xc5004e441c522fb3, 0x77710069854ee241, 0x39109bb02acbe635]);
        assert_eq!(jump, x_pow_slow(1, 128));
    }

    #[test]
    fn small_jumps_equal_drawing() {
        for c in [0u64, 1, 2, 3, 63, 64, 255, 256, 257, 1000, 4099] {
            let mut a = Xoshiro256PlusPlus::seed_from_u64(c ^ 77);
            let mut b = a.clone();
            advance(&mut a, c);
            for _ in 0..c {
                b.next_u64();
            }
            assert_eq!(a.next_u64(), b.next_u64(), "jump of {c}");
        }
    }

    proptest! {
        #[test]
        fn jumps_equal_rand_xoshiro_jump_ce(c: u64, seed: u64) {
            prop_assert_eq!(x_pow(c), x_pow_slow(c, 0));
            let mut a = Xoshiro256PlusPlus::seed_from_u64(seed);
            let mut b = a.clone();
            advance(&mut a, c);
            b.jump_ce(c, 0);
            prop_assert_eq!(a.state(), b.state());
        }
    }
}
