//! bfloat16 (1 sign, 8 exponent, 7 mantissa bits) as raw `u16` bits.
//!
//! Algorithm: f32 -> bf16 keeps the top 16 bits of the f32 after round-to-nearest-even on the 16
//! discarded bits (`(b + 0x7FFF + ((b >> 16) & 1)) >> 16`); overflow rounds to +-inf as IEEE
//! requires; bf16 subnormals are kept (no flush). NaN inputs stay NaN and come back *quiet*
//! (mantissa bit 6 set), sign and upper payload kept. This is the behaviour of PyTorch's
//! `tensor.to(torch.bfloat16)`, of CUDA's `__float2bfloat16_rn` and of the `half` crate, which
//! this module wraps for the encode direction. bf16 -> f32 is the exact shift left by 16 for every
//! code, NaN payloads included (signalling NaNs stay signalling on decode), as PyTorch and CUDA's
//! `__bfloat162float` do.

/// f32 -> bf16 bits, round to nearest, ties to even; NaN -> quiet NaN (sign kept).
pub fn f32_to_bf16_bits(x: f32) -> u16 {
    half::bf16::from_f32(x).to_bits()
}

/// bf16 bits -> f32: `f32::from_bits(bits << 16)`, exact for every code including NaNs.
pub fn bf16_bits_to_f32(bits: u16) -> f32 {
    f32::from_bits((bits as u32) << 16)
}

/// Rounds an f32 to the nearest bf16 value (ties to even) and returns it as f32.
pub fn round_bf16(x: f32) -> f32 {
    bf16_bits_to_f32(f32_to_bf16_bits(x))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Independent bit-level model: RNE on the low 16 bits (valid for non-NaN inputs).
    fn model(x: f32) -> u16 {
        let b = x.to_bits();
        let lsb = (b >> 16) & 1;
        (b.wrapping_add(0x7FFF + lsb) >> 16) as u16
    }

    #[test]
    fn every_code_round_trips() {
        for bits in 0..=u16::MAX {
            let f = bf16_bits_to_f32(bits);
            assert_eq!(f.to_bits(), (bits as u32) << 16, "decode of {bits:#06x}");
            if f.is_nan() {
                let back = f32_to_bf16_bits(f);
                assert!(bf16_bits_to_f32(back).is_nan(), "{bits:#06x} lost its NaN");
                assert_ne!(back & 0x0040, 0, "{bits:#06x} -> {back:#06x} is not quiet");
                assert_eq!(back & 0x8000, bits & 0x8000, "NaN sign of {bits:#06x}");
            } else {
                assert_eq!(f32_to_bf16_bits(f), bits, "round trip of {bits:#06x}");
            }
        }
    }

    #[test]
    fn known_values() {
        assert_eq!(f32_to_bf16_bits(1.0), 0x3F80);
        assert_eq!(f32_to_bf16_bits(-2.5), 0xC020);
        // 1 + 2^-8 is the midpoint between 1 and 1 + 2^-7: ties to even (1.0).
        assert_eq!(f32_to_bf16_bits(1.0 + 2f32.powi(-8)), 0x3F80);
        // 1 + 3*2^-8 is the midpoint between 1+2^-7 (odd) and 1+2^-6 (even): rounds up.
        assert_eq!(f32_to_bf16_bits(1.0 + 3.0 * 2f32.powi(-8)), 0x3F82);
        assert_eq!(f32_to_bf16_bits(f32::MAX), 0x7F80); // overflow rounds to +inf
        assert_eq!(f32_to_bf16_bits(f32::NEG_INFINITY), 0xFF80);
        assert_eq!(f32_to_bf16_bits(-0.0), 0x8000);
        // Signalling NaN 0x7F800001 becomes quiet.
        let s = f32_to_bf16_bits(f32::from_bits(0x7F80_0001));
        assert_eq!(s & 0x7FC0, 0x7FC0);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn matches_bit_model(b in any::<u32>()) {
            let x = f32::from_bits(b);
            prop_assume!(!x.is_nan());
            prop_assert_eq!(f32_to_bf16_bits(x), model(x));
        }

        #[test]
        fn nearest_with_ties_to_even(b in any::<u32>()) {
            let x = f32::from_bits(b);
            prop_assume!(x.is_finite());
            let h = f32_to_bf16_bits(x);
            let v = bf16_bits_to_f32(h);
            prop_assume!(v.is_finite());
            let d = (x as f64 - v as f64).abs();
            let mag = h & 0x7FFF;
            for n in [mag.wrapping_sub(1), mag + 1] {
                if n > 0x7F7F { continue; }
                let w = bf16_bits_to_f32((h & 0x8000) | n) as f64;
                let dn = (x as f64 - w).abs();
                prop_assert!(d <= dn, "{x:e} -> {v:e}, but {w:e} is closer");
                if d == dn { prop_assert_eq!(h & 1, 0, "tie not to even for {:e}", x); }
            }
        }

        #[test]
        fn monotone(a in any::<f32>(), b in any::<f32>()) {
            prop_assume!(!a.is_nan() && !b.is_nan());
            let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
            prop_assert!(round_bf16(lo) <= round_bf16(hi));
        }
    }
}
