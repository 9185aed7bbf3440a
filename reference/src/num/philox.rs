//! Philox-4x32 counter-based random numbers (Salmon et al., SC11; Random123 `philox4x32_R`).
//!
//! One round, with `A = 0xD2511F53`, `B = 0xCD9E8D57` and 32x32->64-bit products:
//!
//! ```text
//! (c0, c1, c2, c3) <- (hi(B*c2) ^ c1 ^ k0,  lo(B*c2),  hi(A*c0) ^ c3 ^ k1,  lo(A*c0))
//! ```
//!
//! Between consecutive rounds (not after the last) the key is bumped by the Weyl constants:
//! `k0 += 0x9E3779B9`, `k1 += 0xBB67AE85` (wrapping). `rounds` is free: Random123 and cuRAND
//! default to 10, Nemotron recipes use 5 (SPEC.md). Checked against Random123's known-answer
//! vectors for 7 and 10 rounds.
//!
//! [`philox_from_seed_offset`] fixes duet's mapping from a `(seed, offset)` pair (SPEC.md):
//! key = (seed lo 32, seed hi 32), counter = (offset lo 32, offset hi 32, 0, 0). Which of the four
//! output words feeds which element is the caller's documented choice (see the SSU op).

/// Multiplier applied to counter word 0.
pub const PHILOX_M0: u32 = 0xD251_1F53;
/// Multiplier applied to counter word 2.
pub const PHILOX_M1: u32 = 0xCD9E_8D57;
/// Key increment for key word 0 (golden ratio).
pub const PHILOX_W0: u32 = 0x9E37_79B9;
/// Key increment for key word 1 (sqrt(3) - 1).
pub const PHILOX_W1: u32 = 0xBB67_AE85;
/// Default number of rounds (Random123, cuRAND).
pub const PHILOX_DEFAULT_ROUNDS: u32 = 10;

fn mulhilo(a: u32, b: u32) -> (u32, u32) {
    let p = a as u64 * b as u64;
    ((p >> 32) as u32, p as u32)
}

fn round(c: [u32; 4], k: [u32; 2]) -> [u32; 4] {
    let (hi0, lo0) = mulhilo(PHILOX_M0, c[0]);
    let (hi1, lo1) = mulhilo(PHILOX_M1, c[2]);
    [hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0]
}

/// Philox-4x32 with `rounds` rounds (0 rounds returns the counter unchanged).
pub fn philox4x32(counter: [u32; 4], key: [u32; 2], rounds: u32) -> [u32; 4] {
    let mut c = counter;
    let mut k = key;
    for i in 0..rounds {
        if i > 0 {
            k = [k[0].wrapping_add(PHILOX_W0), k[1].wrapping_add(PHILOX_W1)];
        }
        c = round(c, k);
    }
    c
}

/// Philox-4x32 of duet's `(seed, offset)` pair: key = (seed lo, seed hi),
/// counter = (offset lo, offset hi, 0, 0).
pub fn philox_from_seed_offset(seed: u64, offset: u64, rounds: u32) -> [u32; 4] {
    philox4x32(
        [offset as u32, (offset >> 32) as u32, 0, 0],
        [seed as u32, (seed >> 32) as u32],
        rounds,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const PI_CTR: [u32; 4] = [0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344];
    const PI_KEY: [u32; 2] = [0xa4093822, 0x299f31d0];
    const ONES_CTR: [u32; 4] = [u32::MAX; 4];
    const ONES_KEY: [u32; 2] = [u32::MAX; 2];

    /// (rounds, counter, key, expected output).
    type Kat = (u32, [u32; 4], [u32; 2], [u32; 4]);

    /// Random123 `kat_vectors` entries for philox4x32.
    #[test]
    fn random123_known_answers() {
        let cases: [Kat; 6] = [
            (
                7,
                [0; 4],
                [0; 2],
                [0x5f6fb709, 0x0d893f64, 0x4f121f81, 0x4f730a48],
            ),
            (
                7,
                ONES_CTR,
                ONES_KEY,
                [0x5207ddc2, 0x45165e59, 0x4d8ee751, 0x8c52f662],
            ),
            (
                7,
                PI_CTR,
                PI_KEY,
                [0x4dfccaba, 0x190a87f0, 0xc47362ba, 0xb6b5242a],
            ),
            (
                10,
                [0; 4],
                [0; 2],
                [0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8],
            ),
            (
                10,
                ONES_CTR,
                ONES_KEY,
                [0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd],
            ),
            (
                10,
                PI_CTR,
                PI_KEY,
                [0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1],
            ),
        ];
        for (rounds, ctr, key, want) in cases {
            let got = philox4x32(ctr, key, rounds);
            assert_eq!(got, want, "rounds {rounds} ctr {ctr:08x?} key {key:08x?}");
        }
    }

    #[test]
    fn seed_offset_mapping() {
        let seed = 0x0123_4567_89ab_cdef_u64;
        let offset = 0xfedc_ba98_7654_3210_u64;
        assert_eq!(
            philox_from_seed_offset(seed, offset, 5),
            philox4x32(
                [0x7654_3210, 0xfedc_ba98, 0, 0],
                [0x89ab_cdef, 0x0123_4567],
                5
            )
        );
        assert_eq!(philox4x32(PI_CTR, PI_KEY, 0), PI_CTR);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// R rounds = one more round on top of R-1 rounds, with the key bumped R-1 times.
        #[test]
        fn rounds_compose(c in any::<[u32; 4]>(), k in any::<[u32; 2]>(), r in 1u32..12) {
            let prev = philox4x32(c, k, r - 1);
            let kb = [
                k[0].wrapping_add(PHILOX_W0.wrapping_mul(r - 1)),
                k[1].wrapping_add(PHILOX_W1.wrapping_mul(r - 1)),
            ];
            prop_assert_eq!(philox4x32(c, k, r), round(prev, kb));
        }

        /// Flipping one counter bit changes the 10-round output (it is a bijection of the counter).
        #[test]
        fn counter_bit_flip_changes_output(c in any::<[u32; 4]>(), k in any::<[u32; 2]>(), bit in 0u32..128) {
            let mut c2 = c;
            c2[(bit / 32) as usize] ^= 1 << (bit % 32);
            prop_assert_ne!(philox4x32(c, k, 10), philox4x32(c2, k, 10));
        }
    }

    /// Output bits are balanced: over 4096 counters each of the 128 output bits is set about
    /// half the time (binomial sd = 32; allow 6 sd).
    #[test]
    fn output_bits_balanced() {
        let mut counts = [0u32; 128];
        for off in 0..4096u64 {
            let w = philox_from_seed_offset(0x5eed, off, 10);
            for (i, word) in w.iter().enumerate() {
                for b in 0..32 {
                    counts[i * 32 + b] += (word >> b) & 1;
                }
            }
        }
        for (i, &n) in counts.iter().enumerate() {
            assert!(
                (n as i64 - 2048).abs() < 192,
                "bit {i} set {n} times of 4096"
            );
        }
    }
}
