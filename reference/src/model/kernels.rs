//! The model's calls into the op reference (`crate::ops`): one thin adapter per op, so the
//! model reads as the production pipeline does and every numeric detail lives in the ops.
//! The adapters only convert layouts (the model keeps activations token-major, `(t, dim)`;
//! the conv ops take `(batch, dim, seqlen)`) and map op errors to [`ModelError`].

use super::ModelError;
use crate::ops::causal_conv1d_fn::{causal_conv1d_fn, Activation};
use crate::ops::causal_conv1d_update::{causal_conv1d_update, StateBuffer, UpdateDims};
use crate::ops::gated_rmsnorm::{gated_rmsnorm as gated_rmsnorm_op, GateOrder};
use crate::ops::noaux_tc_router::{
    route as route_op, GroupMask, NormMode, RouterConfig, SigmoidMode,
};
use crate::ops::rmsnorm::rmsnorm as rmsnorm_op;
use crate::ops::selective_state_update::{
    selective_state_update as ssu_op, AVals, HeadVals, SsuArgs, SsuConfig, SsuDims, StateCache,
};
use crate::ops::selective_state_update_multi_token::{
    selective_state_update_multi_token as ssu_mt_op, ChainFrom, MtpConfig, StateUpdate,
};

pub(crate) fn op_err(op: &str, e: impl std::fmt::Display) -> ModelError {
    ModelError::Op(format!("{op}: {e}"))
}

/// RMSNorm over rows of `x` (t, n): `x * rsqrt(mean(x²) + eps) * w`, f32 (op `rmsnorm`).
pub fn rmsnorm(x: &[f32], w: &[f32], eps: f32) -> Result<Vec<f32>, ModelError> {
    rmsnorm_op(x, w.len(), w, eps).map_err(|e| op_err("rmsnorm", e))
}

/// Mamba-2's gated RMSNorm, norm_before_gate = False, groups of `group` channels
/// (op `gated_rmsnorm`). x, z (t, d).
pub fn gated_rmsnorm(
    x: &[f32],
    z: &[f32],
    w: &[f32],
    group: usize,
    eps: f32,
) -> Result<Vec<f32>, ModelError> {
    gated_rmsnorm_op(x, z, w.len(), w, group, GateOrder::GateThenNorm, eps)
        .map_err(|e| op_err("gated_rmsnorm", e))
}

/// relu(x)² (op `relu2`).
pub fn relu2(x: &[f32]) -> Vec<f32> {
    crate::ops::relu2::relu2(x)
}

fn to_channel_major(x: &[f32], t: usize, dim: usize) -> Vec<f32> {
    let mut out = vec![0f32; x.len()];
    for i in 0..t {
        for c in 0..dim {
            out[c * t + i] = x[i * dim + c];
        }
    }
    out
}

fn to_token_major(x: &[f32], t: usize, dim: usize) -> Vec<f32> {
    let mut out = vec![0f32; x.len()];
    for c in 0..dim {
        for i in 0..t {
            out[i * dim + c] = x[c * t + i];
        }
    }
    out
}

/// Prefill causal conv + SiLU (op `causal_conv1d_fn`). x (t, dim) token-major; weight
/// (dim, k); `init` (dim, k-1) the previous inputs (oldest first) or zeros. Returns
/// (y (t, dim), final window (dim, k-1)).
pub fn causal_conv1d(
    x: &[f32],
    t: usize,
    dim: usize,
    weight: &[f32],
    bias: Option<&[f32]>,
    k: usize,
    init: Option<&[f32]>,
) -> Result<(Vec<f32>, Vec<f32>), ModelError> {
    let xc = to_channel_major(x, t, dim);
    let o = causal_conv1d_fn(&xc, (1, dim, t), weight, k, bias, init, Activation::Silu)
        .map_err(|e| op_err("causal_conv1d_fn", e))?;
    Ok((to_token_major(&o.out, t, dim), o.final_states))
}

/// Decode / verify conv (op `causal_conv1d_update`, linear state of k-1 columns) over `t`
/// tokens. `state` (dim, k-1) is updated in place; returns (y (t, dim), the window after
/// every token (t, dim, k-1)).
pub fn causal_conv1d_step(
    x: &[f32],
    t: usize,
    dim: usize,
    state: &mut [f32],
    weight: &[f32],
    bias: Option<&[f32]>,
    k: usize,
) -> Result<(Vec<f32>, Vec<f32>), ModelError> {
    let xc = to_channel_major(x, t, dim);
    let dims = UpdateDims {
        batch: 1,
        dim,
        seqlen: t,
        width: k,
        slots: 1,
        state_len: k - 1,
    };
    let o = causal_conv1d_update(
        &xc,
        dims,
        state,
        weight,
        bias,
        StateBuffer::Linear,
        None,
        Activation::Silu,
    )
    .map_err(|e| op_err("causal_conv1d_update", e))?;
    Ok((to_token_major(&o.out, t, dim), o.intermediate))
}

/// Dimensions of the Mamba-2 recurrence.
#[derive(Clone, Copy, Debug)]
pub struct SsmDims {
    pub nheads: usize,
    pub headdim: usize,
    pub ngroups: usize,
    pub dstate: usize,
}

/// Per-head operands of the recurrence: A = -exp(A_log), D, dt_bias (nheads,).
pub struct SsmParams<'a> {
    pub a: &'a [f32],
    pub d: &'a [f32],
    pub dt_bias: &'a [f32],
}

/// Token rows of the recurrence: x (t, nheads*headdim), dt (t, nheads) raw,
/// B, C (t, ngroups*dstate).
pub struct SsmRows<'a> {
    pub x: &'a [f32],
    pub dt: &'a [f32],
    pub b: &'a [f32],
    pub c: &'a [f32],
}

fn ssu_args<'a>(p: &SsmParams<'a>, r: &SsmRows<'a>) -> SsuArgs<'a> {
    let ph = |v: &'a [f32]| HeadVals { v, per_dim: false };
    SsuArgs {
        x: r.x,
        dt: ph(r.dt),
        a: AVals::PerHead(p.a),
        b: r.b,
        c: r.c,
        d: Some(ph(p.d)),
        z: None,
        dt_bias: Some(ph(p.dt_bias)),
        state_batch_indices: None,
    }
}

fn ssu_cfg() -> SsuConfig {
    SsuConfig {
        dt_softplus: true,
        ..SsuConfig::default()
    }
}

/// One decode step (op `selective_state_update`, f32 state, kernel numerics): updates
/// `state` (nheads, headdim, dstate) in place, returns y (nheads*headdim).
pub fn ssu_step(
    dims: SsmDims,
    state: &mut [f32],
    p: &SsmParams<'_>,
    r: &SsmRows<'_>,
) -> Result<Vec<f32>, ModelError> {
    let d = SsuDims {
        batch: 1,
        nheads: dims.nheads,
        dim: dims.headdim,
        dstate: dims.dstate,
        ngroups: dims.ngroups,
    };
    let mut out = vec![0f32; dims.nheads * dims.headdim];
    ssu_op(
        StateCache::F32(state),
        &ssu_args(p, r),
        d,
        &ssu_cfg(),
        &mut out,
    )
    .map_err(|e| op_err("selective_state_update", e))?;
    Ok(out)
}

/// `t` verification steps (op `selective_state_update_multi_token`, `disable_state_update`):
/// `state` is left untouched; returns (y (t, nheads*headdim), the state after every step
/// (t, nheads, headdim, dstate)).
pub fn ssu_verify(
    dims: SsmDims,
    state: &mut [f32],
    t: usize,
    p: &SsmParams<'_>,
    r: &SsmRows<'_>,
) -> Result<(Vec<f32>, Vec<f32>), ModelError> {
    let d = SsuDims {
        batch: 1,
        nheads: dims.nheads,
        dim: dims.headdim,
        dstate: dims.dstate,
        ngroups: dims.ngroups,
    };
    let mut inter = vec![0f32; t * state.len()];
    let mut out = vec![0f32; t * dims.nheads * dims.headdim];
    let cfg = MtpConfig {
        base: ssu_cfg(),
        chain_from: ChainFrom::UnroundedState,
        state_update: StateUpdate::Keep,
    };
    ssu_mt_op(
        StateCache::F32(state),
        StateCache::F32(&mut inter),
        &ssu_args(p, r),
        d,
        t,
        None,
        &cfg,
        &mut out,
    )
    .map_err(|e| op_err("selective_state_update_multi_token", e))?;
    Ok((out, inter))
}

/// Router settings of the model: the transformers (golden) numerics, i.e. torch's sigmoid
/// and `s / (sum + 1e-20) * factor` in f32.
pub fn router_config(
    top_k: usize,
    n_group: usize,
    topk_group: usize,
    norm: bool,
    scale: f32,
) -> RouterConfig {
    RouterConfig {
        top_k,
        n_group,
        topk_group,
        routed_scaling_factor: scale as f64,
        norm_topk_prob: norm,
        norm_mode: NormMode::Fp32DivideThenMultiply,
        sigmoid: SigmoidMode::Exp,
        // transformers' masked_fill(0.0) for dropped groups.
        group_mask: GroupMask::Zero,
    }
}

/// One token's routing: (expert ids, weights), best first.
pub type Route = (Vec<usize>, Vec<f32>);

/// noaux_tc routing of `tokens` rows of fp32 router logits (op `noaux_tc_router`):
/// (expert ids, weights) per token, `top_k` each.
pub fn route(
    logits: &[f32],
    bias: &[f32],
    tokens: usize,
    cfg: &RouterConfig,
) -> Result<Vec<Route>, ModelError> {
    let r = route_op(logits, bias, tokens, bias.len(), cfg)
        .map_err(|e| op_err("noaux_tc_router", e))?;
    let k = r.top_k;
    Ok((0..tokens)
        .map(|t| {
            (
                r.topk_indices[t * k..(t + 1) * k]
                    .iter()
                    .map(|&i| i as usize)
                    .collect(),
                r.topk_weights[t * k..(t + 1) * k].to_vec(),
            )
        })
        .collect())
}
