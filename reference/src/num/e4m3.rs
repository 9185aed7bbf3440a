//! FP8 E4M3, the `fn` variant (`float8_e4m3fn`: finite + NaN, no infinities), as raw `u8` bits.
//!
//! Layout: 1 sign, 4 exponent (bias 7), 3 mantissa bits. Exponent field 0 holds subnormals
//! `m * 2^-9` (m = 1..7, so the smallest positive value is 2^-9); fields 1..15 hold normals
//! `(1 + m/8) * 2^(e-7)`; `S.1111.111` (0x7F / 0xFF) is NaN, so the largest finite value is
//! `S.1111.110` = 448. There is no infinity.
//!
//! Encoding algorithm (both modes): round |x| to the E4M3 grid with round-to-nearest-even on an
//! *unbounded* exponent range above (so 448 < |x| < 464 rounds to 448, |x| = 464 is a tie that
//! goes to the even code 448, and |x| > 464 rounds to the would-be code 0x7F = 480); below 2^-6
//! the grid is the fixed-point subnormal grid with step 2^-9 (RNE; |x| <= 2^-10 gives zero with
//! the sign kept). Then overflow is resolved by [`Saturation`]:
//!
//! * [`Saturation::Saturate`]: finite overflow and +-inf clamp to +-448 (0x7E / 0xFE). This is
//!   PTX `cvt.rn.satfinite.e4m3x2.f32` and the NVFP4 block-scale conversion of TRT-LLM.
//! * [`Saturation::NonSaturating`]: anything that rounds above 448 (|x| > 464) and +-inf become
//!   NaN. This is `ml_dtypes.float8_e4m3fn` and PyTorch's `x.to(torch.float8_e4m3fn)` (c10's
//!   `fp8e4m3fn_from_fp32_value`: `|x| >= 480 -> NaN`, else RNE, which sends (464, 480) to 0x7F).
//!
//! NaN input -> NaN in both modes, encoded as `0x7F | sign` (sign of the input NaN kept, as
//! PyTorch and ml_dtypes do). Negative zero and values rounding to zero keep their sign (0x80).

/// What to do with values whose magnitude rounds above 448.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Saturation {
    /// Clamp finite overflow and +-inf to +-448 (PTX `.satfinite`, TRT-LLM scale factors).
    Saturate,
    /// Overflow and +-inf become NaN (ml_dtypes / PyTorch `float8_e4m3fn` casts).
    NonSaturating,
}

/// Largest finite E4M3 magnitude.
pub const E4M3_MAX: f32 = 448.0;
/// The positive NaN code (the negative one is 0xFF).
pub const E4M3_NAN: u8 = 0x7F;

/// f32 -> E4M3 bits, round to nearest, ties to even code; overflow per `sat` (see module doc).
pub fn f32_to_e4m3_bits(x: f32, sat: Saturation) -> u8 {
    let bits = x.to_bits();
    let sign = ((bits >> 24) & 0x80) as u8;
    if x.is_nan() {
        return sign | E4M3_NAN;
    }
    let abs = bits & 0x7FFF_FFFF;
    let a = f32::from_bits(abs);
    let overflow = match sat {
        Saturation::Saturate => 0x7E,
        Saturation::NonSaturating => E4M3_NAN,
    };
    if a.is_infinite() {
        return sign | overflow;
    }
    let mag = if a < 2f32.powi(-6) {
        // Subnormal grid, step 2^-9. The scaling by 2^9 is exact, so RNE to an integer m in
        // 0..=8 is the whole rounding; m = 8 is the smallest normal 2^-6, whose code is also 8.
        (a * 512.0).round_ties_even() as u32
    } else {
        // Normal: RNE on the 20 mantissa bits dropped from f32's 23; a carry out of the mantissa
        // correctly bumps the exponent. The f32 exponent E maps to the E4M3 field E - 120.
        let lsb = (abs >> 20) & 1;
        let r = (abs + 0x7FFFF + lsb) >> 20;
        r - (120 << 3)
    };
    if mag > 0x7E {
        return sign | overflow;
    }
    sign | mag as u8
}

/// E4M3 bits -> f32 (exact). 0x7F and 0xFF decode to NaN.
pub fn e4m3_bits_to_f32(bits: u8) -> f32 {
    let e = ((bits >> 3) & 0xF) as i32;
    let m = (bits & 7) as f32;
    let mag = if bits & 0x7F == E4M3_NAN {
        f32::NAN
    } else if e == 0 {
        m * 2f32.powi(-9)
    } else {
        (1.0 + m / 8.0) * 2f32.powi(e - 7)
    };
    if bits & 0x80 != 0 {
        -mag
    } else {
        mag
    }
}

/// Rounds an f32 to the nearest E4M3 value (saturating) and returns it as f32.
pub fn round_e4m3(x: f32) -> f32 {
    e4m3_bits_to_f32(f32_to_e4m3_bits(x, Saturation::Saturate))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Brute force over the grid 0x00..=0x7F where the would-be code 0x7F stands for 480 (the
    /// next value of an unbounded exponent range): nearest value, ties to the even code.
    fn brute(x: f32, sat: Saturation) -> u8 {
        let sign = if x.is_sign_negative() { 0x80 } else { 0 };
        if x.is_nan() {
            return sign | 0x7F;
        }
        // Capped so the f64 distances stay distinct (far beyond 480 the answer is the same).
        let a = (x.abs() as f64).min(1e9);
        let mut best = 0u8;
        let mut best_d = f64::INFINITY;
        for c in 0u8..=0x7F {
            let v = if c == 0x7F {
                480.0
            } else {
                e4m3_bits_to_f32(c) as f64
            };
            let d = (a - v).abs();
            if d < best_d || (d == best_d && c % 2 == 0) {
                best = c;
                best_d = d;
            }
        }
        if best == 0x7F || x.is_infinite() {
            best = match sat {
                Saturation::Saturate => 0x7E,
                Saturation::NonSaturating => 0x7F,
            };
        }
        sign | best
    }

    #[test]
    fn every_code_round_trips() {
        for c in 0..=255u8 {
            let v = e4m3_bits_to_f32(c);
            for sat in [Saturation::Saturate, Saturation::NonSaturating] {
                assert_eq!(
                    f32_to_e4m3_bits(v, sat),
                    c,
                    "code {c:#04x} value {v:e} {sat:?}"
                );
            }
        }
    }

    #[test]
    fn decode_table_points() {
        assert_eq!(e4m3_bits_to_f32(0x7E), 448.0);
        assert_eq!(e4m3_bits_to_f32(0xFE), -448.0);
        assert_eq!(e4m3_bits_to_f32(0x01), 2f32.powi(-9));
        assert_eq!(e4m3_bits_to_f32(0x07), 7.0 * 2f32.powi(-9));
        assert_eq!(e4m3_bits_to_f32(0x08), 2f32.powi(-6));
        assert_eq!(e4m3_bits_to_f32(0x38), 1.0);
        assert_eq!(e4m3_bits_to_f32(0x3F), 1.875);
        assert!(e4m3_bits_to_f32(0x7F).is_nan() && e4m3_bits_to_f32(0xFF).is_nan());
        // Strictly increasing over the positive codes.
        for c in 1..0x7Fu8 {
            assert!(
                e4m3_bits_to_f32(c) > e4m3_bits_to_f32(c - 1),
                "code {c:#04x}"
            );
        }
    }

    #[test]
    fn overflow_and_special_values() {
        use Saturation::*;
        assert_eq!(f32_to_e4m3_bits(449.0, Saturate), 0x7E);
        assert_eq!(f32_to_e4m3_bits(449.0, NonSaturating), 0x7E); // rounds down to 448
        assert_eq!(f32_to_e4m3_bits(464.0, NonSaturating), 0x7E); // tie -> even 448
        assert_eq!(f32_to_e4m3_bits(464.0001, NonSaturating), 0x7F); // rounds to 480: NaN
        assert_eq!(f32_to_e4m3_bits(-464.0001, NonSaturating), 0xFF);
        assert_eq!(f32_to_e4m3_bits(-1e30, Saturate), 0xFE);
        assert_eq!(f32_to_e4m3_bits(f32::INFINITY, Saturate), 0x7E);
        assert_eq!(f32_to_e4m3_bits(f32::NEG_INFINITY, NonSaturating), 0xFF);
        assert_eq!(f32_to_e4m3_bits(f32::NAN, Saturate), 0x7F);
        assert_eq!(f32_to_e4m3_bits(-f32::NAN, Saturate), 0xFF);
        // Subnormal ties: 2^-10 is halfway between 0 and 2^-9 -> 0; 3*2^-10 -> 2*2^-9.
        assert_eq!(f32_to_e4m3_bits(2f32.powi(-10), Saturate), 0x00);
        assert_eq!(f32_to_e4m3_bits(-2f32.powi(-10), Saturate), 0x80);
        assert_eq!(f32_to_e4m3_bits(3.0 * 2f32.powi(-10), Saturate), 0x02);
        assert_eq!(f32_to_e4m3_bits(1.1 * 2f32.powi(-10), Saturate), 0x01);
        // 15*2^-10 is the tie between 7*2^-9 (odd) and 2^-6 (code 8, even).
        assert_eq!(f32_to_e4m3_bits(15.0 * 2f32.powi(-10), Saturate), 0x08);
        // Normal ties: 1 + 1/16 -> 1.0 (even), 1 + 3/16 -> 1.25 (even code 0x3A).
        assert_eq!(f32_to_e4m3_bits(1.0625, Saturate), 0x38);
        assert_eq!(f32_to_e4m3_bits(1.1875, Saturate), 0x3A);
        // 1.9375 rounds up across the binade to 2.0.
        assert_eq!(f32_to_e4m3_bits(1.9375, Saturate), 0x40);
        assert_eq!(f32_to_e4m3_bits(f32::from_bits(1), Saturate), 0x00);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn matches_brute_force_bits(b in any::<u32>()) {
            let x = f32::from_bits(b);
            for sat in [Saturation::Saturate, Saturation::NonSaturating] {
                prop_assert_eq!(f32_to_e4m3_bits(x, sat), brute(x, sat), "x = {:e} {:?}", x, sat);
            }
        }

        #[test]
        fn matches_brute_force_in_range(x in -600.0f32..600.0) {
            for sat in [Saturation::Saturate, Saturation::NonSaturating] {
                prop_assert_eq!(f32_to_e4m3_bits(x, sat), brute(x, sat), "x = {:e} {:?}", x, sat);
            }
        }

        #[test]
        fn matches_brute_force_small(x in -0.05f32..0.05) {
            prop_assert_eq!(f32_to_e4m3_bits(x, Saturation::Saturate), brute(x, Saturation::Saturate));
        }

        #[test]
        fn monotone(a in -1000.0f32..1000.0, b in -1000.0f32..1000.0) {
            let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
            prop_assert!(round_e4m3(lo) <= round_e4m3(hi), "{} {}", lo, hi);
        }
    }
}
