//! Cases of `rmsnorm_nvfp4` (TRT-LLM fused epilogue): Super hidden 4096, both rounding modes,
//! both scale layouts, a given global scale. Exact: the quantizer is bit-defined.

use super::rmsnorm::norm_inputs;
use crate::case::{Case, CaseDef};
use crate::tolerance::Tolerance;
use reference::{DType, Tensor, TensorMap};

/// Adds a fixed global_scale input when `gs` is set.
pub(crate) fn with_gs(mut m: TensorMap, gs: Option<f32>) -> TensorMap {
    if let Some(g) = gs {
        m.insert("global_scale".into(), Tensor::from_f32(&[1], vec![g]));
    }
    m
}

/// Exact tolerances on the three quantized outputs.
pub(crate) fn exact(c: CaseDef) -> CaseDef {
    c.tol("x_fp4", Tolerance::Exact)
        .tol("sf", Tolerance::Exact)
        .tol("global_scale", Tolerance::Exact)
}

/// One `_nvfp4` row: `op`, inputs from [`norm_inputs`] with `extra` tensors, params.
#[allow(clippy::too_many_arguments)]
pub(crate) fn nvfp4_case(
    op: &'static str,
    model: &'static str,
    rows: usize,
    cols: usize,
    weight: bool,
    extra: &'static [&'static str],
    gs: Option<f32>,
    params: &[(&str, &str)],
    what: &str,
) -> Box<dyn Case> {
    let mut c = CaseDef::new(op, move |seed| {
        with_gs(
            norm_inputs(seed, rows, cols, DType::BF16, weight, extra),
            gs,
        )
    })
    .var("what", what)
    .var("rows", rows)
    .var("cols", cols)
    .model(model)
    .cost(
        ((2 + 2 * extra.len()) * rows * cols + rows * cols / 2 + rows * cols / 16) as u64,
        6 * (rows * cols) as u64,
    );
    for (k, v) in params {
        c = c.param(k, v);
    }
    exact(c).boxed()
}

pub fn cases() -> Vec<Box<dyn Case>> {
    let m = "Nemotron 3 Super RMSNorm + NVFP4 (hidden 4096)";
    let f = |rows, cols, gs, p: &[(&str, &str)], what| {
        nvfp4_case("rmsnorm_nvfp4", m, rows, cols, true, &[], gs, p, what)
    };
    vec![
        f(128, 4096, None, &[], "super"),
        f(
            128,
            4096,
            None,
            &[("round_before_quant", "none")],
            "fp32_quant",
        ),
        f(128, 4096, None, &[("layout", "swizzled128x4")], "swizzled"),
        f(128, 4096, Some(900.0), &[], "given_global_scale"),
        f(128, 4096, None, &[("mode", "exact")], "exact_mode"),
        f(
            7,
            4096 + 16,
            None,
            &[("layout", "swizzled128x4")],
            "odd_swizzled",
        ),
    ]
}
