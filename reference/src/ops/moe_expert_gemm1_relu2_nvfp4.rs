//! `moe_expert_gemm1_relu2_nvfp4`: per expert `e`, `h = x_e . W1_e^T`, then the fused epilogue
//! of the seed's grouped GEMM: accumulator x dequantization scale, then `relu(h)^2`, then NVFP4
//! quantization of each row (block amax -> E4M3 scale -> E2M1 codes) with the next GEMM's
//! global scale — the two scales kept separate (SPEC.md "MoE expert epilogue").
//!
//! The epilogue value is the fp32 register value (`round_before_quant = none`, default) or,
//! as a named mode, rounded to bf16 first (`bf16`, as an unfused bf16 chain would).

use super::moe_gemm::{activation, grouped_gemm, offsets, weights};
use super::nvfp4_quantize::{quantize, Nvfp4Mode, SfLayout};
use crate::num::round_bf16;
use crate::op::{self, ArgSpec, Inputs, OpDef, OpError, ParamKind, ParamSpec, Params};
use crate::tensor::{DType, Tensor, TensorMap};

pub fn def() -> OpDef {
    OpDef {
        name: "moe_expert_gemm1_relu2_nvfp4",
        summary: "grouped expert GEMM1 with fused dequant -> relu^2 -> NVFP4 epilogue",
        inputs: vec![
            ArgSpec::opt(
                "x",
                "(M, K)",
                "f32|bf16|f16",
                "permuted activations (float operand)",
            ),
            ArgSpec::opt(
                "x_fp4",
                "(M, K/2)",
                "u8",
                "permuted activations, NVFP4 codes",
            ),
            ArgSpec::opt(
                "sf",
                "(M, K/16)",
                "u8",
                "activation E4M3 block scales (linear)",
            ),
            ArgSpec::opt("global_scale", "(1,)", "f32", "activation global scale"),
            ArgSpec::opt(
                "w1",
                "(E, N, K)",
                "f32|bf16",
                "expert up-projection weights (float operand)",
            ),
            ArgSpec::opt("w1_fp4", "(E, N, K/2)", "u8", "expert weights, NVFP4 codes"),
            ArgSpec::opt(
                "w1_sf",
                "(E, N, K/16)",
                "u8",
                "expert weight block scales (linear)",
            ),
            ArgSpec::opt(
                "w1_global_scale",
                "(E,)",
                "f32",
                "expert weight global scales",
            ),
            ArgSpec::req("expert_offsets", "(E+1,)", "i32", "from moe_permute"),
            ArgSpec::opt(
                "out_global_scale",
                "(1,)",
                "f32",
                "global scale of the quantized output (448*6/amax(h) when absent)",
            ),
        ],
        params: vec![
            ParamSpec::new(
                "mode",
                ParamKind::Enum(&["kernel", "exact"]),
                Some("kernel"),
                "NVFP4 scale arithmetic (nvfp4_quantize)",
            ),
            ParamSpec::new(
                "round_before_quant",
                ParamKind::Enum(&["none", "bf16"]),
                Some("none"),
                "round relu^2 output to bf16 before quantizing",
            ),
            ParamSpec::new(
                "emit_h",
                ParamKind::Bool,
                Some("false"),
                "also output h = relu(x W1^T)^2 in bf16 (debugging)",
            ),
        ],
        outputs: vec![
            ArgSpec::req("x_fp4", "(M, N/2)", "u8", "E2M1 codes of relu^2(h)"),
            ArgSpec::req("sf", "(M, N/16)", "u8", "E4M3 block scales (linear)"),
            ArgSpec::req("global_scale", "(1,)", "f32", "global scale used"),
            ArgSpec::opt(
                "h",
                "(M, N)",
                "bf16",
                "epilogue value before quantization (emit_h)",
            ),
        ],
        run: run_op,
    }
}

/// The fused epilogue on `h` `[M, N]` (accumulator already scaled): relu^2, optional bf16
/// rounding, NVFP4 quantization of rows. Returns (values quantized, quantized).
pub fn epilogue(
    mut h: Vec<f32>,
    m: usize,
    n: usize,
    out_global: Option<f32>,
    mode: Nvfp4Mode,
    round_bf16_first: bool,
) -> Result<(Vec<f32>, super::nvfp4_quantize::Nvfp4), String> {
    for v in &mut h {
        let r = v.max(0.0);
        *v = if round_bf16_first {
            round_bf16(r * r)
        } else {
            r * r
        };
    }
    let q = quantize(&h, m, n, out_global, mode, SfLayout::Linear)?;
    Ok((h, q))
}

fn run_op(inputs: &TensorMap, p: &Params) -> Result<TensorMap, OpError> {
    let inp = Inputs::new("moe_expert_gemm1_relu2_nvfp4", inputs);
    let x = activation(&inp)?;
    let w = weights(&inp, "w1")?;
    if x.cols != w.cols {
        return Err(inp.invalid(format!("activation K = {} but w1 K = {}", x.cols, w.cols)));
    }
    if w.rows % 16 != 0 {
        return Err(inp.invalid(format!(
            "N = {} must be a multiple of 16 to quantize h",
            w.rows
        )));
    }
    let offs = offsets(&inp, w.groups, x.rows)?;
    let out_g = match inp.opt_float("out_global_scale", 1)? {
        Some((_, g)) if g.len() == 1 => Some(g[0]),
        Some(_) => return Err(inp.err("out_global_scale", "must hold one value")),
        None => None,
    };
    let mode = Nvfp4Mode::parse(p.str("mode")?).unwrap_or(Nvfp4Mode::Kernel);
    let h = grouped_gemm(&x, &w, &offs);
    let (hq, q) = epilogue(
        h,
        x.rows,
        w.rows,
        out_g,
        mode,
        p.str("round_before_quant")? == "bf16",
    )
    .map_err(|m| inp.invalid(m))?;
    let mut out = op::outputs([
        ("x_fp4", Tensor::from_u8(&[x.rows, w.rows / 2], q.x_fp4)),
        ("sf", Tensor::from_u8(&[x.rows, w.rows / 16], q.sf)),
        ("global_scale", Tensor::from_f32(&[1], vec![q.global_scale])),
    ]);
    if p.bool("emit_h")? {
        out.insert(
            "h".into(),
            Tensor::from_f32_as(&[x.rows, w.rows], &hq, DType::BF16),
        );
    }
    Ok(out)
}
