//! The fused quantizing epilogues on the GPU: `rmsnorm_nvfp4`, `fused_add_rmsnorm_nvfp4`,
//! `gated_rmsnorm_nvfp4`, `relu2_nvfp4`. v1 runs the f32 front half (gpu/kernels/nvfp4_fused.cu)
//! into a device buffer, then the NVFP4 quantizer of nvfp4.cu on it (amax on the device when no
//! global scale is given); bit-exact with the reference by construction.

use super::nvfp4::{global_from_device_amax, launch_quantize};
use super::{grid_for, GpuOp, RunOpts};
use crate::runtime::{cfg, dtype_code, DevTensor, Gpu};
use crate::GpuError;
use cudarc::driver::PushKernelArg;
use reference::op::{Inputs, OpError, Params};
use reference::ops::nvfp4_quantize::{Nvfp4Mode, SfLayout};
use reference::{DType, Tensor, TensorMap};

fn always(_: &str, _: &TensorMap, _: &Params) -> Option<String> {
    None
}

pub fn ops() -> Vec<GpuOp> {
    let op = |name, run| GpuOp {
        name,
        versions: &["v1"],
        run,
        applicable: always,
    };
    vec![
        op("rmsnorm_nvfp4", run_rmsnorm as super::RunFn),
        op("fused_add_rmsnorm_nvfp4", run_fused_add),
        op("gated_rmsnorm_nvfp4", run_gated),
        op("relu2_nvfp4", run_relu2),
    ]
}

struct Quant {
    global: Option<f32>,
    round_bf16: bool,
    mode: Nvfp4Mode,
    layout: SfLayout,
}

fn perr(op: &str, name: &str, msg: String) -> GpuError {
    OpError::Param {
        op: op.into(),
        name: name.into(),
        msg,
    }
    .into()
}

fn quant(inp: &Inputs, p: &Params, cols: usize) -> Result<Quant, GpuError> {
    if !cols.is_multiple_of(16) || cols == 0 {
        return Err(inp
            .err("x", format!("{cols} columns is not a multiple of 16 (the NVFP4 block); pad the last dimension"))
            .into());
    }
    let global = match inp.opt_float("global_scale", 1)? {
        None => None,
        Some((t, v)) => {
            inp.shape("global_scale", t, &[1], "(1,)")?;
            if !(v[0].is_finite() && v[0] > 0.0) {
                return Err(inp
                    .invalid(format!(
                        "global_scale = {} must be finite and > 0 (it is 448*6/amax)",
                        v[0]
                    ))
                    .into());
            }
            Some(v[0])
        }
    };
    let r = p.str("round_before_quant")?;
    let round_bf16 = match r {
        "bf16" => true,
        "none" => false,
        other => {
            return Err(perr(
                inp.op,
                "round_before_quant",
                format!("'{other}' is not bf16 or none"),
            ))
        }
    };
    let m = p.str("mode")?;
    let mode = Nvfp4Mode::parse(m)
        .ok_or_else(|| perr(inp.op, "mode", format!("'{m}' is not kernel or exact")))?;
    let l = p.str("layout")?;
    let layout = SfLayout::parse(l).ok_or_else(|| {
        perr(
            inp.op,
            "layout",
            format!("'{l}' is not linear or swizzled128x4"),
        )
    })?;
    Ok(Quant {
        global,
        round_bf16,
        mode,
        layout,
    })
}

/// Quantizes the f32 `y` [rows, cols] on the device into the three quantized outputs.
fn epilogue(
    g: &Gpu,
    y: &DevTensor,
    rows: usize,
    cols: usize,
    q: &Quant,
    opts: &RunOpts,
) -> Result<TensorMap, GpuError> {
    let gs = match q.global {
        Some(v) => v,
        None => global_from_device_amax(g, y.ptr(&g.stream), 0, rows * cols)?,
    };
    let gd = g.upload(&Tensor::from_f32(&[1], vec![gs]))?;
    let x_fp4 = g.alloc_poisoned(&[rows, cols / 2], DType::U8, opts.poison)?;
    let sf = g.alloc_poisoned(&q.layout.shape(rows, cols), DType::U8, opts.poison)?;
    launch_quantize(
        g,
        "v4",
        y.ptr(&g.stream),
        0,
        rows,
        cols,
        gd.ptr(&g.stream),
        q.mode,
        q.layout,
        x_fp4.ptr(&g.stream),
        sf.ptr(&g.stream),
    )?;
    g.sync()?;
    Ok(reference::op::outputs([
        ("x_fp4", g.download(&x_fp4, "x_fp4")?),
        ("sf", g.download(&sf, "sf")?),
        ("global_scale", Tensor::from_f32(&[1], vec![gs])),
    ]))
}

fn float2<'a>(inp: &Inputs<'a>, name: &str) -> Result<&'a Tensor, GpuError> {
    let t = inp.req(name)?;
    inp.rank(name, t, 2)?;
    inp.dtype(name, t, &[DType::F32, DType::BF16, DType::F16])?;
    Ok(t)
}

fn weight<'a>(inp: &Inputs<'a>, d: usize) -> Result<&'a Tensor, GpuError> {
    let w = inp.req("weight")?;
    inp.dtype("weight", w, &[DType::F32, DType::BF16, DType::F16])?;
    inp.shape("weight", w, &[d], "(hidden,)")?;
    Ok(w)
}

/// Launches norm_seg_v1 and returns y (f32).
#[allow(clippy::too_many_arguments)]
fn norm(
    g: &Gpu,
    x: &Tensor,
    res: Option<(&Tensor, &DevTensor)>,
    z: Option<&Tensor>,
    w: &Tensor,
    group: usize,
    order: i32,
    eps: f32,
    round_bf16: bool,
) -> Result<DevTensor, GpuError> {
    let (rows, d) = (x.shape[0], x.shape[1]);
    let xd = g.upload(x)?;
    let wd = g.upload(w)?;
    let rd = match res {
        Some((t, _)) => Some(g.upload(t)?),
        None => None,
    };
    let zd = match z {
        Some(t) => Some(g.upload(t)?),
        None => None,
    };
    let y = g.alloc_poisoned(&[rows, d], DType::F32, 0xFF)?;
    let s = &g.stream;
    let (xp, wp, yp) = (xd.ptr(s), wd.ptr(s), y.ptr(s));
    let rp = rd.as_ref().map_or(0u64, |t| t.ptr(s));
    let rop = res.map_or(0u64, |(_, o)| o.ptr(s));
    let zp = zd.as_ref().map_or(0u64, |t| t.ptr(s));
    let xdt = dtype_code(x.dtype())?;
    let rdt = match res {
        Some((t, _)) => dtype_code(t.dtype())?,
        None => 0,
    };
    let zdt = match z {
        Some(t) => dtype_code(t.dtype())?,
        None => 0,
    };
    let wdt = dtype_code(w.dtype())?;
    let (dd, ll, rb) = (d as i64, group as i64, round_bf16 as i32);
    let blocks = rows * (d / group);
    if blocks > 0 {
        let smem = 4 * group;
        let f = g.function("nvfp4_fused", "norm_seg_v1")?;
        if smem > 48 * 1024 {
            f.set_attribute(
                cudarc::driver::sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                smem as i32,
            )
            .map_err(|e| GpuError::Unsupported(format!("segment of {group} floats needs {smem} bytes of shared memory: {e}")))?;
        }
        let mut a = s.launch_builder(&f);
        a.arg(&xp)
            .arg(&xdt)
            .arg(&rp)
            .arg(&rdt)
            .arg(&zp)
            .arg(&zdt)
            .arg(&wp)
            .arg(&wdt);
        a.arg(&dd)
            .arg(&ll)
            .arg(&order)
            .arg(&eps)
            .arg(&rb)
            .arg(&yp)
            .arg(&rop);
        // SAFETY: matches norm_seg_v1; every buffer holds rows*d elements (weight d); smem 4*L.
        unsafe { a.launch(cfg(blocks as u32, 256, smem as u32)) }
            .map_err(|e| GpuError::Driver(format!("launch norm_seg_v1: {e}")))?;
    }
    Ok(y)
}

fn run_rmsnorm(
    g: &Gpu,
    _v: &str,
    inputs: &TensorMap,
    p: &Params,
    opts: &RunOpts,
) -> Result<TensorMap, GpuError> {
    let inp = Inputs::new("rmsnorm_nvfp4", inputs);
    let x = float2(&inp, "x")?;
    let (rows, d) = (x.shape[0], x.shape[1]);
    let w = weight(&inp, d)?;
    let q = quant(&inp, p, d)?;
    let y = norm(
        g,
        x,
        None,
        None,
        w,
        d,
        0,
        p.float("eps")? as f32,
        q.round_bf16,
    )?;
    epilogue(g, &y, rows, d, &q, opts)
}

fn run_fused_add(
    g: &Gpu,
    _v: &str,
    inputs: &TensorMap,
    p: &Params,
    opts: &RunOpts,
) -> Result<TensorMap, GpuError> {
    let inp = Inputs::new("fused_add_rmsnorm_nvfp4", inputs);
    let x = float2(&inp, "x")?;
    let (rows, d) = (x.shape[0], x.shape[1]);
    let r = float2(&inp, "residual")?;
    inp.shape("residual", r, &x.shape, "x's shape (rows, hidden)")?;
    let w = weight(&inp, d)?;
    let q = quant(&inp, p, d)?;
    let res_out = g.alloc_poisoned(&r.shape, r.dtype(), opts.poison)?;
    let y = norm(
        g,
        x,
        Some((r, &res_out)),
        None,
        w,
        d,
        0,
        p.float("eps")? as f32,
        q.round_bf16,
    )?;
    let mut m = epilogue(g, &y, rows, d, &q, opts)?;
    m.insert("residual".into(), g.download(&res_out, "residual")?);
    Ok(m)
}

fn run_gated(
    g: &Gpu,
    _v: &str,
    inputs: &TensorMap,
    p: &Params,
    opts: &RunOpts,
) -> Result<TensorMap, GpuError> {
    let inp = Inputs::new("gated_rmsnorm_nvfp4", inputs);
    let x = float2(&inp, "x")?;
    let (rows, d) = (x.shape[0], x.shape[1]);
    let z = float2(&inp, "z")?;
    inp.shape("z", z, &x.shape, "x's shape (rows, d)")?;
    let w = weight(&inp, d)?;
    let group = match p.opt_int("group_size")? {
        None => d,
        Some(gs) if gs > 0 && (d as i64) % gs == 0 => gs as usize,
        Some(gs) => {
            return Err(perr(
                inp.op,
                "group_size",
                format!("{gs} does not divide d = {d}; pass a positive divisor of d"),
            ))
        }
    };
    let order = if p.bool("norm_before_gate")? { 1 } else { 0 };
    let q = quant(&inp, p, d)?;
    let y = norm(
        g,
        x,
        None,
        Some(z),
        w,
        group,
        order,
        p.float("eps")? as f32,
        q.round_bf16,
    )?;
    epilogue(g, &y, rows, d, &q, opts)
}

fn run_relu2(
    g: &Gpu,
    _v: &str,
    inputs: &TensorMap,
    p: &Params,
    opts: &RunOpts,
) -> Result<TensorMap, GpuError> {
    let inp = Inputs::new("relu2_nvfp4", inputs);
    let x = float2(&inp, "x")?;
    let (rows, d) = (x.shape[0], x.shape[1]);
    let q = quant(&inp, p, d)?;
    let xd = g.upload(x)?;
    let y = g.alloc_poisoned(&[rows, d], DType::F32, 0xFF)?;
    let n = (rows * d) as i64;
    if n > 0 {
        let f = g.function("nvfp4_fused", "relu2_v1")?;
        let (xp, yp, xdt, rb) = (
            xd.ptr(&g.stream),
            y.ptr(&g.stream),
            dtype_code(x.dtype())?,
            q.round_bf16 as i32,
        );
        let mut a = g.stream.launch_builder(&f);
        a.arg(&xp).arg(&xdt).arg(&n).arg(&rb).arg(&yp);
        // SAFETY: matches relu2_v1; x and y hold n elements.
        unsafe { a.launch(cfg(grid_for(g, n as u64, 256), 256, 0)) }
            .map_err(|e| GpuError::Driver(format!("launch relu2_v1: {e}")))?;
    }
    epilogue(g, &y, rows, d, &q, opts)
}
