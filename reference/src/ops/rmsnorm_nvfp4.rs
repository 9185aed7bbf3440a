//! RMSNorm + NVFP4 quantization (SPEC.md "Fused quantizing epilogues"), and the quantizing
//! epilogue shared by the `_nvfp4` ops: the f32 result y is optionally rounded to bf16
//! ([`RoundBeforeQuant`]) and then quantized by `nvfp4_quantize::quantize` (global scale
//! 448*6/amax of the rounded y when not given).

use super::nvfp4_quantize::{parse_layout, parse_mode, quantize, Nvfp4, Nvfp4Mode, SfLayout};
use super::nvfp4_quantize::{LAYOUT_PARAM, NVFP4_BLOCK};
use super::rmsnorm::{eps_param, read_x_weight, rmsnorm};
use crate::op::{outputs, ArgSpec, Inputs, OpDef, OpError, ParamKind, ParamSpec, Params};
use crate::tensor::{bf16_to_f32, f32_to_bf16, Tensor, TensorMap};

/// What the epilogue does to y before absmax and quantization.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RoundBeforeQuant {
    /// Round y to bf16 first (newer TRT-LLM: the activation is cast to the output dtype).
    Bf16,
    /// Quantize the f32 value (older TRT-LLM).
    None,
}

impl RoundBeforeQuant {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "bf16" => Some(RoundBeforeQuant::Bf16),
            "none" => Some(RoundBeforeQuant::None),
            _ => None,
        }
    }
}

/// Quantizer settings of an epilogue.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct QuantCfg {
    /// Per-tensor encode scale; 448*6/amax(y) when `None`.
    pub global_scale: Option<f32>,
    pub round: RoundBeforeQuant,
    pub mode: Nvfp4Mode,
    pub layout: SfLayout,
}

/// Rounds (per `cfg.round`) and quantizes y (rows, cols).
pub fn quantize_epilogue(
    mut y: Vec<f32>,
    rows: usize,
    cols: usize,
    cfg: &QuantCfg,
) -> Result<Nvfp4, String> {
    if cfg.round == RoundBeforeQuant::Bf16 {
        for v in y.iter_mut() {
            *v = bf16_to_f32(f32_to_bf16(*v));
        }
    }
    quantize(&y, rows, cols, cfg.global_scale, cfg.mode, cfg.layout)
}

/// RMSNorm of x (rows, hidden) with weight (hidden,), then the NVFP4 epilogue.
pub fn rmsnorm_nvfp4(
    x: &[f32],
    hidden: usize,
    weight: &[f32],
    eps: f32,
    cfg: &QuantCfg,
) -> Result<Nvfp4, String> {
    let y = rmsnorm(x, hidden, weight, eps)?;
    quantize_epilogue(y, x.len() / hidden.max(1), hidden, cfg)
}

/// `global_scale`, `mode`, `layout`, `round_before_quant` params of every `_nvfp4` op.
pub(crate) fn quant_params() -> Vec<ParamSpec> {
    vec![
        ParamSpec::new(
            "mode",
            ParamKind::Enum(&["kernel", "exact"]),
            Some("kernel"),
            "NVFP4 scale computation: kernel (TRT-LLM, rcp.approx) or exact (FlashInfer reference)",
        ),
        LAYOUT_PARAM,
        ParamSpec::new(
            "round_before_quant",
            ParamKind::Enum(&["bf16", "none"]),
            Some("bf16"),
            "bf16: round y to bf16 before absmax and quantization (newer TRT-LLM); none: quantize the f32 y (older)",
        ),
    ]
}

pub(crate) const GLOBAL_SCALE_INPUT: ArgSpec = ArgSpec::opt(
    "global_scale",
    "(1,)",
    "f32",
    "per-tensor encode scale; 448*6/amax(y) when absent",
);

pub(crate) fn quant_outputs() -> Vec<ArgSpec> {
    vec![
        ArgSpec::req(
            "x_fp4",
            "(rows, cols/2)",
            "u8",
            "packed E2M1 codes, element 2i in the low nibble",
        ),
        ArgSpec::req(
            "sf",
            "(rows, cols/16) | (round_up(rows,128), round_up(cols/16,4))",
            "u8",
            "E4M3 block scales (bits), in the chosen layout",
        ),
        ArgSpec::req("global_scale", "(1,)", "f32", "the global scale used"),
    ]
}

/// Reads the optional global_scale input and the quantizer params; checks cols % 16.
pub(crate) fn read_quant(in_: &Inputs<'_>, p: &Params, cols: usize) -> Result<QuantCfg, OpError> {
    if !cols.is_multiple_of(NVFP4_BLOCK) {
        return Err(in_.err(
            "x",
            format!(
                "{cols} columns is not a multiple of 16 (the NVFP4 block); pad the last dimension"
            ),
        ));
    }
    let global_scale = match in_.opt_float("global_scale", 1)? {
        None => None,
        Some((t, v)) => {
            in_.shape("global_scale", t, &[1], "(1,)")?;
            Some(v[0])
        }
    };
    let s = p.str("round_before_quant")?;
    let round = RoundBeforeQuant::parse(s).ok_or_else(|| OpError::Param {
        op: in_.op.into(),
        name: "round_before_quant".into(),
        msg: format!("'{s}' is not bf16 or none"),
    })?;
    Ok(QuantCfg {
        global_scale,
        round,
        mode: parse_mode(p, in_.op)?,
        layout: parse_layout(p, in_.op)?,
    })
}

/// The x_fp4 / sf / global_scale output tensors.
pub(crate) fn quant_tensors(q: Nvfp4, layout: SfLayout) -> TensorMap {
    let (rows, cols) = (q.rows, q.cols);
    outputs([
        ("x_fp4", Tensor::from_u8(&[rows, cols / 2], q.x_fp4)),
        ("sf", Tensor::from_u8(&layout.shape(rows, cols), q.sf)),
        ("global_scale", Tensor::from_f32(&[1], vec![q.global_scale])),
    ])
}

pub fn def() -> OpDef {
    let mut params = vec![eps_param()];
    params.extend(quant_params());
    OpDef {
        name: "rmsnorm_nvfp4",
        summary: "RMSNorm then NVFP4 quantization (TRT-LLM fused epilogue)",
        inputs: vec![
            ArgSpec::req(
                "x",
                "(rows, hidden), hidden % 16 == 0",
                "f32|bf16|f16",
                "input",
            ),
            ArgSpec::req("weight", "(hidden,)", "f32|bf16|f16", "gamma"),
            GLOBAL_SCALE_INPUT,
        ],
        params,
        outputs: quant_outputs(),
        run: run_op,
    }
}

fn run_op(inputs: &TensorMap, p: &Params) -> Result<TensorMap, OpError> {
    let in_ = Inputs::new("rmsnorm_nvfp4", inputs);
    let (xt, x, w) = read_x_weight(&in_)?;
    let cfg = read_quant(&in_, p, xt.shape[1])?;
    let q = rmsnorm_nvfp4(&x, xt.shape[1], &w, p.float("eps")? as f32, &cfg)
        .map_err(|m| in_.invalid(m))?;
    Ok(quant_tensors(q, cfg.layout))
}
