//! ReLU2 + NVFP4 (SPEC.md "Fused quantizing epilogues", the MoE expert activation):
//! y = relu(x)^2 in f32, then the NVFP4 epilogue of `rmsnorm_nvfp4` (round_before_quant = bf16
//! is newer TRT-LLM, none the older fp32 path).

use super::nvfp4_quantize::Nvfp4;
use super::relu2::relu2;
use super::rmsnorm_nvfp4::{
    quant_outputs, quant_params, quant_tensors, quantize_epilogue, read_quant, QuantCfg,
    GLOBAL_SCALE_INPUT,
};
use crate::op::{ArgSpec, Inputs, OpDef, OpError, Params};
use crate::tensor::TensorMap;

/// - `x`: (rows, cols), cols % 16 == 0
pub fn relu2_nvfp4(x: &[f32], rows: usize, cols: usize, cfg: &QuantCfg) -> Result<Nvfp4, String> {
    quantize_epilogue(relu2(x), rows, cols, cfg)
}

pub fn def() -> OpDef {
    OpDef {
        name: "relu2_nvfp4",
        summary: "relu(x)^2 then NVFP4 quantization (MoE expert epilogue)",
        inputs: vec![
            ArgSpec::req("x", "(rows, cols), cols % 16 == 0", "f32|bf16|f16", "input"),
            GLOBAL_SCALE_INPUT,
        ],
        params: quant_params(),
        outputs: quant_outputs(),
        run: run_op,
    }
}

fn run_op(inputs: &TensorMap, p: &Params) -> Result<TensorMap, OpError> {
    let in_ = Inputs::new("relu2_nvfp4", inputs);
    let (xt, x) = in_.float("x", 2)?;
    let cfg = read_quant(&in_, p, xt.shape[1])?;
    let q = relu2_nvfp4(&x, xt.shape[0], xt.shape[1], &cfg).map_err(|m| in_.invalid(m))?;
    Ok(quant_tensors(q, cfg.layout))
}
