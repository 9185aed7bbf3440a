//! FP4 E2M1 (the NVFP4 element format) as 4-bit codes in the low nibble of a `u8`.
//!
//! Code = `sign << 3 | index`, index 0..=7 over the magnitudes
//! `{0, 0.5, 1, 1.5, 2, 3, 4, 6}` (1 sign, 2 exponent bits with bias 1, 1 mantissa bit; index 1 is
//! the subnormal 0.5). There is no infinity and no NaN.
//!
//! Encoding (`f32_to_e2m1`): round |x| to the nearest magnitude, ties to the EVEN index, and
//! saturate to 6 — PTX `cvt.rn.satfinite.e2m1x2.f32` semantics (which Hopper lacks; GPU kernels
//! emulate it with exactly these thresholds). The decision points are
//!
//! | \|x\|            | index | value |
//! |------------------|-------|-------|
//! | [0, 0.25]        | 0     | 0     |
//! | (0.25, 0.75)     | 1     | 0.5   |
//! | [0.75, 1.25]     | 2     | 1     |
//! | (1.25, 1.75)     | 3     | 1.5   |
//! | [1.75, 2.5]      | 4     | 2     |
//! | (2.5, 3.5)       | 5     | 3     |
//! | [3.5, 5]         | 6     | 4     |
//! | (5, inf]         | 7     | 6     |
//!
//! (even indices own their closed tie points, odd indices the open intervals).
//!
//! Sign: the sign *bit* of the f32 is copied, so `-0.0` and small negatives that round to zero
//! give code 0x8 (negative zero); both decode to 0. ModelOpt's `cast_fp4` uses `x < 0` instead and
//! gives 0x0 for `-0.0` only; values are equal either way.
//!
//! NaN: E2M1 cannot represent NaN, so this is a choice, documented here and matched by the GPU
//! emulation: **NaN -> 0x7 (+6, positive maximum), regardless of the NaN's sign bit**. Rationale:
//! `.satfinite` in the PTX ISA sends NaN to MAX_NORM when the destination format has no NaN, and
//! a NaN-in-gives-finite-max result keeps the block visibly saturated rather than silently zero.
//! The sign choice (always +) is ours and has not been checked against Blackwell's
//! `cvt.rn.satfinite.e2m1x2.f32` (Hopper has no such instruction). In the NVFP4 path a NaN
//! element also makes the block amax NaN, so the scale is already poisoned upstream of this.
//! Infinities saturate to +-6 with their sign (0x7 / 0xF).

/// The eight E2M1 magnitudes, indexed by the 3 low code bits.
pub const E2M1_VALUES: [f32; 8] = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0];

/// Largest E2M1 magnitude.
pub const E2M1_MAX: f32 = 6.0;

/// f32 -> E2M1 code (0..=15): nearest, ties to even index, saturating; NaN -> 0x7 (+6).
pub fn f32_to_e2m1(x: f32) -> u8 {
    if x.is_nan() {
        return 0x7;
    }
    let sign = if x.is_sign_negative() { 0x8 } else { 0 };
    let a = x.abs();
    let index = if a <= 0.25 {
        0
    } else if a < 0.75 {
        1
    } else if a <= 1.25 {
        2
    } else if a < 1.75 {
        3
    } else if a <= 2.5 {
        4
    } else if a < 3.5 {
        5
    } else if a <= 5.0 {
        6
    } else {
        7
    };
    sign | index
}

/// The E2M1 magnitude index (0..=7) of a finite `a >= 0` by three fused multiply-adds and
/// three minima: the algorithm of the GPU's `nvfp4_quantize` v7 (`e2m1_mag_fma` in
/// `gpu/kernels/nvfp4.cu`), kept here so the CPU tests hold it to [`f32_to_e2m1`].
///
/// Region by region the E2M1 grid is uniform: spacing 0.5 on [0, 2), 1 on [2, 4), 2 on [4, 8).
/// `fma(a, m, 2^23 + o)` rounds `a * m` to an integer once (ulp(2^23) = 1, ties to even) and adds
/// the region's first index `o`: r0 = rint(2a), r1 = 2 + rint(a), r2 = 4 + rint(a / 2). Each is
/// exact on its own region and can only be larger elsewhere (a coarser or shifted grid), so the
/// index is min(r0, r1, r2, 7). `o` is even, so ties to an even integer are ties to an even
/// index. For a >= 2^22 (and inf) every r is >= 2^24 and the clamp gives 7. The result is the
/// float 2^23 + index, so the index is its low 3 bits (the kernel packs them without a
/// subtraction). NaN never reaches it (the kernel sends blocks with a NaN or inf element to its
/// generic path).
pub fn e2m1_index_by_fma(a: f32) -> u8 {
    const M: f32 = 8_388_608.0; // 2^23
    let r0 = a.mul_add(2.0, M);
    let r1 = a.mul_add(1.0, M + 2.0);
    let r2 = a.mul_add(0.5, M + 4.0);
    let r = r0.min(r1).min(r2).min(M + 7.0);
    (r.to_bits() & 7) as u8
}

/// E2M1 code -> f32. Only the low 4 bits of `code` are read.
pub fn e2m1_to_f32(code: u8) -> f32 {
    let v = E2M1_VALUES[(code & 0x7) as usize];
    if code & 0x8 != 0 {
        -v
    } else {
        v
    }
}

/// Packs 4-bit codes two per byte: element `2i` in the LOW nibble of byte `i`, element `2i+1`
/// in the high nibble. An odd length leaves the last byte's high nibble 0. Only the low 4 bits
/// of each code are used. Output length is `ceil(codes.len() / 2)`.
pub fn pack_e2m1(codes: &[u8]) -> Vec<u8> {
    codes
        .chunks(2)
        .map(|pair| {
            let lo = pair[0] & 0xF;
            let hi = pair.get(1).map_or(0, |c| c & 0xF);
            lo | (hi << 4)
        })
        .collect()
}

/// Unpacks the first `n` 4-bit codes from `packed` (layout of [`pack_e2m1`]). If `packed` holds
/// fewer than `n` codes, only the available ones are returned (`min(n, 2 * packed.len())`).
pub fn unpack_e2m1(packed: &[u8], n: usize) -> Vec<u8> {
    let n = n.min(packed.len() * 2);
    (0..n)
        .map(|i| {
            let byte = packed[i / 2];
            if i % 2 == 0 {
                byte & 0xF
            } else {
                byte >> 4
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Brute force: nearest of the eight magnitudes, ties to the even index, sign bit copied.
    fn brute(x: f32) -> u8 {
        // Capped so the f64 distances stay distinct (beyond 5 everything saturates anyway).
        let a = (x.abs() as f64).min(1e9);
        let mut best = 0usize;
        for (i, &v) in E2M1_VALUES.iter().enumerate().skip(1) {
            let d = (a - v as f64).abs();
            let db = (a - E2M1_VALUES[best] as f64).abs();
            if d < db || (d == db && i % 2 == 0) {
                best = i;
            }
        }
        (if x.is_sign_negative() { 8 } else { 0 }) | best as u8
    }

    #[test]
    fn ties_and_thresholds() {
        let cases: [(f32, u8); 16] = [
            (0.25, 0),
            (0.2500001, 1),
            (0.75, 2),
            (0.7499999, 1),
            (1.25, 2),
            (1.2500001, 3),
            (1.75, 4),
            (1.7499999, 3),
            (2.5, 4),
            (2.5000002, 5),
            (3.5, 6),
            (3.4999998, 5),
            (5.0, 6),
            (5.0000005, 7),
            (1e9, 7),
            (f32::INFINITY, 7),
        ];
        for (x, want) in cases {
            assert_eq!(f32_to_e2m1(x), want, "x = {x}");
            assert_eq!(f32_to_e2m1(-x), want | 8, "x = -{x}");
        }
        assert_eq!(f32_to_e2m1(f32::NAN), 0x7);
        assert_eq!(f32_to_e2m1(-f32::NAN), 0x7);
        assert_eq!(f32_to_e2m1(-0.0), 0x8);
        assert_eq!(f32_to_e2m1(-0.1), 0x8);
    }

    /// The GPU v7 encoder ([`e2m1_index_by_fma`], with the sign of x) equals
    /// [`f32_to_e2m1`] on every bit pattern within 2^16 ulps of each threshold and tie, on
    /// every 61st pattern of the whole f32 range, and at the special values. The full 2^32
    /// sweep is `every_f32_by_fma_encoder` (ignored: run it in release).
    #[test]
    fn fma_encoder_matches_near_every_threshold() {
        let check = |b: u32| {
            let x = f32::from_bits(b);
            if x.is_nan() {
                return;
            }
            let sign = if x.is_sign_negative() { 8 } else { 0 };
            assert_eq!(
                sign | e2m1_index_by_fma(x.abs()),
                f32_to_e2m1(x),
                "bits {b:#010x}"
            );
        };
        for t in [
            0.25f32, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0, 2.0, 4.0, 8.0, 1.0, 0.5,
        ] {
            let c = t.to_bits();
            for d in 0..(1u32 << 16) {
                for b in [c + d, c - d, (c + d) | 0x8000_0000, (c - d) | 0x8000_0000] {
                    check(b);
                }
            }
        }
        for b in (0..=u32::MAX).step_by(61) {
            check(b);
        }
        for x in [
            0.0f32,
            -0.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::MAX,
            4194304.0,
            8388608.0,
        ] {
            check(x.to_bits());
        }
    }

    #[test]
    #[ignore = "slow in debug: cargo test --release -p duet-reference every_f32_by_fma -- --ignored"]
    fn every_f32_by_fma_encoder() {
        let bad = (0..=u32::MAX)
            .filter(|&b| {
                let x = f32::from_bits(b);
                !x.is_nan() && {
                    let sign = if x.is_sign_negative() { 8 } else { 0 };
                    sign | e2m1_index_by_fma(x.abs()) != f32_to_e2m1(x)
                }
            })
            .count();
        assert_eq!(bad, 0);
    }

    #[test]
    fn every_code_round_trips() {
        for c in 0..16u8 {
            assert_eq!(f32_to_e2m1(e2m1_to_f32(c)), c, "code {c}");
        }
        assert_eq!(e2m1_to_f32(0xF), -6.0);
        assert_eq!(e2m1_to_f32(0x5), 3.0);
    }

    #[test]
    fn packing_layout() {
        assert_eq!(pack_e2m1(&[0x1, 0x2, 0x3]), vec![0x21, 0x03]);
        assert_eq!(pack_e2m1(&[0xF, 0xA]), vec![0xAF]);
        assert_eq!(unpack_e2m1(&[0x21, 0x03], 3), vec![0x1, 0x2, 0x3]);
        assert_eq!(unpack_e2m1(&[0x21, 0x43], 4), vec![0x1, 0x2, 0x3, 0x4]);
        assert_eq!(unpack_e2m1(&[0x21], 5), vec![0x1, 0x2]);
        assert!(pack_e2m1(&[]).is_empty());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn matches_brute_force(x in -8.0f32..8.0) {
            prop_assert_eq!(f32_to_e2m1(x), brute(x), "x = {}", x);
        }

        #[test]
        fn matches_brute_force_any_bits(b in any::<u32>()) {
            let x = f32::from_bits(b);
            prop_assume!(!x.is_nan());
            prop_assert_eq!(f32_to_e2m1(x), brute(x), "x = {:e}", x);
        }

        #[test]
        fn monotone(a in -10.0f32..10.0, b in -10.0f32..10.0) {
            let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
            prop_assert!(e2m1_to_f32(f32_to_e2m1(lo)) <= e2m1_to_f32(f32_to_e2m1(hi)));
        }

        #[test]
        fn exact_values_round_trip(c in 0u8..16) {
            prop_assert_eq!(f32_to_e2m1(e2m1_to_f32(c)), c);
        }

        #[test]
        fn pack_unpack_round_trip(codes in proptest::collection::vec(0u8..16, 0..65)) {
            let packed = pack_e2m1(&codes);
            prop_assert_eq!(packed.len(), codes.len().div_ceil(2));
            prop_assert_eq!(unpack_e2m1(&packed, codes.len()), codes.clone());
            if codes.len() % 2 == 1 {
                prop_assert_eq!(packed[packed.len() - 1] >> 4, 0);
            }
        }
    }
}
