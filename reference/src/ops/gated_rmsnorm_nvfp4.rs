//! Gated RMSNorm (Mamba-2) + NVFP4 (SPEC.md "Fused quantizing epilogues"): `gated_rmsnorm`,
//! then the NVFP4 epilogue of `rmsnorm_nvfp4`.

use super::gated_rmsnorm::{gated_params, gated_rmsnorm, read_gated, GateOrder};
use super::nvfp4_quantize::Nvfp4;
use super::rmsnorm_nvfp4::{
    quant_outputs, quant_params, quant_tensors, quantize_epilogue, read_quant, QuantCfg,
    GLOBAL_SCALE_INPUT,
};
use crate::op::{ArgSpec, Inputs, OpDef, OpError, Params};
use crate::tensor::TensorMap;

/// - `x`, `z`: (rows, d); `weight`: (d,); see `gated_rmsnorm`.
#[allow(clippy::too_many_arguments)]
pub fn gated_rmsnorm_nvfp4(
    x: &[f32],
    z: &[f32],
    d: usize,
    weight: &[f32],
    group_size: usize,
    order: GateOrder,
    eps: f32,
    cfg: &QuantCfg,
) -> Result<Nvfp4, String> {
    let y = gated_rmsnorm(x, z, d, weight, group_size, order, eps)?;
    quantize_epilogue(y, x.len() / d.max(1), d, cfg)
}

pub fn def() -> OpDef {
    let mut params = gated_params();
    params.extend(quant_params());
    OpDef {
        name: "gated_rmsnorm_nvfp4",
        summary: "Mamba-2 gated RMSNorm then NVFP4 quantization",
        inputs: vec![
            ArgSpec::req("x", "(rows, d), d % 16 == 0", "f32|bf16|f16", "input"),
            ArgSpec::req("z", "(rows, d)", "f32|bf16|f16", "gate"),
            ArgSpec::req("weight", "(d,)", "f32|bf16|f16", "gamma"),
            GLOBAL_SCALE_INPUT,
        ],
        params,
        outputs: quant_outputs(),
        run: run_op,
    }
}

fn run_op(inputs: &TensorMap, p: &Params) -> Result<TensorMap, OpError> {
    let in_ = Inputs::new("gated_rmsnorm_nvfp4", inputs);
    let (xt, x, z, w, group, order) = read_gated(&in_, p)?;
    let cfg = read_quant(&in_, p, xt.shape[1])?;
    let q = gated_rmsnorm_nvfp4(
        &x,
        &z,
        xt.shape[1],
        &w,
        group,
        order,
        p.float("eps")? as f32,
        &cfg,
    )
    .map_err(|m| in_.invalid(m))?;
    Ok(quant_tensors(q, cfg.layout))
}
