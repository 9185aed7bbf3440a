//! NVFP4 weights stored on the device for exact use by the model's GEMM / GEMV
//! (`model_gemm_nvfp4w`, `model_gemv_nvfp4w`, `model_gemv1_*` in gpu/kernels/model_ops.cu,
//! view `ModelWNV`).
//!
//! The reference dequantizes an NVFP4 weight as `c * sf / gs` in f32 (`c` the E2M1 value, `sf`
//! the block's E4M3 scale, `gs` the global scale): one rounding, the division. A kernel that
//! divided per weight would spend most of its time dividing; instead a weight is `q1` or `q3`
//! times a power of two ([`nv_value`]), with the pair `(q1, q3) = (sf / gs, 3 sf / gs)` (f32,
//! each rounded once): the E2M1 magnitudes 0.5, 1, 2, 4 are `q1 x 2^-1..2^2`, and 1.5, 3, 6
//! are `q3 x 2^-1..2^1`. Scaling by a power of two is exact for normal numbers, so this is the
//! reference's value bit for bit unless a value or a pair is subnormal. [`pack`] checks every
//! weight against the reference's `dequantize` and refuses a matrix where any differs (the
//! caller then stores f32), so "exact" is verified per matrix, not assumed.
//!
//! The pair depends only on the block's scale byte (the global scale is the matrix's), so the
//! buffer stores the production NVFP4 bytes (a 4-bit code per weight, an E4M3 byte per 16)
//! plus one 256-entry table of pairs per matrix, indexed by the scale byte: 0.5625 bytes per
//! weight (f32: 4, bf16: 2).
//!
//! Layout of the device buffer (bytes, [`Layout`]): the codes (rows x cols/2, two per byte,
//! the even element in the low nibble: `pack_e2m1`), zero padding to a multiple of 16, the
//! scale bytes (rows x cols/16, row-major: the linear layout), zero padding to a multiple of
//! 16, then the table (256 pairs of f32, little endian: entry `b` is the pair of scale byte `b`).

use reference::num::e4m3_bits_to_f32;
use reference::ops::nvfp4_quantize::{dequantize, Nvfp4, SfLayout};

/// Weights per NVFP4 block.
pub const BLOCK: usize = 16;

/// Bytes of the pair table at the end of a buffer (256 scale bytes x two f32).
pub const LUT_BYTES: usize = 256 * 8;

/// The value of E2M1 `code` (4 bits) in a block with pair `(q1, q3)`: the kernel's
/// `model_nv_value`, instruction for instruction.
pub fn nv_value(code: u8, q1: f32, q3: f32) -> f32 {
    let mi = (code & 7) as u32;
    let base = if (0xA8u32 >> mi) & 1 == 1 { q3 } else { q1 };
    let e = (0x2312_0100u32 >> (4 * mi)) & 0xF;
    let mult = if mi != 0 {
        f32::from_bits((126 + e) << 23)
    } else {
        0.0
    };
    let v = base * mult;
    if code & 8 != 0 {
        -v
    } else {
        v
    }
}

/// Where the parts of a `rows x cols` weight's buffer start (bytes) and its length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// The scale bytes.
    pub sf_off: usize,
    /// The pair table.
    pub lut_off: usize,
    /// The whole buffer.
    pub len: usize,
}

impl Layout {
    pub fn of(rows: usize, cols: usize) -> Layout {
        let sf_off = (rows * cols / 2).div_ceil(16) * 16;
        let lut_off = sf_off + (rows * (cols / BLOCK)).div_ceil(16) * 16;
        Layout {
            sf_off,
            lut_off,
            len: lut_off + LUT_BYTES,
        }
    }
}

/// The pair of scale byte `sfb` under global scale `gs`.
pub fn pair(sfb: u8, gs: f32) -> (f32, f32) {
    let sf = e4m3_bits_to_f32(sfb);
    (sf / gs, (3.0 * sf) / gs)
}

/// The pair table of global scale `gs` (every scale byte, [`LUT_BYTES`] bytes).
pub fn lut(gs: f32) -> Vec<u8> {
    (0..=255u8)
        .flat_map(|b| {
            let (q1, q3) = pair(b, gs);
            let mut e = [0u8; 8];
            e[..4].copy_from_slice(&q1.to_le_bytes());
            e[4..].copy_from_slice(&q3.to_le_bytes());
            e
        })
        .collect()
}

/// Weight `i` (row-major) of a packed `rows x cols` buffer, as the kernels read it.
pub fn value_at(buf: &[u8], rows: usize, cols: usize, i: usize) -> f32 {
    let l = Layout::of(rows, cols);
    let byte = buf[i / 2];
    let code = if i.is_multiple_of(2) {
        byte & 0xF
    } else {
        byte >> 4
    };
    let t = l.lut_off + 8 * buf[l.sf_off + i / BLOCK] as usize;
    let f = |o: usize| f32::from_le_bytes([buf[o], buf[o + 1], buf[o + 2], buf[o + 3]]);
    nv_value(code, f(t), f(t + 4))
}

/// The device buffer of a quantized weight (module doc), or `None` when `cols` is not a
/// multiple of [`BLOCK`], the scales are not in the linear layout's size, or any weight's
/// value would differ from the reference's `c * sf / gs` (store f32 then).
pub fn pack(q: &Nvfp4) -> Option<Vec<u8>> {
    let (codes, sf) = pack_parts(q)?;
    let l = Layout::of(q.rows, q.cols);
    let mut out = vec![0u8; l.len];
    out[..codes.len()].copy_from_slice(codes);
    out[l.sf_off..l.sf_off + sf.len()].copy_from_slice(sf);
    out[l.lut_off..].copy_from_slice(&lut(q.global_scale));
    Some(out)
}

/// Per scale byte, a mask of the codes (bit `c`) whose value through the pair equals the
/// reference's under global scale `gs`. The reference dequantizes a weight as `c * sf / gs` of
/// its code and its block's scale byte alone, so this table, made by the reference's own
/// `dequantize` over every (scale byte, code), decides the check of [`pack`] per value instead
/// of per weight (the per-weight check took as long as the quantization: ~50 ms of ~110 for a
/// 2688 x 1024 expert on one core).
pub fn exact_codes(gs: f32) -> Vec<u16> {
    let q = Nvfp4 {
        x_fp4: (0..256)
            .flat_map(|_| [0x10u8, 0x32, 0x54, 0x76, 0x98, 0xBA, 0xDC, 0xFE])
            .collect(),
        sf: (0..=255u8).collect(),
        global_scale: gs,
        rows: 256,
        cols: BLOCK,
    };
    let want = dequantize(&q, SfLayout::Linear);
    (0..=255u8)
        .map(|b| {
            let (q1, q3) = pair(b, gs);
            (0..16u8)
                .filter(|&c| {
                    nv_value(c, q1, q3).to_bits() == want[b as usize * BLOCK + c as usize].to_bits()
                })
                .fold(0u16, |m, c| m | (1 << c))
        })
        .collect()
}

/// The codes and the scale bytes of `q` after the exactness check of [`pack`] (row blocks
/// quantized with one global scale concatenate into the whole matrix's parts).
pub fn pack_parts(q: &Nvfp4) -> Option<(&[u8], &[u8])> {
    let (rows, cols) = (q.rows, q.cols);
    if cols == 0 || !cols.is_multiple_of(BLOCK) {
        return None;
    }
    let kb = cols / BLOCK;
    if q.x_fp4.len() != rows * cols / 2 || q.sf.len() != rows * kb {
        return None;
    }
    // Every weight's value against the reference's (through the per-value table).
    let ok = exact_codes(q.global_scale);
    for (b, &sfb) in q.sf.iter().enumerate() {
        let m = ok[sfb as usize];
        let codes = &q.x_fp4[b * BLOCK / 2..(b + 1) * BLOCK / 2];
        if codes
            .iter()
            .any(|&byte| (m >> (byte & 0xF)) & (m >> (byte >> 4)) & 1 == 0)
        {
            return None;
        }
    }
    Some((&q.x_fp4, &q.sf))
}

#[cfg(test)]
mod tests {
    use super::*;
    use reference::num::e2m1_to_f32;
    use reference::ops::nvfp4_quantize::{quantize, Nvfp4Mode};

    /// The reference's dequantized value of `code` with scale `sf` and global scale `gs`.
    fn reference_value(code: u8, sf: f32, gs: f32) -> f32 {
        e2m1_to_f32(code) * sf / gs
    }

    /// Every code with every finite E4M3 scale, for global scales of every magnitude the
    /// model meets: the pair formula equals `c * sf / gs` wherever the reference value is
    /// normal (or zero); where it differs, it is a subnormal case that `pack` refuses.
    #[test]
    fn pair_formula_equals_the_reference_division() {
        let mut checked = 0u64;
        let mut subnormal_misses = 0u64;
        for gs in [
            1.0f32,
            3.7,
            448.0 * 6.0 / 0.031,
            448.0 * 6.0 / 2.5,
            1e4,
            2.0e5,
            0.013,
        ] {
            for sfb in 0u8..=0x7E {
                let sf = e4m3_bits_to_f32(sfb);
                let (q1, q3) = pair(sfb, gs);
                for c in 0u8..16 {
                    let want = reference_value(c, sf, gs);
                    let got = nv_value(c, q1, q3);
                    checked += 1;
                    if got.to_bits() != want.to_bits() {
                        assert!(
                            want != 0.0 && !want.is_normal() || !q1.is_normal(),
                            "code {c} sf {sf} gs {gs}: {got:e} vs {want:e}"
                        );
                        subnormal_misses += 1;
                    }
                }
            }
        }
        assert!(checked > 10_000);
        eprintln!("{checked} values checked, {subnormal_misses} subnormal cases differ");
    }

    /// A quantized weight packs, its codes land where the kernel reads them, and its pairs
    /// rebuild exactly the reference's dequantization.
    #[test]
    fn pack_rebuilds_the_reference_dequantization() {
        let (rows, cols) = (5usize, 48usize);
        let x: Vec<f32> = (0..rows * cols)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.013 + if i % 7 == 0 { -0.0 } else { 0.0 })
            .collect();
        let q =
            quantize(&x, rows, cols, None, Nvfp4Mode::Kernel, SfLayout::Linear).expect("quantize");
        let want = dequantize(&q, SfLayout::Linear);
        let buf = pack(&q).expect("exact");
        let l = Layout::of(rows, cols);
        assert_eq!(buf.len(), l.len);
        // 0.5625 bytes per weight plus the table and the two paddings.
        assert_eq!(l.sf_off, 128);
        assert_eq!(l.lut_off, 128 + 16);
        assert_eq!(&buf[l.sf_off..l.sf_off + q.sf.len()], &q.sf[..]);
        for (i, w) in want.iter().enumerate() {
            let byte = buf[i / 2];
            let code = if i % 2 == 0 { byte & 0xF } else { byte >> 4 };
            let t = l.lut_off + 8 * q.sf[i / 16] as usize;
            let q1 = f32::from_le_bytes([buf[t], buf[t + 1], buf[t + 2], buf[t + 3]]);
            let q3 = f32::from_le_bytes([buf[t + 4], buf[t + 5], buf[t + 6], buf[t + 7]]);
            assert_eq!(nv_value(code, q1, q3).to_bits(), w.to_bits(), "element {i}");
            assert_eq!(value_at(&buf, rows, cols, i).to_bits(), w.to_bits());
        }
        // Not a multiple of 16 columns, or scales of another size: refused.
        let mut bad = q.clone();
        bad.sf.pop();
        assert!(pack(&bad).is_none());
    }

    /// The per-value table decides exactly what a per-weight comparison with the reference's
    /// `dequantize` decides: random codes and scale bytes under global scales that make some
    /// pairs subnormal (refused) and others not.
    #[test]
    fn per_value_check_equals_the_per_weight_check() {
        let mut z = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut x = z;
            x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            x ^ (x >> 31)
        };
        let (mut accepted, mut refused) = (0, 0);
        for gs in [1.0f32, 2.5e3, 448.0 * 6.0 / 1e-3, 3.0e36, 1e38] {
            for trial in 0..40 {
                let (rows, cols) = (3usize, 32usize);
                let x_fp4: Vec<u8> = (0..rows * cols / 2).map(|_| next() as u8).collect();
                // Small scale bytes in some trials (subnormal pairs under large gs).
                let sf: Vec<u8> = (0..rows * cols / BLOCK)
                    .map(|_| {
                        let b = next() as u8 & 0x7E;
                        if trial % 3 == 0 {
                            b & 0x0F
                        } else {
                            b
                        }
                    })
                    .collect();
                let q = Nvfp4 {
                    x_fp4,
                    sf,
                    global_scale: gs,
                    rows,
                    cols,
                };
                let want = dequantize(&q, SfLayout::Linear);
                let brute = (0..rows * cols).all(|i| {
                    let byte = q.x_fp4[i / 2];
                    let c = if i % 2 == 0 { byte & 0xF } else { byte >> 4 };
                    let (q1, q3) = pair(q.sf[i / BLOCK], gs);
                    nv_value(c, q1, q3).to_bits() == want[i].to_bits()
                });
                assert_eq!(pack_parts(&q).is_some(), brute, "gs {gs} trial {trial}");
                if brute {
                    accepted += 1;
                } else {
                    refused += 1;
                }
            }
        }
        assert!(
            accepted > 20 && refused > 5,
            "{accepted} accepted, {refused} refused"
        );
    }
}
