//! `nvfp4_quantize`: NVFP4 block quantization (16 elements per block, one FP8 E4M3 scale per
//! block, one fp32 global scale per tensor, E2M1 elements packed two per byte).
//!
//! # Algorithm (per block of 16 consecutive elements of a row)
//!
//! Both modes compute, in f32, the TRT-LLM / FlashInfer order (SPEC.md, NVFP4):
//!
//! ```text
//! vecMax   = max |x| over the block              (exact: a max of input-dtype values)
//! SF       = global * (vecMax * R(6))            (f32 multiplies, in this order)
//! sf       = e4m3(SF)                            (the stored byte)
//! outScale = float(sf) != 0 ? R(float(sf) * R(global)) : 0
//! code_i   = e2m1(x_i * outScale)                (nearest, ties to even, saturate to +-6)
//! ```
//!
//! | mode                 | `R(v)`                              | `e4m3` overflow         | matches |
//! |----------------------|-------------------------------------|-------------------------|---------|
//! | [`Nvfp4Mode::Kernel`] (default) | `rcp.approx.ftz.f32` ([`rcp_approx_ftz`]) | saturate to 448 (`__nv_fp8_e4m3`, satfinite) | TRT-LLM `cvt_warp_*_to_fp4` |
//! | [`Nvfp4Mode::Exact`] | correctly rounded `1/v` (`v == 0 -> 0`) | NaN (torch `.to(float8_e4m3fn)`) | FlashInfer `tests/test_helpers/utils_fp4.ref_fp4_quant` |
//!
//! The zero test is on the *rounded* scale `float(sf)`: TRT-LLM overwrites `SFValue` with
//! `float(sf)` before testing it (older `quantization_utils.cuh`; newer versions test
//! `vecMax != 0`, which differs only for blocks whose scale underflows E4M3 to 0: those get
//! codes of +-6 there, 0 here; they dequantize to 0 either way). FlashInfer's reference gives
//! 0 the same way (`get_reciprocal(0) = 0`).
//!
//! All-zero blocks: `sf = 0` and codes 0 in BOTH modes. ModelOpt's quantizer instead stores
//! `sf = e4m3(1.0)` for all-zero blocks (codes still 0); duet follows FlashInfer's reference
//! here because it is the reference the `exact` mode is checked against.
//!
//! `global_scale`, when not given: `448 * 6 / amax` as an f32 division, `amax = max |x|` over
//! the whole tensor (the upstream recipe; checkpoints store the inverse). An amax of 0, inf or
//! NaN cannot give a scale and is an error (pass `global_scale` explicitly). A given global
//! scale must be finite and > 0.
//!
//! # NaN / Inf policy (within a block)
//!
//! * `kernel`: `vecMax` is the NaN-*ignoring* max of CUDA's `fmaxf` / `__hmax2` (a NaN is
//!   dropped unless every element of the block is NaN). NaN elements get code 0x7 (+6, see
//!   [`crate::num::e2m1`]); `+-inf` elements make `vecMax = inf`, `sf = 0x7E` (448, saturated),
//!   and the infinities become +-6 while the other elements of the block round towards 0. An
//!   all-NaN block gets `sf = 0x7F` (NaN) and codes 0x7.
//! * `exact`: `vecMax` propagates NaN (`torch.max`), and `inf / 6 * global` overflows the
//!   non-saturating E4M3 cast: any NaN or inf in a block gives `sf = 0x7F` (NaN) and ALL codes
//!   of the block 0 (FlashInfer's `cast_to_fp4x2` leaves NaN at code 0). A finite scale that
//!   rounds above 448 (only possible with a user `global_scale` larger than `448*6/amax`)
//!   also gives `sf = 0x7F` and codes 0.
//!
//! # Layouts of the scale factors
//!
//! * [`SfLayout::Linear`]: `sf[m * (cols/16) + k]`, shape `[rows, cols/16]`.
//! * [`SfLayout::Swizzled128x4`]: rows padded to a multiple of 128 and scale columns to a
//!   multiple of 4; shape `[round_up(rows, 128), round_up(cols/16, 4)]` (2-D, as FlashInfer's
//!   `recover_swizzled_scales` reshapes it); scale `(m, k)` lives at
//!   `mTile*(kTiles*512) + kTile*512 + (m%32)*16 + ((m%128)/32)*4 + (k%4)` with
//!   `mTile = m/128, kTile = k/4, kTiles = padded cols / 4`. Padding is written as 0.

use crate::num::{
    e2m1_to_f32, e4m3_bits_to_f32, f32_to_e2m1, f32_to_e4m3_bits, pack_e2m1, rcp_approx_ftz,
    unpack_e2m1, Saturation,
};
use crate::op::{self, ArgSpec, Inputs, OpDef, OpError, ParamKind, ParamSpec, Params};
use crate::tensor::{DType, Tensor, TensorMap};

/// Elements per NVFP4 block.
pub const NVFP4_BLOCK: usize = 16;

/// How the block scales are computed (module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Nvfp4Mode {
    /// TRT-LLM's kernel: `rcp.approx.ftz.f32` reciprocals, saturating E4M3 scales.
    Kernel,
    /// FlashInfer's reference quantizer: correctly rounded reciprocals, torch's
    /// non-saturating E4M3 cast.
    Exact,
}

impl Nvfp4Mode {
    /// `kernel` or `exact`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "kernel" => Some(Nvfp4Mode::Kernel),
            "exact" => Some(Nvfp4Mode::Exact),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Nvfp4Mode::Kernel => "kernel",
            Nvfp4Mode::Exact => "exact",
        }
    }
}

/// Where the scale of block `(m, k)` is stored (module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SfLayout {
    /// `[rows, cols/16]` row-major.
    Linear,
    /// The 128x4 swizzle of the tensor-core GEMMs, rows padded to 128, scale columns to 4.
    Swizzled128x4,
}

impl SfLayout {
    /// `linear` or `swizzled128x4`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "linear" => Some(SfLayout::Linear),
            "swizzled128x4" | "swizzled" => Some(SfLayout::Swizzled128x4),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            SfLayout::Linear => "linear",
            SfLayout::Swizzled128x4 => "swizzled128x4",
        }
    }
    /// 2-D shape of the scale tensor for a `[rows, cols]` input (`cols % 16 == 0`).
    pub fn shape(self, rows: usize, cols: usize) -> [usize; 2] {
        let kb = cols / NVFP4_BLOCK;
        match self {
            SfLayout::Linear => [rows, kb],
            SfLayout::Swizzled128x4 => [rows.div_ceil(128) * 128, kb.div_ceil(4) * 4],
        }
    }
    /// Number of scale bytes for a `[rows, cols]` input.
    pub fn len(self, rows: usize, cols: usize) -> usize {
        let [a, b] = self.shape(rows, cols);
        a * b
    }
    /// Offset of the scale of row `m`, block column `k`, for an input with `cols` columns.
    pub fn offset(self, m: usize, k: usize, cols: usize) -> usize {
        let kb = cols / NVFP4_BLOCK;
        match self {
            SfLayout::Linear => m * kb + k,
            SfLayout::Swizzled128x4 => {
                let k_tiles = kb.div_ceil(4);
                (m / 128) * (k_tiles * 512)
                    + (k / 4) * 512
                    + (m % 32) * 16
                    + ((m % 128) / 32) * 4
                    + (k % 4)
            }
        }
    }
}

/// An NVFP4 tensor: `x_fp4` packed codes `[rows, cols/2]` (element `2i` in the LOW nibble),
/// `sf` E4M3 bytes in some [`SfLayout`] (flat), and the fp32 global scale.
#[derive(Clone, Debug, PartialEq)]
pub struct Nvfp4 {
    pub x_fp4: Vec<u8>,
    pub sf: Vec<u8>,
    pub global_scale: f32,
    pub rows: usize,
    pub cols: usize,
}

/// `448 * 6 / amax` (f32 division), `amax = max|x|` propagating NaN; errors when it cannot
/// give a finite positive scale.
pub fn global_scale_from_amax(x: &[f32]) -> Result<f32, String> {
    let mut amax = 0.0f32;
    for &v in x {
        if v.is_nan() {
            amax = f32::NAN;
            break;
        }
        amax = amax.max(v.abs());
    }
    if !(amax.is_finite() && amax > 0.0) {
        return Err(format!(
            "cannot derive global_scale = 448*6/amax from amax = {amax} (the input is all zeros or \
             holds inf/NaN); pass global_scale explicitly"
        ));
    }
    let g = (448.0f32 * 6.0f32) / amax;
    if !g.is_finite() {
        return Err(format!(
            "global_scale = 448*6/amax overflows f32 for amax = {amax:e}; pass global_scale explicitly"
        ));
    }
    Ok(g)
}

/// Quantizes one block; returns (sf byte, 16 codes).
fn quantize_block(block: &[f32], global: f32, mode: Nvfp4Mode, codes: &mut Vec<u8>) -> u8 {
    let exact_rcp = |v: f32| if v == 0.0 { 0.0 } else { 1.0 / v };
    let (sf, sf_val, rcp_g) = match mode {
        Nvfp4Mode::Kernel => {
            // fmaxf / __hmax2: a NaN operand is dropped.
            let vec_max = block.iter().fold(f32::NAN, |m, v| m.max(v.abs()));
            let sf_f = global * (vec_max * rcp_approx_ftz(6.0));
            let sf = f32_to_e4m3_bits(sf_f, Saturation::Saturate);
            (sf, e4m3_bits_to_f32(sf), rcp_approx_ftz(global))
        }
        Nvfp4Mode::Exact => {
            // torch.max propagates NaN.
            let vec_max = if block.iter().any(|v| v.is_nan()) {
                f32::NAN
            } else {
                block.iter().fold(0.0f32, |m, v| m.max(v.abs()))
            };
            // Python's 1/6 meets an f32 tensor: rounded to f32.
            let sf_f = global * (vec_max * (1.0f32 / 6.0));
            let sf = f32_to_e4m3_bits(sf_f, Saturation::NonSaturating);
            (sf, e4m3_bits_to_f32(sf), exact_rcp(global))
        }
    };
    let out_scale = if sf_val != 0.0 {
        match mode {
            Nvfp4Mode::Kernel => rcp_approx_ftz(sf_val * rcp_g),
            Nvfp4Mode::Exact => exact_rcp(sf_val * rcp_g),
        }
    } else {
        0.0
    };
    for &v in block {
        let s = v * out_scale;
        let c = match mode {
            Nvfp4Mode::Kernel => f32_to_e2m1(s),
            // FlashInfer's cast_to_fp4x2: NaN matches no interval and stays code 0.
            Nvfp4Mode::Exact if s.is_nan() => 0,
            Nvfp4Mode::Exact => f32_to_e2m1(s),
        };
        codes.push(c);
    }
    sf
}

/// Quantizes `x` to NVFP4 (module doc).
///
/// - `x`: `[rows, cols]` row-major values (f32, or bf16/f16 upcast exactly); `cols % 16 == 0`.
/// - `global_scale`: the per-tensor encode scale (`448*6/amax` when `None`).
/// - returns `x_fp4` `[rows, cols/2]`, `sf` flat in `layout` (`layout.len(rows, cols)` bytes,
///   padding 0), and the global scale used.
pub fn quantize(
    x: &[f32],
    rows: usize,
    cols: usize,
    global_scale: Option<f32>,
    mode: Nvfp4Mode,
    layout: SfLayout,
) -> Result<Nvfp4, String> {
    if !cols.is_multiple_of(NVFP4_BLOCK) || cols == 0 {
        return Err(format!(
            "cols = {cols} must be a positive multiple of {NVFP4_BLOCK} (the NVFP4 block); pad the last dimension"
        ));
    }
    let n = rows
        .checked_mul(cols)
        .ok_or_else(|| format!("rows * cols = {rows} * {cols} overflows"))?;
    if x.len() != n {
        return Err(format!(
            "x has {} values but rows * cols = {rows} * {cols} = {n}",
            x.len()
        ));
    }
    let global = match global_scale {
        Some(g) => {
            if !(g.is_finite() && g > 0.0) {
                return Err(format!(
                    "global_scale = {g} must be finite and > 0 (it is 448*6/amax)"
                ));
            }
            g
        }
        None => global_scale_from_amax(x)?,
    };
    let kb = cols / NVFP4_BLOCK;
    let mut sf = vec![0u8; layout.len(rows, cols)];
    let mut codes = Vec::with_capacity(n);
    for m in 0..rows {
        for k in 0..kb {
            let start = m * cols + k * NVFP4_BLOCK;
            let s = quantize_block(&x[start..start + NVFP4_BLOCK], global, mode, &mut codes);
            sf[layout.offset(m, k, cols)] = s;
        }
    }
    Ok(Nvfp4 {
        x_fp4: pack_e2m1(&codes),
        sf,
        global_scale: global,
        rows,
        cols,
    })
}

/// Dequantizes: `x = e2m1 * float(sf) / global` in f32, `[rows, cols]`. Scales are read from
/// `q.sf` in `layout`; a missing byte (a malformed `Nvfp4`) reads as NaN, never panics.
pub fn dequantize(q: &Nvfp4, layout: SfLayout) -> Vec<f32> {
    let kb = q.cols / NVFP4_BLOCK;
    let codes = unpack_e2m1(&q.x_fp4, q.rows * q.cols);
    let mut out = Vec::with_capacity(q.rows * q.cols);
    for m in 0..q.rows {
        for j in 0..q.cols {
            let k = j / NVFP4_BLOCK;
            let sf = if k < kb {
                q.sf.get(layout.offset(m, k, q.cols))
                    .map_or(f32::NAN, |&b| e4m3_bits_to_f32(b))
            } else {
                f32::NAN
            };
            let c = codes
                .get(m * q.cols + j)
                .map_or(f32::NAN, |&c| e2m1_to_f32(c));
            out.push(c * sf / q.global_scale);
        }
    }
    out
}

pub(crate) fn parse_mode(p: &Params, op: &str) -> Result<Nvfp4Mode, OpError> {
    let s = p.str("mode")?;
    Nvfp4Mode::parse(s).ok_or_else(|| OpError::Param {
        op: op.into(),
        name: "mode".into(),
        msg: format!("'{s}' is not kernel or exact"),
    })
}

pub(crate) fn parse_layout(p: &Params, op: &str) -> Result<SfLayout, OpError> {
    let s = p.str("layout")?;
    SfLayout::parse(s).ok_or_else(|| OpError::Param {
        op: op.into(),
        name: "layout".into(),
        msg: format!("'{s}' is not linear or swizzled128x4"),
    })
}

pub(crate) const LAYOUT_PARAM: ParamSpec = ParamSpec::new(
    "layout",
    ParamKind::Enum(&["linear", "swizzled128x4"]),
    Some("linear"),
    "scale layout: linear [rows, cols/16], or swizzled128x4 [round_up(rows,128), round_up(cols/16,4)] \
     (offset mTile*kTiles*512 + kTile*512 + (m%32)*16 + ((m%128)/32)*4 + k%4, padding 0)",
);

pub fn def() -> OpDef {
    OpDef {
        name: "nvfp4_quantize",
        summary: "NVFP4 quantization: E2M1 codes (2 per byte, element 0 low nibble) + E4M3 scale per 16 + fp32 global scale",
        inputs: vec![
            ArgSpec::req("x", "(rows, cols), cols % 16 == 0", "f32|bf16|f16", "values to quantize"),
            ArgSpec::opt(
                "global_scale",
                "(1,)",
                "f32",
                "per-tensor encode scale; 448*6/amax(x) when absent",
            ),
        ],
        params: vec![
            ParamSpec::new(
                "mode",
                ParamKind::Enum(&["kernel", "exact"]),
                Some("kernel"),
                "kernel: TRT-LLM order with rcp.approx.ftz and saturating E4M3; exact: FlashInfer's \
                 reference quantizer (true reciprocals, non-saturating E4M3)",
            ),
            LAYOUT_PARAM,
        ],
        outputs: vec![
            ArgSpec::req("x_fp4", "(rows, cols/2)", "u8", "packed E2M1 codes, element 2i in the low nibble"),
            ArgSpec::req(
                "sf",
                "(rows, cols/16) | (round_up(rows,128), round_up(cols/16,4))",
                "u8",
                "E4M3 block scales (bits), in the chosen layout",
            ),
            ArgSpec::req("global_scale", "(1,)", "f32", "the global scale used"),
        ],
        run: run_op,
    }
}

fn run_op(inputs: &TensorMap, p: &Params) -> Result<TensorMap, OpError> {
    const OP: &str = "nvfp4_quantize";
    let inp = Inputs::new(OP, inputs);
    let (xt, x) = inp.float("x", 2)?;
    inp.dtype("x", xt, &[DType::F32, DType::BF16, DType::F16])?;
    let (rows, cols) = (xt.shape[0], xt.shape[1]);
    if cols % NVFP4_BLOCK != 0 || cols == 0 {
        return Err(inp.err(
            "x",
            format!(
                "shape {:?}: cols = {cols} must be a positive multiple of 16 (the NVFP4 block); pad the last dimension",
                xt.shape
            ),
        ));
    }
    let g = match inp.opt_float("global_scale", 1)? {
        None => None,
        Some((gt, gv)) => {
            inp.shape("global_scale", gt, &[1], "(1,)")?;
            Some(gv[0])
        }
    };
    let mode = parse_mode(p, OP)?;
    let layout = parse_layout(p, OP)?;
    let q = quantize(&x, rows, cols, g, mode, layout).map_err(|e| inp.invalid(e))?;
    Ok(op::outputs([
        ("x_fp4", Tensor::from_u8(&[rows, cols / 2], q.x_fp4)),
        ("sf", Tensor::from_u8(&layout.shape(rows, cols), q.sf)),
        ("global_scale", Tensor::from_f32(&[1], vec![q.global_scale])),
    ]))
}
