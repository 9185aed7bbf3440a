//! Shared by `moe_expert_gemm1_relu2_nvfp4` and `moe_expert_gemm2`: grouped expert GEMM operands
//! (bf16/f32, or NVFP4 codes + E4M3 block scales + fp32 global scale) and the grouped GEMM.
//!
//! NVFP4 operands enter the product as `e2m1 * float(sf)` (exact in f32) and the global scales
//! are applied once to the fp32 accumulator as the dequantization scale
//! `alpha = 1 / (global_x * global_w[e])` (f32), as the tensor-core GEMMs do: the scale belongs to
//! the accumulator, not to each element (SPEC.md "MoE expert epilogue"). Accumulation over K is
//! sequential in f32; kernels that sum in another order differ in the last bits, which the
//! comparisons allow for.

use crate::num::{e2m1_to_f32, e4m3_bits_to_f32, unpack_e2m1};
use crate::op::{Inputs, OpError};
use crate::tensor::DType;
use rayon::prelude::*;

/// A grouped-GEMM operand as f32 block-scaled values (global not applied) plus its globals.
#[derive(Clone, Debug)]
pub struct Operand {
    /// `groups` x `rows` x `cols` values, row-major.
    pub values: Vec<f32>,
    pub groups: usize,
    pub rows: usize,
    pub cols: usize,
    /// One global scale per group (1.0 for float operands).
    pub global: Vec<f32>,
    pub nvfp4: bool,
}

/// Block-scaled NVFP4 values `e2m1 * float(sf)` of `rows x cols` codes with linear scales.
pub fn nvfp4_values(packed: &[u8], sf: &[u8], rows: usize, cols: usize) -> Vec<f32> {
    let codes = unpack_e2m1(packed, rows * cols);
    let kb = cols / 16;
    let mut out = Vec::with_capacity(rows * cols);
    for m in 0..rows {
        for j in 0..cols {
            out.push(e2m1_to_f32(codes[m * cols + j]) * e4m3_bits_to_f32(sf[m * kb + j / 16]));
        }
    }
    out
}

/// Reads the activation operand: `x` (float `[M, K]`) or `x_fp4` `[M, K/2]` + `sf` `[M, K/16]`
/// (linear) + `global_scale` `[1]` — the names `nvfp4_quantize` writes, so outputs chain.
pub fn activation(inp: &Inputs) -> Result<Operand, OpError> {
    if let Some((t, v)) = inp.opt_float("x", 2)? {
        if inp.get("x_fp4").is_some() {
            return Err(inp.invalid("give either 'x' or 'x_fp4' + 'sf' + 'global_scale', not both"));
        }
        return Ok(Operand {
            values: v,
            groups: 1,
            rows: t.shape[0],
            cols: t.shape[1],
            global: vec![1.0],
            nvfp4: false,
        });
    }
    let q = inp.req("x_fp4")?;
    inp.dtype("x_fp4", q, &[DType::U8])?;
    inp.rank("x_fp4", q, 2)?;
    let (m, k) = (q.shape[0], q.shape[1] * 2);
    if k % 16 != 0 || k == 0 {
        return Err(inp.err(
            "x_fp4",
            format!(
                "K = 2 * {} = {k} must be a positive multiple of 16 (the NVFP4 block)",
                q.shape[1]
            ),
        ));
    }
    let sf = inp.req("sf")?;
    inp.dtype("sf", sf, &[DType::U8])?;
    inp.shape("sf", sf, &[m, k / 16], "(M, K/16) linear layout")?;
    let (_, g) = inp.float("global_scale", 1)?;
    if g.len() != 1 || !(g[0].is_finite() && g[0] > 0.0) {
        return Err(inp.err("global_scale", "must hold one finite value > 0"));
    }
    let values = nvfp4_values(
        q.as_u8().unwrap_or_default(),
        sf.as_u8().unwrap_or_default(),
        m,
        k,
    );
    Ok(Operand {
        values,
        groups: 1,
        rows: m,
        cols: k,
        global: g,
        nvfp4: true,
    })
}

/// Reads stacked expert weights `{p}` float `[E, N, K]` (the hub's `experts.{e}.*.weight`
/// stacked), or `{p}_fp4` `[E, N, K/2]` + `{p}_sf` `[E, N, K/16]` + `{p}_global_scale` `[E]`.
pub fn weights(inp: &Inputs, p: &str) -> Result<Operand, OpError> {
    if let Some((t, v)) = inp.opt_float(p, 3)? {
        return Ok(Operand {
            values: v,
            groups: t.shape[0],
            rows: t.shape[1],
            cols: t.shape[2],
            global: vec![1.0; t.shape[0]],
            nvfp4: false,
        });
    }
    let qn = format!("{p}_fp4");
    let sn = format!("{p}_sf");
    let gn = format!("{p}_global_scale");
    let q = inp.get(&qn).ok_or_else(|| {
        inp.invalid(format!(
            "missing weights: give '{p}' (float [E, N, K]) or '{qn}' + '{sn}' + '{gn}'"
        ))
    })?;
    inp.dtype(&qn, q, &[DType::U8])?;
    inp.rank(&qn, q, 3)?;
    let (e, n, k) = (q.shape[0], q.shape[1], q.shape[2] * 2);
    if k % 16 != 0 || k == 0 || e == 0 {
        return Err(inp.err(
            &qn,
            format!(
                "needs E > 0 and K = 2 * {} = {k} a positive multiple of 16 (the NVFP4 block)",
                q.shape[2]
            ),
        ));
    }
    let sf = inp.req(&sn)?;
    inp.dtype(&sn, sf, &[DType::U8])?;
    inp.shape(&sn, sf, &[e, n, k / 16], "(E, N, K/16)")?;
    let (_, g) = inp.float(&gn, 1)?;
    if g.len() != e || g.iter().any(|v| !(v.is_finite() && *v > 0.0)) {
        return Err(inp.err(&gn, format!("must hold {e} finite values > 0")));
    }
    let values = nvfp4_values(
        q.as_u8().unwrap_or_default(),
        sf.as_u8().unwrap_or_default(),
        e * n,
        k,
    );
    Ok(Operand {
        values,
        groups: e,
        rows: n,
        cols: k,
        global: g,
        nvfp4: true,
    })
}

/// Reads `expert_offsets` `[E+1]` (from `moe_permute`) and checks it against `E` and `M`.
pub fn offsets(inp: &Inputs, e: usize, m: usize) -> Result<Vec<usize>, OpError> {
    let (t, v) = inp.int("expert_offsets")?;
    inp.shape(
        "expert_offsets",
        t,
        &[e + 1],
        "(E+1,) with E from the weights",
    )?;
    let mut out = Vec::with_capacity(v.len());
    for (i, &o) in v.iter().enumerate() {
        let ou = usize::try_from(o)
            .map_err(|_| inp.err("expert_offsets", format!("entry {i} = {o} is negative")))?;
        if i > 0 && ou < out[i - 1] {
            return Err(inp.err("expert_offsets", format!("not non-decreasing at entry {i}")));
        }
        out.push(ou);
    }
    if out[0] != 0 || out[e] != m {
        return Err(inp.err(
            "expert_offsets",
            format!(
                "must start at 0 and end at M = {m} (the activation rows); got {} .. {}",
                out[0], out[e]
            ),
        ));
    }
    Ok(out)
}

/// `h[r, :] = alpha_e * (x[r, :] . w[e, :, :]^T)` for rows `r` of expert `e`
/// (`offsets[e]..offsets[e+1]`), `alpha_e = 1 / (global_x * global_w[e])` in f32. `[M, N]`.
pub fn grouped_gemm(x: &Operand, w: &Operand, offsets: &[usize]) -> Vec<f32> {
    let (k, n) = (w.cols, w.rows);
    let mut h = vec![0.0f32; x.rows * n];
    let gx = x.global[0];
    h.par_chunks_mut(n).enumerate().for_each(|(r, hr)| {
        // The expert owning row r (offsets are sorted; experts may be empty).
        let e = offsets
            .partition_point(|&o| o <= r)
            .saturating_sub(1)
            .min(w.groups - 1);
        let alpha = 1.0f32 / (gx * w.global[e]);
        let xr = &x.values[r * k..(r + 1) * k];
        let we = &w.values[e * n * k..(e + 1) * n * k];
        for (j, hj) in hr.iter_mut().enumerate() {
            let wr = &we[j * k..(j + 1) * k];
            let mut acc = 0.0f32;
            for (a, b) in xr.iter().zip(wr) {
                acc += a * b;
            }
            *hj = acc * alpha;
        }
    });
    h
}
