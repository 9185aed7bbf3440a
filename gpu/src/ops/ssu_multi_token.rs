//! `selective_state_update_multi_token` (MTP verification: T decode steps per row with every
//! intermediate state) and `mamba_cache_promote` (acceptance) on the GPU
//! (gpu/kernels/ssu_multi_token.cu), against reference/src/ops/selective_state_update_multi_token.rs
//! and reference/src/ops/mamba_cache_promote.rs.
//!
//! Inputs are validated by the reference's own parsers (`parse_inputs(.., multi = true)`,
//! `parse_config`, `resolve_slots`), so the kernels see only consistent sizes.

use super::selective_state_update::{rounding_fields, state_dt_code, upload_operands};
use super::{GpuOp, RunOpts};
use crate::runtime::{cfg, Gpu};
use crate::GpuError;
use cudarc::driver::{DeviceRepr, PushKernelArg};
use reference::op::{Inputs, Params};
use reference::ops::selective_state_update::{
    parse_config, parse_inputs, resolve_slots, OutFrom, PadMode, Rounding,
};
use reference::{DType, Tensor, TensorMap};

const OP: &str = "selective_state_update_multi_token";
const PROMOTE: &str = "mamba_cache_promote";
/// dstate limit: 32 lanes x 16 register slots.
pub const MAX_DSTATE: usize = 512;
const WARPS: u32 = 4;

pub fn ops() -> Vec<GpuOp> {
    vec![
        GpuOp {
            name: OP,
            versions: &["v1"],
            run,
            applicable,
        },
        GpuOp {
            name: PROMOTE,
            versions: &["v1"],
            run: run_promote,
            applicable: |_, _, _| None,
        },
    ]
}

pub fn applicable(_version: &str, inputs: &TensorMap, _p: &Params) -> Option<String> {
    let dstate = *inputs.get("state")?.shape.last()?;
    (dstate > MAX_DSTATE).then(|| {
        format!("dstate {dstate} > {MAX_DSTATE} (v1 keeps a row in registers, 16 per lane)")
    })
}

/// `struct SsuMtParams` of the .cu file (27 x 64-bit, same order).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct SsuMtParams {
    batch: i64,
    t_len: i64,
    nheads: i64,
    dim: i64,
    dstate: i64,
    ngroups: i64,
    pad_slot_id: i64,
    dt_per_dim: i64,
    a_full: i64,
    d_per_dim: i64,
    bias_per_dim: i64,
    has_d: i64,
    has_z: i64,
    has_bias: i64,
    has_sbi: i64,
    has_parents: i64,
    softplus: i64,
    pad_mode: i64,
    out_from: i64,
    state_dt: i64,
    sr: i64,
    sr_mapping: i64,
    rounds: i64,
    chain_stored: i64,
    write_cache: i64,
    seed: u64,
}
// SAFETY: repr(C) plain-old-data of 64-bit fields, the layout of `SsuMtParams` in the .cu file.
unsafe impl DeviceRepr for SsuMtParams {}

/// `struct PromoteParams` of the .cu file.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct PromoteParams {
    batch: i64,
    t_len: i64,
    bytes: i64,
    slots: i64,
    pad_slot_id: i64,
    has_sbi: i64,
}
// SAFETY: as above.
unsafe impl DeviceRepr for PromoteParams {}

fn drv(what: &'static str) -> impl Fn(cudarc::driver::DriverError) -> GpuError {
    move |e| GpuError::Driver(format!("launch {what}: {e}"))
}

fn check_version(op: &str, version: &str) -> Result<(), GpuError> {
    if version != "v1" {
        return Err(GpuError::NoVersion {
            op: op.into(),
            version: version.into(),
            known: "v1".into(),
        });
    }
    Ok(())
}

pub fn run(
    g: &Gpu,
    version: &str,
    inputs: &TensorMap,
    p: &Params,
    opts: &RunOpts,
) -> Result<TensorMap, GpuError> {
    check_version(OP, version)?;
    let inp = Inputs::new(OP, inputs);
    let conf = parse_config(OP, p)?;
    let chain_stored = p.str("chain_from")? == "stored_state";
    let keep = p.bool("disable_state_update")?;
    let parsed = parse_inputs(&inp, true)?;
    let dims = parsed.dims;
    let t_len = parsed.t_len;
    if dims.dstate > MAX_DSTATE {
        return Err(GpuError::Unsupported(format!(
            "{OP} v1: dstate {} > {MAX_DSTATE}",
            dims.dstate
        )));
    }
    let parents = match inp.opt_int("parent_indices")? {
        None => None,
        Some((t, v)) => {
            inp.shape("parent_indices", t, &[dims.batch, t_len], "(batch, T)")?;
            for (i, &par) in v.iter().enumerate() {
                let (b, t) = (i / t_len.max(1), i % t_len.max(1));
                if par != -1 && (par < 0 || par as u64 >= t as u64) {
                    return Err(GpuError::Op(reference::op::OpError::Invalid {
                        op: OP.into(),
                        msg: format!(
                            "parent_indices[{b}, {t}] = {par}: a parent must be an earlier step \
                             (0..{t}) or -1 (the previous step)"
                        ),
                    }));
                }
            }
            Some(v)
        }
    };
    let slots = parsed.state.shape[0];
    resolve_slots(parsed.sbi.as_deref(), dims.batch, slots, conf.pad_slot_id)?;
    let state_dtype = parsed.state.dtype();
    let state_dt = state_dt_code(state_dtype);
    if state_dtype != DType::F16 && conf.rounding != Rounding::Nearest {
        return Err(GpuError::Unsupported(format!(
            "{OP}: stochastic rounding needs an f16 state (got {state_dtype})"
        )));
    }
    let (sr, mapping, rounds, seed) = rounding_fields(conf.rounding);
    let prm = SsuMtParams {
        batch: dims.batch as i64,
        t_len: t_len as i64,
        nheads: dims.nheads as i64,
        dim: dims.dim as i64,
        dstate: dims.dstate as i64,
        ngroups: dims.ngroups as i64,
        pad_slot_id: conf.pad_slot_id,
        dt_per_dim: parsed.dt.1 as i64,
        a_full: parsed.a.1 as i64,
        d_per_dim: parsed.d.as_ref().is_some_and(|d| d.1) as i64,
        bias_per_dim: parsed.dt_bias.as_ref().is_some_and(|d| d.1) as i64,
        has_d: parsed.d.is_some() as i64,
        has_z: parsed.z.is_some() as i64,
        has_bias: parsed.dt_bias.is_some() as i64,
        has_sbi: parsed.sbi.is_some() as i64,
        has_parents: parents.is_some() as i64,
        softplus: conf.dt_softplus as i64,
        pad_mode: (conf.pad_mode == PadMode::ComputeFromZeroState) as i64,
        out_from: (conf.out_from == OutFrom::StoredState) as i64,
        state_dt,
        sr,
        sr_mapping: mapping,
        rounds,
        chain_stored: chain_stored as i64,
        write_cache: (!keep) as i64,
        seed,
    };
    let operands = upload_operands(g, &parsed)?;
    let i64t = |v: Option<&[i64]>, n: usize| {
        g.upload(&Tensor::from_i64(
            &[n.max(1)],
            v.map_or_else(|| vec![0; n.max(1)], |v| v.to_vec()),
        ))
    };
    let sbi = i64t(parsed.sbi.as_deref(), dims.batch)?;
    let par = i64t(parents.as_deref(), dims.batch * t_len)?;
    let state = g.upload(&parsed.state)?;
    let scale_host = parsed.scale.clone().unwrap_or_else(|| vec![1.0]);
    let scale = g.upload(&Tensor::from_f32(&[scale_host.len()], scale_host))?;
    let rows = dims.batch * t_len * dims.nheads * dims.dim;
    let inter_shape = [dims.batch, t_len, dims.nheads, dims.dim, dims.dstate];
    let inter = g.alloc_poisoned(&inter_shape, state_dtype, opts.poison)?;
    let inter_scale = g.alloc_poisoned(&[rows.max(1)], DType::F32, opts.poison)?;
    let hist_len = if parents.is_some() {
        rows * dims.dstate
    } else {
        1
    };
    let hist = g.alloc_poisoned(&[hist_len.max(1)], DType::F32, opts.poison)?;
    let out = g.alloc_poisoned(&[rows.max(1)], DType::F32, opts.poison)?;
    let blocks = (dims.batch * dims.nheads) as u64 * dims.dim.div_ceil(WARPS as usize) as u64;
    if blocks > i32::MAX as u64 {
        return Err(GpuError::Unsupported(format!(
            "{OP} v1: {blocks} blocks exceed the grid limit"
        )));
    }
    if blocks > 0 && t_len > 0 {
        let f = g.function("ssu_multi_token", "ssu_mt_v1")?;
        let s = &g.stream;
        let ptrs = operands.ptrs_then(
            s,
            &[
                sbi.ptr(s),
                par.ptr(s),
                state.ptr(s),
                scale.ptr(s),
                inter.ptr(s),
                inter_scale.ptr(s),
                hist.ptr(s),
                out.ptr(s),
            ],
        );
        let mut l = s.launch_builder(&f);
        l.arg(&prm);
        for p in &ptrs {
            l.arg(p);
        }
        // SAFETY: ssu_mt_v1's signature; every buffer holds the element counts parse_inputs
        // checked (absent operands are 1-element dummies the kernel never reads: has_* = 0).
        unsafe { l.launch(cfg(blocks as u32, 32 * WARPS, 0)) }.map_err(drv("ssu_mt_v1"))?;
    }
    g.sync()?;
    let out_t = g.download(&out, "out")?;
    let st = g.download(&state, "state")?;
    let it = g.download(&inter, "intermediate_states")?;
    let out_vals: Vec<f32> = out_t.to_f32_vec().into_iter().take(rows).collect();
    let mut m = reference::op::outputs([
        (
            "out",
            Tensor::from_f32_as(&parsed.x_shape, &out_vals, parsed.x_dtype),
        ),
        (
            "intermediate_states",
            Tensor {
                shape: inter_shape.to_vec(),
                data: it.data,
            },
        ),
        (
            "state",
            Tensor {
                shape: parsed.state.shape.clone(),
                data: st.data,
            },
        ),
    ]);
    if parsed.scale.is_some() {
        let sc = g.download(&scale, "state_scale")?;
        m.insert(
            "state_scale".into(),
            Tensor::from_f32(&parsed.scale_shape, sc.to_f32_vec()),
        );
        let isc = g.download(&inter_scale, "intermediate_state_scale")?;
        m.insert(
            "intermediate_state_scale".into(),
            Tensor::from_f32(
                &inter_shape[..4],
                isc.to_f32_vec().into_iter().take(rows).collect(),
            ),
        );
    }
    Ok(m)
}

/// Copies, on the device, `src[b, accepted[b]-1]` into `dst[slot(b)]` (`bytes` per slot).
#[allow(clippy::too_many_arguments)]
fn promote_launch(
    g: &Gpu,
    dst: &Tensor,
    src: &Tensor,
    bytes: usize,
    slots: usize,
    batch: usize,
    t_len: usize,
    accepted: &crate::runtime::DevTensor,
    sbi: &crate::runtime::DevTensor,
    has_sbi: bool,
    pad_slot_id: i64,
    name: &str,
) -> Result<Tensor, GpuError> {
    let d = g.upload(dst)?;
    let s = g.upload(src)?;
    let prm = PromoteParams {
        batch: batch as i64,
        t_len: t_len as i64,
        bytes: bytes as i64,
        slots: slots as i64,
        pad_slot_id,
        has_sbi: has_sbi as i64,
    };
    let chunks = bytes.div_ceil(4096);
    if chunks > 0 && batch > 0 {
        if chunks > i32::MAX as usize || batch > 65535 {
            return Err(GpuError::Unsupported(format!(
                "{PROMOTE} v1: grid {chunks} x {batch} exceeds the launch limits"
            )));
        }
        let f = g.function("ssu_multi_token", "promote_v1")?;
        let st = &g.stream;
        let (pa, pb, pd, ps) = (accepted.ptr(st), sbi.ptr(st), d.ptr(st), s.ptr(st));
        let mut l = st.launch_builder(&f);
        l.arg(&prm).arg(&pa).arg(&pb).arg(&pd).arg(&ps);
        let lc = cudarc::driver::LaunchConfig {
            grid_dim: (chunks as u32, batch as u32, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: promote_v1's signature; dst holds `slots` x `bytes`, src batch x T x `bytes`,
        // accepted / sbi `batch` i64 each (checked by the caller).
        unsafe { l.launch(lc) }.map_err(drv("promote_v1"))?;
    }
    g.sync()?;
    let t = g.download(&d, name)?;
    Ok(Tensor {
        shape: dst.shape.clone(),
        data: t.data,
    })
}

pub fn run_promote(
    g: &Gpu,
    version: &str,
    inputs: &TensorMap,
    p: &Params,
    _opts: &RunOpts,
) -> Result<TensorMap, GpuError> {
    check_version(PROMOTE, version)?;
    let inp = Inputs::new(PROMOTE, inputs);
    // The reference's validation: the GPU accepts and rejects exactly what the CPU op does.
    let a = reference::ops::mamba_cache_promote::parse(&inp, p)?;
    let batch = a.batch;
    let mut acc = a.num_accepted.clone();
    acc.resize(batch.max(1), 0);
    let dev_acc = g.upload(&Tensor::from_i64(&[batch.max(1)], acc))?;
    let dev_sbi = g.upload(&Tensor::from_i64(
        &[batch.max(1)],
        a.state_batch_indices
            .clone()
            .unwrap_or_else(|| vec![0; batch.max(1)]),
    ))?;
    let go = |dst: &Tensor, src: &Tensor, per: usize, name: &str| {
        promote_launch(
            g,
            dst,
            src,
            per * dst.dtype().size(),
            a.nslots,
            batch,
            a.t_len,
            &dev_acc,
            &dev_sbi,
            a.state_batch_indices.is_some(),
            a.pad_slot_id,
            name,
        )
    };
    let mut m = TensorMap::new();
    m.insert(
        "state".into(),
        go(a.state, a.intermediate_states, a.per_slot, "state")?,
    );
    m.insert(
        "conv_state".into(),
        go(
            a.conv_state,
            a.intermediate_conv_window,
            a.conv_per_slot,
            "conv_state",
        )?,
    );
    if let Some((s, is)) = a.scales {
        m.insert(
            "state_scale".into(),
            go(s, is, a.scale_per_slot, "state_scale")?,
        );
    }
    Ok(m)
}
