//! Fused residual add + RMSNorm + NVFP4 (SPEC.md "Fused quantizing epilogues"):
//! data = f32(x) + f32(residual) (stored back as residual, in residual's dtype);
//! y = data * rsqrt(mean(data^2) + eps) * weight; then the NVFP4 epilogue of `rmsnorm_nvfp4`.

use super::fused_add_rmsnorm::{fused_add_rmsnorm, read_add_inputs};
use super::nvfp4_quantize::Nvfp4;
use super::rmsnorm::eps_param;
use super::rmsnorm_nvfp4::{
    quant_outputs, quant_params, quant_tensors, quantize_epilogue, read_quant, QuantCfg,
    GLOBAL_SCALE_INPUT,
};
use crate::op::{ArgSpec, Inputs, OpDef, OpError, Params};
use crate::tensor::{Tensor, TensorMap};

/// Returns the quantized y and the f32 residual sum (rows, hidden).
pub fn fused_add_rmsnorm_nvfp4(
    x: &[f32],
    residual: &[f32],
    hidden: usize,
    weight: &[f32],
    eps: f32,
    cfg: &QuantCfg,
) -> Result<(Nvfp4, Vec<f32>), String> {
    let o = fused_add_rmsnorm(x, residual, hidden, weight, eps)?;
    let q = quantize_epilogue(o.out, x.len() / hidden.max(1), hidden, cfg)?;
    Ok((q, o.residual))
}

pub fn def() -> OpDef {
    let mut params = vec![eps_param()];
    params.extend(quant_params());
    let mut outs = quant_outputs();
    outs.push(ArgSpec::req(
        "residual",
        "(rows, hidden)",
        "residual's dtype",
        "x + residual (f32 sum, stored rounded)",
    ));
    OpDef {
        name: "fused_add_rmsnorm_nvfp4",
        summary: "residual += x; RMSNorm; NVFP4 quantization (TRT-LLM fused epilogue)",
        inputs: vec![
            ArgSpec::req(
                "x",
                "(rows, hidden), hidden % 16 == 0",
                "f32|bf16|f16",
                "input",
            ),
            ArgSpec::req(
                "residual",
                "(rows, hidden)",
                "f32|bf16|f16",
                "residual stream",
            ),
            ArgSpec::req("weight", "(hidden,)", "f32|bf16|f16", "gamma"),
            GLOBAL_SCALE_INPUT,
        ],
        params,
        outputs: outs,
        run: run_op,
    }
}

fn run_op(inputs: &TensorMap, p: &Params) -> Result<TensorMap, OpError> {
    let in_ = Inputs::new("fused_add_rmsnorm_nvfp4", inputs);
    let (xt, x, rt, r, w) = read_add_inputs(&in_)?;
    let cfg = read_quant(&in_, p, xt.shape[1])?;
    let (q, res) = fused_add_rmsnorm_nvfp4(&x, &r, xt.shape[1], &w, p.float("eps")? as f32, &cfg)
        .map_err(|m| in_.invalid(m))?;
    let mut m = quant_tensors(q, cfg.layout);
    m.insert(
        "residual".into(),
        Tensor::from_f32_as(&rt.shape, &res, rt.dtype()),
    );
    Ok(m)
}
