//! Gated RMSNorm (Mamba-2's `RMSNormGated` / `rmsnorm_fn` with z), SPEC.md "Fused quantizing
//! epilogues". Per row, per group of `group_size` columns, f32 math:
//! - gate then norm (norm_before_gate = false, Nemotron 3 Super): g = x * silu(z);
//!   y = g * rsqrt(mean_group(g^2) + eps) * weight;
//! - norm then gate (norm_before_gate = true): y = x * rsqrt(mean_group(x^2) + eps) * weight * silu(z).
//!
//! out is rounded to x's dtype.

use super::rmsnorm::{eps_param, read_x_weight, rstd};
use super::ssd_chunk_scan::silu;
use crate::op::{outputs, ArgSpec, Inputs, OpDef, OpError, ParamKind, ParamSpec, Params};
use crate::tensor::{Tensor, TensorMap};
use rayon::prelude::*;

/// Where the z gate applies (upstream `norm_before_gate`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GateOrder {
    /// norm_before_gate = false: normalize x * silu(z).
    GateThenNorm,
    /// norm_before_gate = true: normalize x, then multiply by silu(z).
    NormThenGate,
}

/// - `x`, `z`: (rows, d); `weight`: (d,); `group_size` divides d
pub fn gated_rmsnorm(
    x: &[f32],
    z: &[f32],
    d: usize,
    weight: &[f32],
    group_size: usize,
    order: GateOrder,
    eps: f32,
) -> Result<Vec<f32>, String> {
    if d == 0 || !x.len().is_multiple_of(d) || z.len() != x.len() || weight.len() != d {
        return Err(format!(
            "x has {} elements, z {}, weight {}; expected rows * d twice and d = {d}",
            x.len(),
            z.len(),
            weight.len()
        ));
    }
    if group_size == 0 || !d.is_multiple_of(group_size) {
        return Err(format!("group_size {group_size} does not divide d = {d}"));
    }
    let mut out = vec![0f32; x.len()];
    out.par_chunks_mut(group_size)
        .zip(x.par_chunks(group_size).zip(z.par_chunks(group_size)))
        .enumerate()
        .for_each(|(i, (o, (xg, zg)))| {
            let c0 = (i * group_size) % d;
            let wg = &weight[c0..c0 + group_size];
            match order {
                GateOrder::GateThenNorm => {
                    for ((o, &a), &zz) in o.iter_mut().zip(xg).zip(zg) {
                        *o = a * silu(zz);
                    }
                    let r = rstd(o, eps);
                    for (o, &w) in o.iter_mut().zip(wg) {
                        *o = *o * r * w;
                    }
                }
                GateOrder::NormThenGate => {
                    let r = rstd(xg, eps);
                    for (((o, &a), &zz), &w) in o.iter_mut().zip(xg).zip(zg).zip(wg) {
                        *o = a * r * w * silu(zz);
                    }
                }
            }
        });
    Ok(out)
}

pub(crate) fn gated_params() -> Vec<ParamSpec> {
    vec![
        ParamSpec::new(
            "group_size",
            ParamKind::Int,
            None,
            "columns per normalization group (default d; Super: d_inner / n_groups = 1024)",
        ),
        ParamSpec::new(
            "norm_before_gate",
            ParamKind::Bool,
            Some("false"),
            "false: normalize x*silu(z) (Mamba-2); true: normalize x then multiply by silu(z)",
        ),
        eps_param(),
    ]
}

/// Reads x, z, weight and the gating params; returns (x tensor, x, z, weight, group, order).
#[allow(clippy::type_complexity)]
pub(crate) fn read_gated<'a>(
    in_: &Inputs<'a>,
    p: &Params,
) -> Result<(&'a Tensor, Vec<f32>, Vec<f32>, Vec<f32>, usize, GateOrder), OpError> {
    let (xt, x, w) = read_x_weight(in_)?;
    let (zt, z) = in_.float("z", 2)?;
    in_.shape("z", zt, &xt.shape, "x's shape (rows, d)")?;
    let d = xt.shape[1];
    let group = match p.opt_int("group_size")? {
        None => d,
        Some(g) if g > 0 && (d as i64) % g == 0 => g as usize,
        Some(g) => {
            return Err(OpError::Param {
                op: in_.op.into(),
                name: "group_size".into(),
                msg: format!("{g} does not divide d = {d}; pass a positive divisor of d"),
            })
        }
    };
    let order = if p.bool("norm_before_gate")? {
        GateOrder::NormThenGate
    } else {
        GateOrder::GateThenNorm
    };
    Ok((xt, x, z, w, group, order))
}

pub fn def() -> OpDef {
    OpDef {
        name: "gated_rmsnorm",
        summary: "Mamba-2 gated RMSNorm: RMSNorm(x * silu(z)) * weight per group (f32 math)",
        inputs: vec![
            ArgSpec::req("x", "(rows, d)", "f32|bf16|f16", "input"),
            ArgSpec::req("z", "(rows, d)", "f32|bf16|f16", "gate"),
            ArgSpec::req("weight", "(d,)", "f32|bf16|f16", "gamma"),
        ],
        params: gated_params(),
        outputs: vec![ArgSpec::req("out", "(rows, d)", "x's dtype", "normalized")],
        run: run_op,
    }
}

fn run_op(inputs: &TensorMap, p: &Params) -> Result<TensorMap, OpError> {
    let in_ = Inputs::new("gated_rmsnorm", inputs);
    let (xt, x, z, w, group, order) = read_gated(&in_, p)?;
    let out = gated_rmsnorm(
        &x,
        &z,
        xt.shape[1],
        &w,
        group,
        order,
        p.float("eps")? as f32,
    )
    .map_err(|m| in_.invalid(m))?;
    Ok(outputs([(
        "out",
        Tensor::from_f32_as(&xt.shape, &out, xt.dtype()),
    )]))
}
