//! RMSNorm (SPEC.md, Nemotron 3 Super eps 1e-5), as FlashInfer's / TRT-LLM's kernels:
//! rstd = 1 / sqrt(mean(x^2) + eps); out = x * rstd * weight, all in f32, then rounded once to
//! x's dtype.

use crate::op::{outputs, ArgSpec, Inputs, OpDef, OpError, ParamKind, ParamSpec, Params};
use crate::tensor::{Tensor, TensorMap};
use rayon::prelude::*;

/// rstd of one row: 1 / sqrt(mean(v^2) + eps), f32 accumulation.
#[inline]
pub fn rstd(v: &[f32], eps: f32) -> f32 {
    let ss: f32 = v.iter().map(|&a| a * a).sum();
    1.0 / (ss / v.len() as f32 + eps).sqrt()
}

/// RMSNorm of every row.
/// - `x`: (rows, hidden); `weight`: (hidden,)
/// - returns out (rows, hidden) in f32 (the caller rounds to the output dtype)
pub fn rmsnorm(x: &[f32], hidden: usize, weight: &[f32], eps: f32) -> Result<Vec<f32>, String> {
    if hidden == 0 || !x.len().is_multiple_of(hidden) || weight.len() != hidden {
        return Err(format!(
            "x has {} elements and weight {}; expected rows * hidden and hidden = {hidden}",
            x.len(),
            weight.len()
        ));
    }
    let mut out = vec![0f32; x.len()];
    out.par_chunks_mut(hidden)
        .zip(x.par_chunks(hidden))
        .for_each(|(o, xr)| {
            let r = rstd(xr, eps);
            for ((o, &a), &w) in o.iter_mut().zip(xr).zip(weight) {
                *o = a * r * w;
            }
        });
    Ok(out)
}

pub(crate) fn eps_param() -> ParamSpec {
    ParamSpec::new(
        "eps",
        ParamKind::Float,
        Some("1e-5"),
        "added to mean(x^2) (Nemotron 3 Super: 1e-5)",
    )
}

/// Reads x (rows, hidden) and weight (hidden,) for the norm ops.
pub(crate) fn read_x_weight<'a>(
    in_: &Inputs<'a>,
) -> Result<(&'a Tensor, Vec<f32>, Vec<f32>), OpError> {
    let (xt, x) = in_.float("x", 2)?;
    let (wt, w) = in_.float("weight", 1)?;
    in_.shape("weight", wt, &[xt.shape[1]], "(hidden,)")?;
    if xt.shape[1] == 0 {
        return Err(in_.err("x", "hidden size is 0; pass x of shape (rows, hidden >= 1)"));
    }
    Ok((xt, x, w))
}

pub fn def() -> OpDef {
    OpDef {
        name: "rmsnorm",
        summary: "RMSNorm: x * rsqrt(mean(x^2) + eps) * weight, f32 math",
        inputs: vec![
            ArgSpec::req("x", "(rows, hidden)", "f32|bf16|f16", "input"),
            ArgSpec::req("weight", "(hidden,)", "f32|bf16|f16", "gamma"),
        ],
        params: vec![eps_param()],
        outputs: vec![ArgSpec::req(
            "out",
            "(rows, hidden)",
            "x's dtype",
            "normalized",
        )],
        run: run_op,
    }
}

fn run_op(inputs: &TensorMap, p: &Params) -> Result<TensorMap, OpError> {
    let in_ = Inputs::new("rmsnorm", inputs);
    let (xt, x, w) = read_x_weight(&in_)?;
    let out = rmsnorm(&x, xt.shape[1], &w, p.float("eps")? as f32).map_err(|m| in_.invalid(m))?;
    Ok(outputs([(
        "out",
        Tensor::from_f32_as(&xt.shape, &out, xt.dtype()),
    )]))
}
