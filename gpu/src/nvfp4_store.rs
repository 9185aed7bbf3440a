//! NVFP4 weights stored on the device for exact use by the model's GEMM / GEMV
//! (`model_gemm_nvfp4w`, `model_gemv_nvfp4w` in gpu/kernels/model_ops.cu, view `ModelWNV`).
//!
//! The reference dequantizes an NVFP4 weight as `c * sf / gs` in f32 (`c` the E2M1 value, `sf`
//! the block's E4M3 scale, `gs` the global scale): one rounding, the division. A kernel that
//! divided per weight would spend most of its time dividing; instead each 16-weight block
//! carries the pair `(q1, q3) = (sf / gs, 3 sf / gs)` (f32, each rounded once), and a weight is
//! `q1` or `q3` times a power of two ([`nv_value`]): the E2M1 magnitudes 0.5, 1, 2, 4 are
//! `q1 x 2^-1..2^2`, and 1.5, 3, 6 are `q3 x 2^-1..2^1`. Scaling by a power of two is exact
//! for normal numbers, so this is the reference's value bit for bit unless a value or a pair
//! is subnormal. [`pack`] checks every weight against the reference's `dequantize` and refuses a
//! matrix where any differs (the caller then stores f32), so "exact" is verified per matrix,
//! not assumed.
//!
//! Layout of the device buffer (bytes): the codes (rows x cols/2, two per byte, the even
//! element in the low nibble: `pack_e2m1`), zero padding to a multiple of 16, then the pairs
//! (rows x cols/16 x 2 f32, little endian). 1 byte per weight (f32: 4, bf16: 2).

use reference::num::e4m3_bits_to_f32;
use reference::ops::nvfp4_quantize::{dequantize, Nvfp4, SfLayout};

/// Weights per NVFP4 block.
pub const BLOCK: usize = 16;

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

/// Byte offset of the pairs in the buffer of a `rows x cols` weight.
pub fn table_offset(rows: usize, cols: usize) -> usize {
    (rows * cols / 2).div_ceil(16) * 16
}

/// The device buffer of a quantized weight (module doc), or `None` when `cols` is not a
/// multiple of [`BLOCK`], the scales are not in the linear layout's size, or any weight's
/// value would differ from the reference's `c * sf / gs` (store f32 then).
pub fn pack(q: &Nvfp4) -> Option<Vec<u8>> {
    let (rows, cols) = (q.rows, q.cols);
    if cols == 0 || !cols.is_multiple_of(BLOCK) {
        return None;
    }
    let kb = cols / BLOCK;
    if q.x_fp4.len() != rows * cols / 2 || q.sf.len() != rows * kb {
        return None;
    }
    let gs = q.global_scale;
    let off = table_offset(rows, cols);
    let mut out = vec![0u8; off + rows * kb * 8];
    out[..q.x_fp4.len()].copy_from_slice(&q.x_fp4);
    // What the reference makes of these codes (its `dequantize`): every weight is checked
    // against it, bitwise.
    let want = dequantize(q, SfLayout::Linear);
    for (b, &sfb) in q.sf.iter().enumerate() {
        let sf = e4m3_bits_to_f32(sfb);
        let (q1, q3) = (sf / gs, (3.0 * sf) / gs);
        let codes = &q.x_fp4[b * BLOCK / 2..(b + 1) * BLOCK / 2];
        let block = &want[b * BLOCK..(b + 1) * BLOCK];
        let got = codes.iter().flat_map(|&byte| [byte & 0xF, byte >> 4]);
        if got
            .zip(block)
            .any(|(c, w)| nv_value(c, q1, q3).to_bits() != w.to_bits())
        {
            return None;
        }
        let t = off + b * 8;
        out[t..t + 4].copy_from_slice(&q1.to_le_bytes());
        out[t + 4..t + 8].copy_from_slice(&q3.to_le_bytes());
    }
    Some(out)
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
                let (q1, q3) = (sf / gs, (3.0 * sf) / gs);
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
        let off = table_offset(rows, cols);
        assert_eq!(buf.len(), off + rows * cols / 16 * 8);
        for (i, w) in want.iter().enumerate() {
            let byte = buf[i / 2];
            let code = if i % 2 == 0 { byte & 0xF } else { byte >> 4 };
            let t = off + (i / 16) * 8;
            let q1 = f32::from_le_bytes([buf[t], buf[t + 1], buf[t + 2], buf[t + 3]]);
            let q3 = f32::from_le_bytes([buf[t + 4], buf[t + 5], buf[t + 6], buf[t + 7]]);
            assert_eq!(nv_value(code, q1, q3).to_bits(), w.to_bits(), "element {i}");
        }
        // Not a multiple of 16 columns, or scales of another size: refused.
        let mut bad = q.clone();
        bad.sf.pop();
        assert!(pack(&bad).is_none());
    }
}
