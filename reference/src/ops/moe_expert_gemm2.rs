//! `moe_expert_gemm2`: per expert `e`, `out = alpha_e * (x_e . W2_e^T)` with NVFP4 or float
//! operands (the down-projection of the routed experts), output in f32 or bf16.

use super::moe_gemm::{activation, grouped_gemm, offsets, weights};
use crate::op::{self, ArgSpec, Inputs, OpDef, OpError, ParamKind, ParamSpec, Params};
use crate::tensor::{DType, Tensor, TensorMap};

pub fn def() -> OpDef {
    OpDef {
        name: "moe_expert_gemm2",
        summary: "grouped expert GEMM2 (NVFP4 or bf16 operands, f32/bf16 output)",
        inputs: vec![
            ArgSpec::opt("x", "(M, K)", "f32|bf16|f16", "activations (float operand)"),
            ArgSpec::opt(
                "x_fp4",
                "(M, K/2)",
                "u8",
                "activations, NVFP4 codes (gemm1's output)",
            ),
            ArgSpec::opt("sf", "(M, K/16)", "u8", "activation block scales (linear)"),
            ArgSpec::opt("global_scale", "(1,)", "f32", "activation global scale"),
            ArgSpec::opt(
                "w2",
                "(E, N, K)",
                "f32|bf16",
                "expert down-projection weights",
            ),
            ArgSpec::opt("w2_fp4", "(E, N, K/2)", "u8", "expert weights, NVFP4 codes"),
            ArgSpec::opt(
                "w2_sf",
                "(E, N, K/16)",
                "u8",
                "expert weight block scales (linear)",
            ),
            ArgSpec::opt(
                "w2_global_scale",
                "(E,)",
                "f32",
                "expert weight global scales",
            ),
            ArgSpec::req("expert_offsets", "(E+1,)", "i32", "from moe_permute"),
        ],
        params: vec![ParamSpec::new(
            "out_dtype",
            ParamKind::Enum(&["f32", "bf16"]),
            Some("f32"),
            "output dtype",
        )],
        outputs: vec![ArgSpec::req(
            "out",
            "(M, N)",
            "f32|bf16",
            "expert outputs, permuted order",
        )],
        run: run_op,
    }
}

fn run_op(inputs: &TensorMap, p: &Params) -> Result<TensorMap, OpError> {
    let inp = Inputs::new("moe_expert_gemm2", inputs);
    let x = activation(&inp)?;
    let w = weights(&inp, "w2")?;
    if x.cols != w.cols {
        return Err(inp.invalid(format!("activation K = {} but w2 K = {}", x.cols, w.cols)));
    }
    let offs = offsets(&inp, w.groups, x.rows)?;
    let out = grouped_gemm(&x, &w, &offs);
    let dt = if p.str("out_dtype")? == "bf16" {
        DType::BF16
    } else {
        DType::F32
    };
    Ok(op::outputs([(
        "out",
        Tensor::from_f32_as(&[x.rows, w.rows], &out, dt),
    )]))
}
