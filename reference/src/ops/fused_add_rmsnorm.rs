//! Fused residual add + RMSNorm (SPEC.md "Fused quantizing epilogues", without the quantizer),
//! as FlashInfer's `fused_add_rmsnorm`: data = f32(x) + f32(residual); the residual output is
//! data stored in residual's dtype; the norm uses the unrounded f32 data:
//! out = data * rsqrt(mean(data^2) + eps) * weight, rounded to x's dtype.

use super::rmsnorm::{eps_param, read_x_weight, rstd};
use crate::op::{outputs, ArgSpec, Inputs, OpDef, OpError, Params};
use crate::tensor::{Tensor, TensorMap};
use rayon::prelude::*;

/// Outputs of the fused add + norm, in f32.
#[derive(Clone, Debug, PartialEq)]
pub struct AddNormOutput {
    /// out: (rows, hidden)
    pub out: Vec<f32>,
    /// residual: (rows, hidden) = x + residual (f32, before rounding to the storage dtype)
    pub residual: Vec<f32>,
}

/// - `x`, `residual`: (rows, hidden); `weight`: (hidden,)
pub fn fused_add_rmsnorm(
    x: &[f32],
    residual: &[f32],
    hidden: usize,
    weight: &[f32],
    eps: f32,
) -> Result<AddNormOutput, String> {
    if hidden == 0
        || !x.len().is_multiple_of(hidden)
        || residual.len() != x.len()
        || weight.len() != hidden
    {
        return Err(format!(
            "x has {} elements, residual {}, weight {}; expected rows * hidden twice and hidden = {hidden}",
            x.len(),
            residual.len(),
            weight.len()
        ));
    }
    let sum: Vec<f32> = x.iter().zip(residual).map(|(&a, &b)| a + b).collect();
    let mut out = vec![0f32; x.len()];
    out.par_chunks_mut(hidden)
        .zip(sum.par_chunks(hidden))
        .for_each(|(o, s)| {
            let r = rstd(s, eps);
            for ((o, &a), &w) in o.iter_mut().zip(s).zip(weight) {
                *o = a * r * w;
            }
        });
    Ok(AddNormOutput { out, residual: sum })
}

/// Reads x, residual (same shape) and weight.
#[allow(clippy::type_complexity)]
pub(crate) fn read_add_inputs<'a>(
    in_: &Inputs<'a>,
) -> Result<(&'a Tensor, Vec<f32>, &'a Tensor, Vec<f32>, Vec<f32>), OpError> {
    let (xt, x, w) = read_x_weight(in_)?;
    let (rt, r) = in_.float("residual", 2)?;
    in_.shape("residual", rt, &xt.shape, "x's shape (rows, hidden)")?;
    Ok((xt, x, rt, r, w))
}

pub fn def() -> OpDef {
    OpDef {
        name: "fused_add_rmsnorm",
        summary: "residual = x + residual; out = RMSNorm(residual) * weight (f32 math)",
        inputs: vec![
            ArgSpec::req("x", "(rows, hidden)", "f32|bf16|f16", "input"),
            ArgSpec::req(
                "residual",
                "(rows, hidden)",
                "f32|bf16|f16",
                "residual stream",
            ),
            ArgSpec::req("weight", "(hidden,)", "f32|bf16|f16", "gamma"),
        ],
        params: vec![eps_param()],
        outputs: vec![
            ArgSpec::req("out", "(rows, hidden)", "x's dtype", "normalized"),
            ArgSpec::req(
                "residual",
                "(rows, hidden)",
                "residual's dtype",
                "x + residual (f32 sum, stored rounded)",
            ),
        ],
        run: run_op,
    }
}

fn run_op(inputs: &TensorMap, p: &Params) -> Result<TensorMap, OpError> {
    let in_ = Inputs::new("fused_add_rmsnorm", inputs);
    let (xt, x, rt, r, w) = read_add_inputs(&in_)?;
    let o = fused_add_rmsnorm(&x, &r, xt.shape[1], &w, p.float("eps")? as f32)
        .map_err(|m| in_.invalid(m))?;
    Ok(outputs([
        ("out", Tensor::from_f32_as(&xt.shape, &o.out, xt.dtype())),
        (
            "residual",
            Tensor::from_f32_as(&rt.shape, &o.residual, rt.dtype()),
        ),
    ]))
}
