//! IEEE binary16 (1 sign, 5 exponent, 10 mantissa bits) as raw `u16` bits.
//!
//! Algorithm: f32 -> f16 rounds to nearest, ties to even, with gradual underflow (f16
//! subnormals down to 2^-24 are produced, not flushed) and overflow to +-inf for |x| >= 65520
//! (the midpoint between 65504 and 2^16). NaN inputs stay NaN and come back *quiet* (mantissa
//! bit 9 set), sign and upper payload kept. This matches IEEE 754 `convertFormat`, x86 F16C
//! `vcvtps2ph` with RNE, CUDA `__float2half_rn` and PyTorch `tensor.half()`; the `half` crate,
//! wrapped here, implements exactly that. f16 -> f32 is exact for every number; NaN codes decode
//! to a quiet f32 NaN with sign and payload kept (a signalling f16 NaN comes back quiet, as with
//! F16C `vcvtph2ps` and the `half` crate).

/// f32 -> f16 bits, round to nearest, ties to even; NaN -> quiet NaN (sign kept).
pub fn f32_to_f16_bits(x: f32) -> u16 {
    half::f16::from_f32(x).to_bits()
}

/// f16 bits -> f32 (exact: every f16 is an f32).
pub fn f16_bits_to_f32(bits: u16) -> f32 {
    half::f16::from_bits(bits).to_f32()
}

/// Rounds an f32 to the nearest f16 value (ties to even) and returns it as f32.
pub fn round_f16(x: f32) -> f32 {
    f16_bits_to_f32(f32_to_f16_bits(x))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Independent decode: sign * (subnormal m*2^-24 | (1 + m/1024) * 2^(e-15)).
    fn decode_model(bits: u16) -> f64 {
        let s = if bits & 0x8000 != 0 { -1.0 } else { 1.0 };
        let e = ((bits >> 10) & 0x1F) as i32;
        let m = (bits & 0x3FF) as f64;
        match e {
            0 => s * m * 2f64.powi(-24),
            31 if m == 0.0 => s * f64::INFINITY,
            31 => f64::NAN,
            _ => s * (1.0 + m / 1024.0) * 2f64.powi(e - 15),
        }
    }

    #[test]
    fn every_code_round_trips() {
        for bits in 0..=u16::MAX {
            let f = f16_bits_to_f32(bits);
            let m = decode_model(bits);
            if m.is_nan() {
                assert!(f.is_nan(), "{bits:#06x} should decode to NaN");
                let back = f32_to_f16_bits(f);
                assert!(f16_bits_to_f32(back).is_nan(), "{bits:#06x} lost its NaN");
                assert_ne!(back & 0x0200, 0, "{bits:#06x} -> {back:#06x} is not quiet");
                assert_eq!(back & 0x8000, bits & 0x8000, "NaN sign of {bits:#06x}");
            } else {
                assert_eq!(f as f64, m, "decode of {bits:#06x}");
                assert_eq!(f32_to_f16_bits(f), bits, "round trip of {bits:#06x}");
            }
        }
    }

    #[test]
    fn known_values() {
        assert_eq!(f32_to_f16_bits(1.0), 0x3C00);
        assert_eq!(f32_to_f16_bits(-65504.0), 0xFBFF);
        assert_eq!(f32_to_f16_bits(65519.996), 0x7BFF); // below the midpoint
        assert_eq!(f32_to_f16_bits(65520.0), 0x7C00); // midpoint: ties to even = inf
        assert_eq!(f32_to_f16_bits(2f32.powi(-24)), 0x0001); // smallest subnormal
        assert_eq!(f32_to_f16_bits(2f32.powi(-25)), 0x0000); // tie with 0: even
        assert_eq!(f32_to_f16_bits(3.0 * 2f32.powi(-25)), 0x0002); // tie 1|2: even
        assert_eq!(f32_to_f16_bits(-0.0), 0x8000);
        // 1 + 2^-11 is the midpoint between 1 and 1 + 2^-10: ties to even (1.0).
        assert_eq!(f32_to_f16_bits(1.0 + 2f32.powi(-11)), 0x3C00);
        let s = f32_to_f16_bits(f32::from_bits(0xFF80_0001)); // negative signalling NaN
        assert_eq!(s & 0xFE00, 0xFE00);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn nearest_with_ties_to_even(neg in any::<bool>(), mag in 0u32..0x477F_F000) {
            // Every f32 magnitude below 65520 (0x477FF000), uniformly over the bit patterns.
            let x = f32::from_bits(mag | if neg { 0x8000_0000 } else { 0 });
            let h = f32_to_f16_bits(x);
            let v = f16_bits_to_f32(h) as f64;
            let d = (x as f64 - v).abs();
            let mag = h & 0x7FFF;
            for n in [mag.wrapping_sub(1), mag + 1] {
                if n > 0x7BFF { continue; }
                let w = decode_model((h & 0x8000) | n);
                let dn = (x as f64 - w).abs();
                prop_assert!(d <= dn, "{x:e} -> {v:e}, but {w:e} is closer");
                if d == dn { prop_assert_eq!(h & 1, 0, "tie not to even for {:e}", x); }
            }
        }

        #[test]
        fn nearest_in_f16_range(x in -70000.0f32..70000.0) {
            let v = round_f16(x);
            if x.abs() >= 65520.0 {
                prop_assert!(v.is_infinite() && v.signum() == x.signum());
            } else {
                prop_assert!((v as f64 - x as f64).abs() <= (x.abs() as f64) * 2f64.powi(-11) + 2f64.powi(-25));
            }
        }

        #[test]
        fn monotone(a in any::<f32>(), b in any::<f32>()) {
            prop_assume!(!a.is_nan() && !b.is_nan());
            let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
            prop_assert!(round_f16(lo) <= round_f16(hi));
        }
    }
}
