//! `philox` and `stochastic_round_f16` on the GPU (gpu/kernels/philox.cu), bit-exact with
//! reference/src/ops/{philox,stochastic_round_f16}.rs.

use super::{grid_for, GpuOp, RunOpts};
use crate::runtime::{cfg, Gpu};
use crate::GpuError;
use cudarc::driver::PushKernelArg;
use reference::op::{Inputs, OpError, Params};
use reference::{DType, Tensor, TensorMap};

fn always(_: &str, _: &TensorMap, _: &Params) -> Option<String> {
    None
}

pub fn ops() -> Vec<GpuOp> {
    vec![
        GpuOp {
            name: "philox",
            versions: &["v1"],
            run: run_philox,
            applicable: always,
        },
        GpuOp {
            name: "stochastic_round_f16",
            versions: &["v1"],
            run: run_sr,
            applicable: always,
        },
    ]
}

/// Integer tensor -> u32 words, rejecting values outside u32 (as the reference does).
fn words(inp: &Inputs, name: &str) -> Result<(Vec<usize>, Vec<u32>), GpuError> {
    let (t, v) = inp.int(name)?;
    let mut out = Vec::with_capacity(v.len());
    for (i, &x) in v.iter().enumerate() {
        out.push(u32::try_from(x).map_err(|_| {
            inp.err(
                name,
                format!("element {i} = {x} is not a 32-bit unsigned word; store it as u32"),
            )
        })?);
    }
    Ok((t.shape.clone(), out))
}

fn run_philox(
    g: &Gpu,
    _v: &str,
    inputs: &TensorMap,
    p: &Params,
    opts: &RunOpts,
) -> Result<TensorMap, GpuError> {
    const OP: &str = "philox";
    let inp = Inputs::new(OP, inputs);
    let (cs, c) = words(&inp, "counter")?;
    let (ks, k) = words(&inp, "key")?;
    if cs.len() != 2 || cs[1] != 4 {
        return Err(inp
            .err("counter", format!("shape {cs:?} is not (N, 4)"))
            .into());
    }
    let n = cs[0];
    if ks != [n, 2] {
        return Err(inp
            .err(
                "key",
                format!("shape {ks:?} does not match (N, 2) = [{n}, 2]"),
            )
            .into());
    }
    let rounds = p.usize("rounds")?;
    if rounds > 64 {
        return Err(OpError::Param {
            op: OP.into(),
            name: "rounds".into(),
            msg: format!("{rounds} is more than 64; Philox uses 5 to 10"),
        }
        .into());
    }
    let cd = g.upload(&Tensor::from_u32(&[n, 4], c))?;
    let kd = g.upload(&Tensor::from_u32(&[n, 2], k))?;
    let out = g.alloc_poisoned(&[n, 4], DType::U32, opts.poison)?;
    if n > 0 {
        let f = g.function("philox", "philox_rows_v1")?;
        let (cp, kp, op) = (cd.ptr(&g.stream), kd.ptr(&g.stream), out.ptr(&g.stream));
        let (nn, r) = (n as i64, rounds as i32);
        let mut a = g.stream.launch_builder(&f);
        a.arg(&cp).arg(&kp).arg(&nn).arg(&r).arg(&op);
        // SAFETY: matches philox_rows_v1; n rows of 4 + 2 input words and 4 output words.
        unsafe { a.launch(cfg(grid_for(g, n as u64, 256), 256, 0)) }
            .map_err(|e| GpuError::Driver(format!("launch philox_rows_v1: {e}")))?;
    }
    g.sync()?;
    Ok(reference::op::outputs([("out", g.download(&out, "out")?)]))
}

fn run_sr(
    g: &Gpu,
    _v: &str,
    inputs: &TensorMap,
    _p: &Params,
    opts: &RunOpts,
) -> Result<TensorMap, GpuError> {
    const OP: &str = "stochastic_round_f16";
    let inp = Inputs::new(OP, inputs);
    let xt = inp.req("x")?;
    inp.dtype("x", xt, &[DType::F32, DType::BF16, DType::F16])?;
    let (rs, r) = words(&inp, "rand")?;
    if rs != xt.shape {
        return Err(inp
            .err(
                "rand",
                format!("shape {rs:?} does not match x's shape {:?}", xt.shape),
            )
            .into());
    }
    let n = xt.numel();
    let xd = g.upload(&Tensor::from_f32(&[n], xt.to_f32_vec()))?;
    let rd = g.upload(&Tensor::from_u32(&[n], r))?;
    let out = g.alloc_poisoned(&xt.shape, DType::F16, opts.poison)?;
    if n > 0 {
        let f = g.function("philox", "sr_f16_v1")?;
        let (xp, rp, op) = (xd.ptr(&g.stream), rd.ptr(&g.stream), out.ptr(&g.stream));
        let nn = n as i64;
        let mut a = g.stream.launch_builder(&f);
        a.arg(&xp).arg(&rp).arg(&nn).arg(&op);
        // SAFETY: matches sr_f16_v1; n f32 in, n u32 in, n u16 out.
        unsafe { a.launch(cfg(grid_for(g, n as u64, 256), 256, 0)) }
            .map_err(|e| GpuError::Driver(format!("launch sr_f16_v1: {e}")))?;
    }
    g.sync()?;
    Ok(reference::op::outputs([("out", g.download(&out, "out")?)]))
}
