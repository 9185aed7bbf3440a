//! fp32 -> fp16 stochastic rounding from 13 random bits: the software algorithm of SPEC.md
//! ("Selective state update: stochastic rounding"), which Hopper kernels use for fp16 SSU state
//! and which the GPU kernels implement bit for bit.
//!
//! Algorithm, read literally from SPEC.md, with `b = x.to_bits()`:
//!
//! 1. `mag = b & 0x7FFF_FFFF`. If the ORIGINAL exponent field `(mag >> 23)` is 0xFF the result
//!    is NaN `0x7E00` when the original mantissa is non-zero, else Inf `0x7C00`. (Classifying
//!    before the addition matters: `inf + r` would otherwise look like a NaN, and a NaN's
//!    mantissa plus `r` could carry out of the field.)
//! 2. `y = mag + (r & 0x1FFF)`: the 13 random bits are added under the 13 mantissa bits that
//!    f16 drops, so the addition carries into the kept bits (and possibly into the exponent) with
//!    probability equal to the dropped fraction: unbiased rounding. Only the low 13 bits of `r`
//!    are read.
//! 3. Truncate `y` to f16, with the exponent tests applied to `y` (AFTER the addition, so a carry
//!    into the exponent is honoured): `e = y >> 23`; `e > 142` -> Inf `0x7C00` (no saturation);
//!    `e < 113` -> 0 (no f16 subnormals: magnitudes that end below 2^-14 flush to zero);
//!    otherwise `((e - 112) << 10) | ((y & 0x7F_FFFF) >> 13)`.
//! 4. The sign bit of `x` is OR'd back (so -NaN -> 0xFE00, -inf -> 0xFC00, tiny negatives -> -0).
//!
//! Consequences: for `|x|` in the f16 normal range `[2^-14, 65504]` the result is the
//! truncation of `x` or the next f16 up (in magnitude), and the mean over all 8192 values of
//! `r` is exactly `x`. Near the ends it is not unbiased (flush below 2^-14, Inf above 65504).
//! This is NOT Blackwell's `cvt.rs.satfinite.f16x2.f32`, which keeps f16 subnormals and
//! saturates to +-65504; the SPEC algorithm is the one duet's kernels share.

/// Stochastically rounds `x` to f16 bits using the low 13 bits of `rand` (see the module doc).
pub fn stochastic_round_f16_bits(x: f32, rand: u32) -> u16 {
    let bits = x.to_bits();
    let sign = ((bits >> 16) & 0x8000) as u16;
    let mag = bits & 0x7FFF_FFFF;
    if mag >> 23 == 0xFF {
        return sign | if mag & 0x7F_FFFF != 0 { 0x7E00 } else { 0x7C00 };
    }
    // mag <= 0x7F7F_FFFF here, so the sum cannot overflow 32 bits.
    let y = mag + (rand & 0x1FFF);
    let e = y >> 23;
    let h = if e > 142 {
        0x7C00
    } else if e < 113 {
        0
    } else {
        ((e - 112) << 10) | ((y & 0x7F_FFFF) >> 13)
    };
    sign | h as u16
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::num::f16::f16_bits_to_f32;
    use crate::num::philox::philox_from_seed_offset;
    use proptest::prelude::*;

    const F16_MIN_NORMAL: f32 = 6.103_515_6e-5; // 2^-14
    const F16_MAX: f32 = 65504.0;

    /// Independent truncation toward zero onto the f16 normal grid (for |x| in the normal range).
    fn trunc_f16(x: f32) -> f64 {
        let a = x.abs() as f64;
        let ulp = 2f64.powi(a.log2().floor() as i32 - 10);
        (a / ulp).floor() * ulp * if x < 0.0 { -1.0 } else { 1.0 }
    }

    fn normal_range() -> impl Strategy<Value = f32> {
        (any::<bool>(), F16_MIN_NORMAL..=F16_MAX).prop_map(|(neg, a)| if neg { -a } else { a })
    }

    #[test]
    fn special_values() {
        let cases: [(f32, u32, u16); 14] = [
            (f32::NAN, 0, 0x7E00),
            (-f32::NAN, 0x1FFF, 0xFE00),
            (f32::from_bits(0x7F80_0001), 0x1FFF, 0x7E00), // NaN with the low mantissa bit
            (f32::INFINITY, 0x1FFF, 0x7C00),               // inf + r stays inf, not NaN
            (f32::NEG_INFINITY, 0, 0xFC00),
            (f32::MAX, 0x1FFF, 0x7C00), // carries into exponent 0xFF: still Inf, not NaN
            (F16_MAX, 0x1FFF, 0x7BFF),  // exactly representable: never rounds up
            (65505.0, 0x1FFF, 0x7C00),  // rounds up past the max: Inf (no saturation)
            (65505.0, 0, 0x7BFF),
            (f32::from_bits(0x387F_FFFF), 0, 0x0000), // just below 2^-14: flushed
            (f32::from_bits(0x387F_FFFF), 1, 0x0400), // carry into exponent 113: 2^-14
            (-1e-6, 0x1FFF, 0x8000),                  // f16-subnormal magnitude: signed zero
            (1.0, 0x1FFF, 0x3C00),
            (-3.3, 0, 0xC299),
        ];
        for (x, r, want) in cases {
            let got = stochastic_round_f16_bits(x, r);
            assert_eq!(
                got, want,
                "x = {x:e} r = {r:#x}: got {got:#06x} want {want:#06x}"
            );
        }
        // 1 + 2^-11 (half an f16 ulp): rounds up for r >= 4096 only.
        let x = 1.0 + 2f32.powi(-11);
        assert_eq!(stochastic_round_f16_bits(x, 4095), 0x3C00);
        assert_eq!(stochastic_round_f16_bits(x, 4096), 0x3C01);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn zero_rand_is_truncation(x in normal_range()) {
            prop_assert_eq!(f16_bits_to_f32(stochastic_round_f16_bits(x, 0)) as f64, trunc_f16(x));
        }

        #[test]
        fn result_is_one_of_the_two_neighbours(x in normal_range(), r in any::<u32>()) {
            let down = stochastic_round_f16_bits(x, 0);
            let got = stochastic_round_f16_bits(x, r);
            if f16_bits_to_f32(down) == x {
                prop_assert_eq!(got, down, "representable x = {} must not move", x);
            } else {
                prop_assert!(got == down || got == down + 1, "x = {x:e} r = {r:#x} got {got:#06x} down {down:#06x}");
            }
            // Only the low 13 bits of r matter.
            prop_assert_eq!(got, stochastic_round_f16_bits(x, r & 0x1FFF));
        }

        #[test]
        fn monotone_in_rand(x in normal_range(), r1 in 0u32..0x2000, r2 in 0u32..0x2000) {
            let (lo, hi) = if r1 <= r2 { (r1, r2) } else { (r2, r1) };
            let a = f16_bits_to_f32(stochastic_round_f16_bits(x, lo)).abs();
            let b = f16_bits_to_f32(stochastic_round_f16_bits(x, hi)).abs();
            prop_assert!(a <= b);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Exact unbiasedness: summing the result over all 8192 values of r gives 8192 * x
        /// exactly (f64 holds the sum without error).
        #[test]
        fn mean_over_all_rand_is_exactly_x(x in normal_range()) {
            let sum: f64 = (0..0x2000u32)
                .map(|r| f16_bits_to_f32(stochastic_round_f16_bits(x, r)) as f64)
                .sum();
            prop_assert_eq!(sum, 8192.0 * x as f64, "x = {:e}", x);
        }
    }

    /// Fixed-seed Monte Carlo with Philox-drawn r (one 13-bit draw per output word): the mean is
    /// within 5 standard errors of x, while truncation and round-to-nearest miss by ~0.3 ulp,
    /// i.e. > 100 standard errors, so a biased rounding cannot pass.
    #[test]
    fn philox_driven_mean_is_unbiased() {
        const N: usize = 1 << 16;
        let rands: Vec<u32> = (0..(N / 4) as u64)
            .flat_map(|off| philox_from_seed_offset(0xD1E7_5EED, off, 10))
            .map(|w| w & 0x1FFF)
            .collect();
        for (base, frac) in [
            (1.0f32, 0.3f64),
            (-37.25, 0.7),
            (1000.0, 0.3),
            (100.0 / 8192.0, 0.7),
        ] {
            let ulp = 2f64.powi((base.abs() as f64).log2().floor() as i32 - 10);
            let x = (base as f64 + base.signum() as f64 * frac * ulp) as f32;
            let p = (x.to_bits() & 0x1FFF) as f64 / 8192.0;
            let se = ulp * (p * (1.0 - p) / N as f64).sqrt();
            let mean = rands
                .iter()
                .map(|&r| f16_bits_to_f32(stochastic_round_f16_bits(x, r)) as f64)
                .sum::<f64>()
                / N as f64;
            let x = x as f64;
            assert!(
                (mean - x).abs() <= 5.0 * se,
                "x = {x}: mean {mean}, se {se}"
            );
            let trunc = f16_bits_to_f32(stochastic_round_f16_bits(x as f32, 0)) as f64;
            let rne = crate::num::f16::round_f16(x as f32) as f64;
            assert!(
                (trunc - x).abs() > 100.0 * se,
                "truncation would pass for x = {x}"
            );
            assert!(
                (rne - x).abs() > 100.0 * se,
                "round-to-nearest would pass for x = {x}"
            );
        }
    }
}
