//! The model's calls into the op reference (`crate::ops`): one thin adapter per op, so the
//! model reads as the production pipeline does and every numeric detail lives in the ops.
//! The adapters only convert layouts (the model keeps activations token-major, `(t, dim)`;
//! the conv ops take `(batch, dim, seqlen)`) and map op errors to [`ModelError`].
//!
//! [`ModelKernels`] is the model's compute backend: every op the network runs goes through
//! it. [`CpuKernels`] (the default) calls the free functions of this module, i.e. the op
//! reference; the GPU crate implements the same trait with its kernels (`gpu::model`).
//! What stays on the host in every backend: embedding gathers, the residual adds, splitting
//! the in_proj output, concatenations and argmax (exact in f32 whatever the device).

use super::weights::Mat;
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
use crate::ops::ssd_chunk_scan::{ssd_chunk_scan as ssd_op, SsdArgs, SsdOutput};

/// A [`ModelError::Op`] naming the op.
pub fn op_err(op: &str, e: impl std::fmt::Display) -> ModelError {
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

/// (t, dim) token-major -> (dim, t) channel-major.
pub fn to_channel_major(x: &[f32], t: usize, dim: usize) -> Vec<f32> {
    crate::ops::causal_conv1d_fn::swap_last_two(x, 1, t, dim)
}

/// (dim, t) channel-major -> (t, dim) token-major.
pub fn to_token_major(x: &[f32], t: usize, dim: usize) -> Vec<f32> {
    crate::ops::causal_conv1d_fn::swap_last_two(x, 1, dim, t)
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
        // transformers 5.17 NemotronHTopkRouter: masked_fill(-inf) for dropped groups (the
        // DeepseekV3 router uses 0.0; fixtures/goldens/noaux_tc_router-transformers-nemotronh-
        // grouped-negbias tells them apart: with 0.0, 16 of its 16 rows pick other experts).
        group_mask: GroupMask::NegInf,
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

/// Head counts of one attention call: `t` query rows of `nq` heads, `nkv` KV heads, `hd` dims.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttnGeometry {
    pub nq: usize,
    pub nkv: usize,
    pub hd: usize,
    pub t: usize,
}

/// GQA causal softmax attention (eager, as transformers' `eager_attention_forward`): query
/// row i sits at absolute position p0 + i and sees keys 0..=p0+i; scale 1/sqrt(head_dim);
/// softmax in f32 with the max subtracted. q (t, nq*hd); keys, vals (len, nkv*hd), len >= p0 + t.
pub fn causal_attention(
    q: &[f32],
    keys: &[f32],
    vals: &[f32],
    p0: usize,
    g: AttnGeometry,
) -> Vec<f32> {
    use rayon::prelude::*;
    let AttnGeometry { nq, nkv, hd, t } = g;
    let kvd = nkv * hd;
    let scale = 1.0 / (hd as f32).sqrt();
    let rep = nq / nkv;
    let mut out = vec![0f32; t * nq * hd];
    out.par_chunks_mut(nq * hd)
        .enumerate()
        .for_each(|(i, orow)| {
            let pos = p0 + i;
            let mut sc = vec![0f32; pos + 1];
            for hh in 0..nq {
                let g = hh / rep;
                let qv = &q[i * nq * hd + hh * hd..i * nq * hd + (hh + 1) * hd];
                let mut mx = f32::NEG_INFINITY;
                for (j, s) in sc.iter_mut().enumerate() {
                    let kv = &keys[j * kvd + g * hd..j * kvd + (g + 1) * hd];
                    let d: f32 = qv.iter().zip(kv).map(|(a, b)| a * b).sum();
                    *s = d * scale;
                    mx = mx.max(*s);
                }
                let mut den = 0f32;
                for s in sc.iter_mut() {
                    *s = (*s - mx).exp();
                    den += *s;
                }
                let o = &mut orow[hh * hd..(hh + 1) * hd];
                for (j, s) in sc.iter().enumerate() {
                    let p = s / den;
                    let vv = &vals[j * kvd + g * hd..j * kvd + (g + 1) * hd];
                    for (a, b) in o.iter_mut().zip(vv) {
                        *a += p * b;
                    }
                }
            }
        });
    out
}

/// Checks the operand sizes of an attention call (both backends), so a bad call is an error
/// rather than a slice panic.
pub fn check_attention(
    q: &[f32],
    keys: &[f32],
    vals: &[f32],
    p0: usize,
    g: AttnGeometry,
) -> Result<(), ModelError> {
    let AttnGeometry { nq, nkv, hd, t } = g;
    let kvd = nkv * hd;
    if nkv == 0 || hd == 0 || !nq.is_multiple_of(nkv) {
        return Err(op_err(
            "attention",
            format!("{nq} query heads are not a multiple of {nkv} KV heads (head_dim {hd})"),
        ));
    }
    if q.len() != t * nq * hd {
        return Err(op_err(
            "attention",
            format!(
                "q has {} values, expected t * nq * hd = {t} * {nq} * {hd}",
                q.len()
            ),
        ));
    }
    if keys.len() != vals.len() || !keys.len().is_multiple_of(kvd) || keys.len() / kvd < p0 + t {
        return Err(op_err(
            "attention",
            format!(
                "keys ({}) / values ({}) must both hold at least p0 + t = {} rows of {kvd}",
                keys.len(),
                vals.len(),
                p0 + t
            ),
        ));
    }
    Ok(())
}

/// The argument checks of the routed-experts path ([`routed_experts_with`], the GPU backend's
/// device-side version): returns the row width `lw` (the latent width) of `lat`.
pub fn check_routed_experts(
    lat: &[f32],
    t: usize,
    topk_indices: &[i64],
    topk_weights: &[f32],
    k: usize,
    experts: &[(Mat, Mat)],
) -> Result<usize, ModelError> {
    let lw = lat.len().checked_div(t).unwrap_or(0);
    if topk_indices.len() != t * k || topk_weights.len() != t * k || lat.len() != t * lw {
        return Err(op_err(
            "routed experts",
            format!(
                "topk_indices has {} and topk_weights {} entries, expected t * k = {t} * {k}; \
                 lat has {} values, expected a multiple of t = {t}",
                topk_indices.len(),
                topk_weights.len(),
                lat.len()
            ),
        ));
    }
    // (t = 0: no row reaches an expert, and lw is unknown.)
    if let Some((e, (up, down))) = experts.iter().enumerate().find(|(_, (up, down))| {
        t > 0 && (up.cols() != lw || down.rows() != lw || down.cols() != up.rows())
    }) {
        return Err(op_err(
            "routed experts",
            format!(
                "expert {e}: up is {} x {} and down {} x {}; expected up (I, {lw}) and down \
                 ({lw}, I) for {lw}-wide rows",
                up.rows(),
                up.cols(),
                down.rows(),
                down.cols()
            ),
        ));
    }
    Ok(lw)
}

/// Routed experts through a backend's `linear` and `relu2` (the composition the GPU backend
/// uses): `moe_permute` on the host, per expert the gathered rows through up, relu², down,
/// then `moe_finalize` (f32 weighted sum in slot order) on the host. Same arguments as
/// [`crate::ops::latent_moe::routed_experts`].
pub fn routed_experts_with(
    kern: &dyn ModelKernels,
    lat: &[f32],
    t: usize,
    topk_indices: &[i64],
    topk_weights: &[f32],
    k: usize,
    experts: &[(Mat, Mat)],
) -> Result<Vec<f32>, ModelError> {
    use crate::ops::moe_finalize::finalize;
    use crate::ops::moe_permute::permute;
    let lw = check_routed_experts(lat, t, topk_indices, topk_weights, k, experts)?;
    let perm = permute(topk_indices, k, experts.len()).map_err(|e| op_err("moe_permute", e))?;
    let mut expert_out = Vec::with_capacity(perm.token.len() * lw);
    for (e, (up, down)) in experts.iter().enumerate() {
        let rows = perm.offsets[e]..perm.offsets[e + 1];
        if rows.is_empty() {
            continue;
        }
        let mut xs = Vec::with_capacity(rows.len() * lw);
        for r in rows.clone() {
            let tok = perm.token[r];
            xs.extend_from_slice(&lat[tok * lw..(tok + 1) * lw]);
        }
        let u = kern.relu2(&kern.linear(&xs, rows.len(), up, None)?)?;
        expert_out.extend(kern.linear(&u, rows.len(), down, None)?);
    }
    Ok(finalize(&expert_out, lw, topk_weights, &perm.inverse, k))
}

/// A Mamba layer's recurrent states held by a backend between decode steps (the GPU keeps them
/// on the device, so a decode step moves only the token's rows, not the 4 MB SSM state of a
/// Super layer). The model turns them back into host vectors ([`LayerState::Mamba`], through
/// [`LayerState::make_host`]) before anything reads them on the host: a prefill continuing
/// from the cache, a verification pass, a promotion.
pub trait ResidentMamba: Send + Sync + std::fmt::Debug {
    /// The states as host vectors: (conv window (conv_dim, kernel-1), oldest first; SSM state
    /// (nheads, headdim, dstate)).
    fn download(&self) -> Result<(Vec<f32>, Vec<f32>), ModelError>;
    /// For the backend that made it (to reach its own buffers).
    fn as_any_mut(&mut self) -> &mut dyn std::any::Any;
}

/// Per-layer decode state.
#[derive(Debug)]
pub enum LayerState {
    Mamba {
        /// previous conv inputs (conv_dim, kernel-1), oldest first
        conv: Vec<f32>,
        /// SSM state (nheads, headdim, dstate)
        ssm: Vec<f32>,
    },
    /// A Mamba layer's states kept by the backend since its last decode step.
    MambaResident(Box<dyn ResidentMamba>),
    Attention {
        /// (len, kv_heads, head_dim)
        k: Vec<f32>,
        v: Vec<f32>,
    },
    Stateless,
}

impl LayerState {
    /// Brings backend-resident Mamba states back to host vectors (a no-op for every other
    /// state).
    pub fn make_host(&mut self) -> Result<(), ModelError> {
        if let LayerState::MambaResident(r) = self {
            let (conv, ssm) = r.download()?;
            *self = LayerState::Mamba { conv, ssm };
        }
        Ok(())
    }
}

/// Operands of one Mamba decode step ([`ModelKernels::mamba_decode`]) besides the token's rows.
pub struct MambaStep<'a> {
    pub dims: SsmDims,
    /// conv channels: xBC = [x (nheads*headdim) | B (ngroups*dstate) | C (ngroups*dstate)]
    pub conv_dim: usize,
    /// conv kernel width
    pub conv_k: usize,
    /// (conv_dim, conv_k)
    pub conv_w: &'a [f32],
    pub conv_b: Option<&'a [f32]>,
    pub params: SsmParams<'a>,
}

/// Splits conv outputs (t, conv_dim) into x (t, d_inner), B and C (t, ngroups*dstate).
pub fn split_xbc(
    xa: &[f32],
    conv_dim: usize,
    d_inner: usize,
    gs: usize,
) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let t = xa.len() / conv_dim.max(1);
    let mut xs = Vec::with_capacity(t * d_inner);
    let mut bs = Vec::with_capacity(t * gs);
    let mut cs = Vec::with_capacity(t * gs);
    for r in xa.chunks_exact(conv_dim) {
        xs.extend_from_slice(&r[..d_inner]);
        bs.extend_from_slice(&r[d_inner..d_inner + gs]);
        cs.extend_from_slice(&r[d_inner + gs..]);
    }
    (xs, bs, cs)
}

/// [`ModelKernels::mamba_decode`] on host states: [`ModelKernels::causal_conv1d_step`] over the
/// token, the split of xBC, then [`ModelKernels::ssu_step`].
pub fn mamba_decode_host(
    kern: &dyn ModelKernels,
    conv: &mut [f32],
    ssm: &mut [f32],
    m: &MambaStep<'_>,
    xbc: &[f32],
    dt: &[f32],
) -> Result<Vec<f32>, ModelError> {
    let d = m.dims;
    let (xa, _) =
        kern.causal_conv1d_step(xbc, 1, m.conv_dim, conv, m.conv_w, m.conv_b, m.conv_k)?;
    let (xs, bs, cs) = split_xbc(&xa, m.conv_dim, d.nheads * d.headdim, d.ngroups * d.dstate);
    let rows = SsmRows {
        x: &xs,
        dt,
        b: &bs,
        c: &cs,
    };
    kern.ssu_step(d, ssm, &m.params, &rows)
}

/// The default [`ModelKernels::mamba_decode`]: resident states back to the host, then
/// [`mamba_decode_host`].
pub fn mamba_decode_default(
    kern: &dyn ModelKernels,
    st: &mut LayerState,
    m: &MambaStep<'_>,
    xbc: &[f32],
    dt: &[f32],
) -> Result<Vec<f32>, ModelError> {
    st.make_host()?;
    match st {
        LayerState::Mamba { conv, ssm } => mamba_decode_host(kern, conv, ssm, m, xbc, dt),
        _ => Err(ModelError::Input(
            "mamba_decode: the layer's cache is not a Mamba state".into(),
        )),
    }
}

/// The compute backend of the model: every op the network runs (see the module doc for what
/// stays on the host). Activations are f32, token-major `(t, features)`; every method has the
/// semantics of the free function of the same name in this module (the CPU reference).
pub trait ModelKernels: Send + Sync {
    /// Short name of the backend (`cpu`, `gpu`).
    fn name(&self) -> &str;
    /// `y = x · Wᵀ (+ bias)`: x (t, in), W (out, in), y (t, out); f32 accumulation.
    fn linear(
        &self,
        x: &[f32],
        t: usize,
        w: &Mat,
        bias: Option<&[f32]>,
    ) -> Result<Vec<f32>, ModelError>;
    /// [`rmsnorm`]
    fn rmsnorm(&self, x: &[f32], w: &[f32], eps: f32) -> Result<Vec<f32>, ModelError>;
    /// [`gated_rmsnorm`]
    fn gated_rmsnorm(
        &self,
        x: &[f32],
        z: &[f32],
        w: &[f32],
        group: usize,
        eps: f32,
    ) -> Result<Vec<f32>, ModelError>;
    /// [`relu2`]
    fn relu2(&self, x: &[f32]) -> Result<Vec<f32>, ModelError>;
    /// [`causal_conv1d`]
    #[allow(clippy::too_many_arguments)]
    fn causal_conv1d(
        &self,
        x: &[f32],
        t: usize,
        dim: usize,
        weight: &[f32],
        bias: Option<&[f32]>,
        k: usize,
        init: Option<&[f32]>,
    ) -> Result<(Vec<f32>, Vec<f32>), ModelError>;
    /// [`causal_conv1d_step`]
    #[allow(clippy::too_many_arguments)]
    fn causal_conv1d_step(
        &self,
        x: &[f32],
        t: usize,
        dim: usize,
        state: &mut [f32],
        weight: &[f32],
        bias: Option<&[f32]>,
        k: usize,
    ) -> Result<(Vec<f32>, Vec<f32>), ModelError>;
    /// The Mamba-2 chunked scan (prefill), as [`crate::ops::ssd_chunk_scan::ssd_chunk_scan`].
    fn ssd_chunk_scan(&self, args: &SsdArgs<'_>, chunk: usize) -> Result<SsdOutput, ModelError>;
    /// [`ssu_step`]
    fn ssu_step(
        &self,
        dims: SsmDims,
        state: &mut [f32],
        p: &SsmParams<'_>,
        r: &SsmRows<'_>,
    ) -> Result<Vec<f32>, ModelError>;
    /// [`ssu_verify`]
    fn ssu_verify(
        &self,
        dims: SsmDims,
        state: &mut [f32],
        t: usize,
        p: &SsmParams<'_>,
        r: &SsmRows<'_>,
    ) -> Result<(Vec<f32>, Vec<f32>), ModelError>;
    /// [`route`]
    fn route(
        &self,
        logits: &[f32],
        bias: &[f32],
        tokens: usize,
        cfg: &RouterConfig,
    ) -> Result<Vec<Route>, ModelError>;
    /// [`causal_attention`] (operands checked by [`check_attention`]).
    fn attention(
        &self,
        q: &[f32],
        keys: &[f32],
        vals: &[f32],
        p0: usize,
        g: AttnGeometry,
    ) -> Result<Vec<f32>, ModelError>;
    /// Routed experts of a MoE layer, as [`crate::ops::latent_moe::routed_experts`]; the
    /// default composes [`ModelKernels::linear`] and [`ModelKernels::relu2`]
    /// ([`routed_experts_with`]).
    #[allow(clippy::too_many_arguments)]
    fn routed_experts(
        &self,
        lat: &[f32],
        t: usize,
        topk_indices: &[i64],
        topk_weights: &[f32],
        k: usize,
        experts: &[(Mat, Mat)],
    ) -> Result<Vec<f32>, ModelError> {
        routed_experts_with(
            self.as_dyn(),
            lat,
            t,
            topk_indices,
            topk_weights,
            k,
            experts,
        )
    }
    /// One single-token decode step of a Mamba layer on its cached states `st`: conv update +
    /// SiLU of the token's xBC (conv_dim), then the state update with its dt (nheads) row;
    /// returns y (nheads*headdim) and leaves the new states in `st`. The default runs
    /// [`mamba_decode_host`] on host vectors (resident states are downloaded first); a backend
    /// may keep the states resident instead ([`LayerState::MambaResident`]).
    fn mamba_decode(
        &self,
        st: &mut LayerState,
        m: &MambaStep<'_>,
        xbc: &[f32],
        dt: &[f32],
    ) -> Result<Vec<f32>, ModelError> {
        mamba_decode_default(self.as_dyn(), st, m, xbc, dt)
    }
    /// Whether [`ModelKernels::mamba_decode`] is the backend's own (it may keep states
    /// resident) rather than the default composition of the conv step and the state update.
    fn own_mamba_decode(&self) -> bool {
        false
    }
    /// `self` as a trait object (for default methods).
    fn as_dyn(&self) -> &dyn ModelKernels;
}

/// The CPU reference backend: the free functions of this module (the model's numerics).
#[derive(Clone, Copy, Debug, Default)]
pub struct CpuKernels;

impl ModelKernels for CpuKernels {
    fn name(&self) -> &str {
        "cpu"
    }
    fn as_dyn(&self) -> &dyn ModelKernels {
        self
    }
    fn linear(
        &self,
        x: &[f32],
        t: usize,
        w: &Mat,
        bias: Option<&[f32]>,
    ) -> Result<Vec<f32>, ModelError> {
        if x.len() != t * w.cols() {
            return Err(op_err(
                "linear",
                format!(
                    "x has {} values, expected t * in = {t} * {}",
                    x.len(),
                    w.cols()
                ),
            ));
        }
        Ok(super::linear::linear(x, t, w, bias))
    }
    fn rmsnorm(&self, x: &[f32], w: &[f32], eps: f32) -> Result<Vec<f32>, ModelError> {
        rmsnorm(x, w, eps)
    }
    fn gated_rmsnorm(
        &self,
        x: &[f32],
        z: &[f32],
        w: &[f32],
        group: usize,
        eps: f32,
    ) -> Result<Vec<f32>, ModelError> {
        gated_rmsnorm(x, z, w, group, eps)
    }
    fn relu2(&self, x: &[f32]) -> Result<Vec<f32>, ModelError> {
        Ok(relu2(x))
    }
    fn causal_conv1d(
        &self,
        x: &[f32],
        t: usize,
        dim: usize,
        weight: &[f32],
        bias: Option<&[f32]>,
        k: usize,
        init: Option<&[f32]>,
    ) -> Result<(Vec<f32>, Vec<f32>), ModelError> {
        causal_conv1d(x, t, dim, weight, bias, k, init)
    }
    fn causal_conv1d_step(
        &self,
        x: &[f32],
        t: usize,
        dim: usize,
        state: &mut [f32],
        weight: &[f32],
        bias: Option<&[f32]>,
        k: usize,
    ) -> Result<(Vec<f32>, Vec<f32>), ModelError> {
        causal_conv1d_step(x, t, dim, state, weight, bias, k)
    }
    fn ssd_chunk_scan(&self, args: &SsdArgs<'_>, chunk: usize) -> Result<SsdOutput, ModelError> {
        ssd_op(args, chunk).map_err(|e| op_err("ssd_chunk_scan", e))
    }
    fn ssu_step(
        &self,
        dims: SsmDims,
        state: &mut [f32],
        p: &SsmParams<'_>,
        r: &SsmRows<'_>,
    ) -> Result<Vec<f32>, ModelError> {
        ssu_step(dims, state, p, r)
    }
    fn ssu_verify(
        &self,
        dims: SsmDims,
        state: &mut [f32],
        t: usize,
        p: &SsmParams<'_>,
        r: &SsmRows<'_>,
    ) -> Result<(Vec<f32>, Vec<f32>), ModelError> {
        ssu_verify(dims, state, t, p, r)
    }
    fn route(
        &self,
        logits: &[f32],
        bias: &[f32],
        tokens: usize,
        cfg: &RouterConfig,
    ) -> Result<Vec<Route>, ModelError> {
        route(logits, bias, tokens, cfg)
    }
    fn attention(
        &self,
        q: &[f32],
        keys: &[f32],
        vals: &[f32],
        p0: usize,
        g: AttnGeometry,
    ) -> Result<Vec<f32>, ModelError> {
        check_attention(q, keys, vals, p0, g)?;
        Ok(causal_attention(q, keys, vals, p0, g))
    }
    fn routed_experts(
        &self,
        lat: &[f32],
        t: usize,
        topk_indices: &[i64],
        topk_weights: &[f32],
        k: usize,
        experts: &[(Mat, Mat)],
    ) -> Result<Vec<f32>, ModelError> {
        crate::ops::latent_moe::routed_experts(lat, t, topk_indices, topk_weights, k, experts)
            .map_err(|e| op_err("latent_moe", e))
    }
}
