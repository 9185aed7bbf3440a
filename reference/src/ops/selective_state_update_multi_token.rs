//! `selective_state_update_multi_token`: T decode steps per batch row (MTP / speculative
//! verification, SPEC.md "Multi-token"), each step the arithmetic of
//! [`selective_state_update`](super::selective_state_update).
//!
//! - Step t of row b reads token row `(b, t)` of `x, dt, z, B, C` and starts from: the cache slot
//!   (t = 0); the state after step t-1; or, with `parent_indices[b, t] = p >= 0` (EAGLE tree),
//!   the state after step p (p < t). `-1` means "the previous step".
//! - The state carried from step to step is [`ChainFrom`]: the unrounded fp32 state (default,
//!   as the kernels keep it in registers) or the state as stored (what T separate
//!   single-token calls do).
//! - `intermediate_states[b, t]` receives the state after step t in the state dtype (int16 with
//!   its own `intermediate_state_scale`). Stochastic rounding of step t uses Philox key
//!   `seed + t` (wrapping) and the element offsets of the row's cache slot, so step t rounds
//!   exactly as a single-token call with `seed + t` would.
//! - Unless `disable_state_update`, the cache slot receives `intermediate_states[b, T-1]`
//!   (bit for bit, with its scale).
//! - Pad rows (slot = pad_slot_id): `zero_output` writes zero `out` and zero intermediate states;
//!   `compute_from_zero_state` starts from a zero state and stores its intermediate states with
//!   round-to-nearest (a pad row has no slot, hence no SR offsets). The cache is never written.

use super::selective_state_update::{
    blocks_per_row, cache_of, check_rounding, common_params, parse_config, parse_inputs, relabel,
    resolve_slots, row_round, state_batch_indices_arg, Block, Core, OutFrom, PadMode, SsuArgs,
    SsuConfig, SsuDims, StateCache,
};
use crate::op::{self, ArgSpec, Inputs, OpDef, OpError, ParamKind, ParamSpec, Params};
use crate::tensor::{DType, Tensor, TensorMap};
use rayon::prelude::*;

const OP: &str = "selective_state_update_multi_token";

/// Which state step t+1 starts from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChainFrom {
    /// The kernels: the fp32 state of step t, before rounding to the state dtype.
    UnroundedState,
    /// The state as stored in `intermediate_states[b, t]` (T single-token calls).
    StoredState,
}

/// Whether the cache slot receives the state after the last step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StateUpdate {
    Write,
    /// `disable_state_update`: verification only; the cache is left as it was.
    Keep,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MtpConfig {
    pub base: SsuConfig,
    pub chain_from: ChainFrom,
    pub state_update: StateUpdate,
}

fn invalid(msg: String) -> OpError {
    OpError::Invalid { op: OP.into(), msg }
}

/// T steps for every batch row.
///
/// - `state`: (slots, nheads, dim, dstate) cache, updated in place unless `StateUpdate::Keep`;
/// - `intermediate`: (batch, T, nheads, dim, dstate), same dtype, fully written;
/// - `args`: token rows `r = b*T + t`: x (batch, T, nheads, dim), B/C (batch, T, ngroups, dstate);
///   `state_batch_indices` has `batch` entries;
/// - `dims.batch` = batch rows; `parents`: (batch, T) or absent;
/// - `out`: (batch, T, nheads, dim).
#[allow(clippy::too_many_arguments)]
pub fn selective_state_update_multi_token(
    state: StateCache<'_>,
    intermediate: StateCache<'_>,
    args: &SsuArgs<'_>,
    dims: SsuDims,
    t_len: usize,
    parents: Option<&[i64]>,
    cfg: &MtpConfig,
    out: &mut [f32],
) -> Result<(), OpError> {
    let base = &cfg.base;
    let core = Core {
        args,
        dims,
        dt_softplus: base.dt_softplus,
    };
    let SsuDims {
        batch,
        nheads,
        dim,
        dstate,
        ..
    } = dims;
    core.check(batch * t_len, batch)
        .map_err(|e| relabel(e, OP))?;
    check_rounding(base, state.is_f16()).map_err(|e| relabel(e, OP))?;
    let kind = state.kind();
    if intermediate.kind() != kind {
        return Err(invalid(format!(
            "intermediate states are {:?} but the state is {kind:?}; they must match",
            intermediate.kind()
        )));
    }
    let per_slot = nheads * dim * dstate;
    let (state_len, inter_len) = (state_len(&state), state_len(&intermediate));
    if state_len % per_slot != 0 || inter_len != batch * t_len * per_slot {
        return Err(invalid(format!(
            "state has {state_len} elements (want a multiple of {per_slot}) and intermediate \
             states {inter_len} (want batch*T*nheads*dim*dstate = {})",
            batch * t_len * per_slot
        )));
    }
    if out.len() != batch * t_len * nheads * dim {
        return Err(invalid(format!(
            "'out' has {} elements, expected batch*T*nheads*dim = {}",
            out.len(),
            batch * t_len * nheads * dim
        )));
    }
    if let Some(p) = parents {
        if p.len() != batch * t_len {
            return Err(invalid(format!(
                "parent_indices has {} entries, expected batch*T = {}",
                p.len(),
                batch * t_len
            )));
        }
        for (i, &v) in p.iter().enumerate() {
            let (b, t) = (i / t_len, i % t_len);
            if v != -1 && (v < 0 || v as u64 >= t as u64) {
                return Err(invalid(format!(
                    "parent_indices[{b}, {t}] = {v}: a parent must be an earlier step \
                     (0..{t}) or -1 (the previous step)"
                )));
            }
        }
    }
    if t_len == 0 {
        return Ok(());
    }
    let slots = resolve_slots(
        args.state_batch_indices,
        batch,
        state_len / per_slot,
        base.pad_slot_id,
    )
    .map_err(|e| relabel(e, OP))?;
    let mains = blocks_per_row(state.into_blocks(dim, dstate), &slots, nheads);

    // Regroup the (b, t, h)-ordered intermediate blocks and out rows per (b, h).
    let mut inter: Vec<Option<Block>> = intermediate
        .into_blocks(dim, dstate)
        .into_iter()
        .map(Some)
        .collect();
    let mut outs: Vec<Option<&mut [f32]>> = out.chunks_mut(dim).map(Some).collect();
    let mut items = Vec::with_capacity(batch * nheads);
    for (i, main) in mains.into_iter().enumerate() {
        let (b, h) = (i / nheads, i % nheads);
        let mut ib = Vec::with_capacity(t_len);
        let mut ob = Vec::with_capacity(t_len);
        for t in 0..t_len {
            let k = (b * t_len + t) * nheads + h;
            if let (Some(x), Some(o)) = (inter[k].take(), outs[k].take()) {
                ib.push(x);
                ob.push(o);
            }
        }
        items.push((main, ib, ob));
    }

    let need_stored =
        base.out_from == OutFrom::StoredState || cfg.chain_from == ChainFrom::StoredState;
    items.into_par_iter().enumerate().for_each_init(
        || {
            (
                vec![0f32; dstate],
                vec![0f32; dstate],
                vec![0f32; t_len * dim * dstate],
            )
        },
        |(buf, stored, hist), (i, (mut main, mut ib, mut ob))| {
            let (b, h) = (i / nheads, i % nheads);
            let slot = slots[b];
            if slot.is_none() && base.pad_mode == PadMode::ZeroOutput {
                for (blk, o) in ib.iter_mut().zip(ob.iter_mut()) {
                    blk.fill_zero();
                    o.fill(0.0);
                }
                return;
            }
            for t in 0..t_len {
                let r = b * t_len + t;
                let from = match (t, parents.map(|p| p[r])) {
                    (0, _) => None,
                    (_, Some(p)) if p >= 0 => Some(p as usize),
                    _ => Some(t - 1),
                };
                for d in 0..dim {
                    match (from, &main) {
                        (Some(p), _) => {
                            buf.copy_from_slice(&hist[(p * dim + d) * dstate..][..dstate])
                        }
                        (None, Some(m)) => m.load_row(d, buf),
                        (None, None) => buf.fill(0.0),
                    }
                    core.advance(r, h, d, buf);
                    let rr = match slot {
                        Some(s) => row_round(base.rounding, t as u64, s, h, d, dims),
                        None => row_round(
                            super::selective_state_update::Rounding::Nearest,
                            0,
                            0,
                            h,
                            d,
                            dims,
                        ),
                    };
                    ib[t].store_row(d, buf, rr, need_stored.then_some(&mut stored[..]));
                    let src: &[f32] = if base.out_from == OutFrom::StoredState {
                        stored
                    } else {
                        buf
                    };
                    ob[t][d] = core.out(r, h, d, src);
                    let carry: &[f32] = if cfg.chain_from == ChainFrom::StoredState {
                        stored
                    } else {
                        buf
                    };
                    hist[(t * dim + d) * dstate..][..dstate].copy_from_slice(carry);
                }
            }
            if cfg.state_update == StateUpdate::Write {
                if let Some(m) = main.as_mut() {
                    m.copy_from(&ib[t_len - 1]);
                }
            }
        },
    );
    Ok(())
}

fn state_len(s: &StateCache) -> usize {
    match s {
        StateCache::F32(v) => v.len(),
        StateCache::Bf16(v) | StateCache::F16(v) => v.len(),
        StateCache::I16 { q, .. } => q.len(),
    }
}

/// The op description.
pub fn def() -> OpDef {
    let mut params = common_params();
    params.push(ParamSpec::new(
        "disable_state_update",
        ParamKind::Bool,
        Some("false"),
        "true: verification only, the output 'state' equals the input state",
    ));
    params.push(ParamSpec::new(
        "chain_from",
        ParamKind::Enum(&["unrounded_state", "stored_state"]),
        Some("unrounded_state"),
        "state carried between steps: fp32 (kernels) or as stored (T single-token calls)",
    ));
    OpDef {
        name: OP,
        summary: "T Mamba-2 decode steps per row (MTP verify), with every intermediate state",
        inputs: vec![
            ArgSpec::req(
                "state",
                "(cache, nheads, dim, dstate)",
                "f32|bf16|f16|i16",
                "SSM state cache; i16 needs state_scale",
            ),
            ArgSpec::req("x", "(batch, T, nheads, dim)", "f32|bf16|f16", "input"),
            ArgSpec::req(
                "dt",
                "(batch, T, nheads, dim) | (batch, T, nheads)",
                "f32|bf16|f16",
                "time step",
            ),
            ArgSpec::req(
                "A",
                "(nheads,) | (nheads, dim, dstate)",
                "f32|bf16|f16",
                "decay",
            ),
            ArgSpec::req(
                "B",
                "(batch, T, ngroups, dstate)",
                "f32|bf16|f16",
                "input proj.",
            ),
            ArgSpec::req(
                "C",
                "(batch, T, ngroups, dstate)",
                "f32|bf16|f16",
                "output proj.",
            ),
            ArgSpec::opt("D", "(nheads, dim) | (nheads,)", "f32|bf16|f16", "skip"),
            ArgSpec::opt("z", "(batch, T, nheads, dim)", "f32|bf16|f16", "gate"),
            ArgSpec::opt(
                "dt_bias",
                "(nheads, dim) | (nheads,)",
                "f32|bf16|f16",
                "dt bias",
            ),
            state_batch_indices_arg(),
            ArgSpec::opt(
                "state_scale",
                "(cache, nheads, dim)",
                "f32",
                "int16 state only: decode scale",
            ),
            ArgSpec::opt(
                "parent_indices",
                "(batch, T)",
                "i32|i64",
                "EAGLE tree: step t starts from the state after step parent (< t); -1 = t-1",
            ),
        ],
        params,
        outputs: vec![
            ArgSpec::req("out", "(batch, T, nheads, dim)", "x's dtype", "output"),
            ArgSpec::req(
                "intermediate_states",
                "(batch, T, nheads, dim, dstate)",
                "state's dtype",
                "state after every step",
            ),
            ArgSpec::req(
                "state",
                "(cache, nheads, dim, dstate)",
                "state's dtype",
                "cache after the last step (unchanged with disable_state_update)",
            ),
            ArgSpec::opt("state_scale", "(cache, nheads, dim)", "f32", "int16 only"),
            ArgSpec::opt(
                "intermediate_state_scale",
                "(batch, T, nheads, dim)",
                "f32",
                "int16 only",
            ),
        ],
        run: run_op,
    }
}

fn run_op(inputs: &TensorMap, p: &Params) -> Result<TensorMap, OpError> {
    let inp = Inputs::new(OP, inputs);
    let base = parse_config(OP, p)?;
    let cfg = MtpConfig {
        base,
        chain_from: match p.str("chain_from")? {
            "stored_state" => ChainFrom::StoredState,
            _ => ChainFrom::UnroundedState,
        },
        state_update: if p.bool("disable_state_update")? {
            StateUpdate::Keep
        } else {
            StateUpdate::Write
        },
    };
    let mut parsed = parse_inputs(&inp, true)?;
    let dims = parsed.dims;
    let t_len = parsed.t_len;
    let parents = match inp.opt_int("parent_indices")? {
        None => None,
        Some((t, v)) => {
            inp.shape("parent_indices", t, &[dims.batch, t_len], "(batch, T)")?;
            Some(v)
        }
    };
    let inter_shape = [dims.batch, t_len, dims.nheads, dims.dim, dims.dstate];
    let dtype = parsed.state.dtype();
    let n_inter: usize = inter_shape.iter().product();
    let mut inter = Tensor::from_f32_as(&inter_shape, &vec![0f32; n_inter], dtype);
    let mut inter_scale = (dtype == DType::I16).then(|| vec![1f32; n_inter / dims.dstate]);
    let mut out = vec![0f32; dims.batch * t_len * dims.nheads * dims.dim];
    let (mut state, mut scale) = parsed.take_state();
    {
        let cache = cache_of(&mut state, &mut scale, OP, "state")?;
        let ic = cache_of(&mut inter, &mut inter_scale, OP, "intermediate_states")?;
        selective_state_update_multi_token(
            cache,
            ic,
            &parsed.args(),
            dims,
            t_len,
            parents.as_deref(),
            &cfg,
            &mut out,
        )?;
    }
    let mut m = op::outputs([
        ("out", parsed.out_tensor(&out)),
        ("intermediate_states", inter),
        ("state", state),
    ]);
    if let (Some(s), Some(is)) = (scale, inter_scale) {
        m.insert("state_scale".into(), parsed.scale_tensor(s));
        m.insert(
            "intermediate_state_scale".into(),
            Tensor::from_f32(&inter_shape[..4], is),
        );
    }
    Ok(m)
}
