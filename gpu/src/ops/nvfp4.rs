//! `nvfp4_quantize` / `nvfp4_dequantize` on the GPU (gpu/kernels/nvfp4.cu), both modes and
//! both scale layouts, bit-exact with reference/src/ops/nvfp4_quantize.rs.

use super::{grid_for, RunOpts};
use crate::runtime::{cfg, dtype_code, Gpu};
use crate::GpuError;
use cudarc::driver::PushKernelArg;
use reference::op::{Inputs, OpError, Params};
use reference::ops::nvfp4_quantize::{Nvfp4Mode, SfLayout};
use reference::{DType, Tensor, TensorMap};

fn mode(p: &Params, op: &str) -> Result<Nvfp4Mode, GpuError> {
    let s = p.str("mode")?;
    Nvfp4Mode::parse(s).ok_or_else(|| {
        OpError::Param {
            op: op.into(),
            name: "mode".into(),
            msg: format!("'{s}' is not kernel or exact"),
        }
        .into()
    })
}

fn layout(p: &Params, op: &str) -> Result<SfLayout, GpuError> {
    let s = p.str("layout")?;
    SfLayout::parse(s).ok_or_else(|| {
        OpError::Param {
            op: op.into(),
            name: "layout".into(),
            msg: format!("'{s}' is not linear or swizzled128x4"),
        }
        .into()
    })
}

pub fn mode_code(m: Nvfp4Mode) -> i32 {
    match m {
        Nvfp4Mode::Kernel => 0,
        Nvfp4Mode::Exact => 1,
    }
}

pub fn layout_code(l: SfLayout) -> i32 {
    match l {
        SfLayout::Linear => 0,
        SfLayout::Swizzled128x4 => 1,
    }
}

/// amax of |x| on the device, as the reference's `global_scale_from_amax` would derive the
/// global scale from it (f32 division on the host, same errors).
pub fn global_from_device_amax(g: &Gpu, x: u64, dt: i32, n: usize) -> Result<f32, GpuError> {
    let out = g.alloc_raw::<u32>(1)?;
    let (op, _s) = cudarc::driver::DevicePtr::device_ptr(&out, &g.stream);
    let f = g.function("nvfp4", "nvfp4_amax")?;
    let n64 = n as i64;
    let mut a = g.stream.launch_builder(&f);
    a.arg(&x).arg(&dt).arg(&n64).arg(&op);
    // SAFETY: x holds n elements of dtype dt; out is one u32 initialised to 0.
    unsafe { a.launch(cfg(grid_for(g, n as u64, 256), 256, 0)) }
        .map_err(|e| GpuError::Driver(format!("launch nvfp4_amax: {e}")))?;
    let host = g
        .stream
        .clone_dtoh(&out)
        .map_err(|e| GpuError::Driver(format!("amax download: {e}")))?;
    let amax = f32::from_bits(host[0]);
    if !(amax.is_finite() && amax > 0.0) {
        return Err(GpuError::Unsupported(format!(
            "cannot derive global_scale = 448*6/amax from amax = {amax} (the input is all zeros or \
             holds inf/NaN); pass global_scale explicitly"
        )));
    }
    let gs = (448.0f32 * 6.0f32) / amax;
    if !gs.is_finite() {
        return Err(GpuError::Unsupported(format!(
            "global_scale = 448*6/amax overflows f32 for amax = {amax:e}; pass global_scale explicitly"
        )));
    }
    Ok(gs)
}

/// One quantize launch on device pointers (shared by `run_quantize`, the fused ops' tests and
/// the bench). `global` points at one f32 on the device.
#[allow(clippy::too_many_arguments)]
pub fn launch_quantize(
    g: &Gpu,
    version: &str,
    x: u64,
    dt: i32,
    rows: usize,
    cols: usize,
    global: u64,
    m: Nvfp4Mode,
    l: SfLayout,
    x_fp4: u64,
    sf: u64,
) -> Result<(), GpuError> {
    let [rows_p, kb_p] = l.shape(rows, cols);
    let name = match version {
        "v1" => "nvfp4_quantize_v1",
        "v2" => "nvfp4_quantize_v2",
        "v3" => "nvfp4_quantize_v3",
        "v4" => "nvfp4_quantize_v4",
        // v5: v4 with the fast path's 16-bit dtype fixed at compile time (dt code 2 = f16;
        // f32 input takes the generic path of either instantiation).
        "v5" if dt == 2 => "nvfp4_quantize_v5_f16",
        "v5" => "nvfp4_quantize_v5_bf16",
        // v6: v5 with NVFP4_V6_ROWS = 4 rows per thread, loads first.
        "v6" if dt == 2 => "nvfp4_quantize_v6_f16",
        "v6" => "nvfp4_quantize_v6_bf16",
        // v7: v6's layout with the FP32-pipe E2M1 encoder and hardware E4M3 scale conversions.
        "v7" if dt == 2 => "nvfp4_quantize_v7_f16",
        "v7" => "nvfp4_quantize_v7_bf16",
        // v8: v7 with 2 rows per thread, at most 64 registers (4 blocks per SM).
        "v8" if dt == 2 => "nvfp4_quantize_v8_f16",
        "v8" => "nvfp4_quantize_v8_bf16",
        other => {
            return Err(GpuError::NoVersion {
                op: "nvfp4_quantize".into(),
                version: other.into(),
                known: "v7, v4, v3, v2, v1, v5, v6, v8".into(),
            })
        }
    };
    let f = g.function("nvfp4", name)?;
    let (r, c) = (rows as i64, cols as i64);
    let (rp, kp) = (rows_p as i64, kb_p as i64);
    let (mc, lc) = (mode_code(m), layout_code(l));
    let mut a = g.stream.launch_builder(&f);
    a.arg(&x)
        .arg(&dt)
        .arg(&r)
        .arg(&c)
        .arg(&global)
        .arg(&mc)
        .arg(&lc);
    a.arg(&rp).arg(&kp).arg(&x_fp4).arg(&sf);
    let total = (rows_p * kb_p) as u64;
    let launch_cfg = if version == "v1" {
        cfg(grid_for(g, total, 256), 256, 0)
    } else if version == "v3" {
        let threads = 2 * kb_p as u64;
        let bx = (threads.next_power_of_two().clamp(32, 256)) as u32;
        cudarc::driver::LaunchConfig {
            grid_dim: (
                threads.div_ceil(bx as u64).max(1) as u32,
                (rows_p.div_ceil(2).min(65535) as u32).max(1),
                1,
            ),
            block_dim: (bx, 1, 1),
            shared_mem_bytes: 0,
        }
    } else {
        let bx = (kb_p as u32).clamp(32, 256).next_power_of_two().min(256);
        // v6 / v7 cover NVFP4_V6_ROWS / NVFP4_V7_ROWS = 4 rows per thread and grid row, v8 2.
        let rows_per_y = match version {
            "v6" | "v7" => 4,
            "v8" => 2,
            _ => 1,
        };
        cudarc::driver::LaunchConfig {
            grid_dim: (
                (kb_p as u32).div_ceil(bx).max(1),
                (rows_p.div_ceil(rows_per_y).min(65535) as u32).max(1),
                1,
            ),
            block_dim: (bx, 1, 1),
            shared_mem_bytes: 0,
        }
    };
    // SAFETY: matches nvfp4_quantize_v1..v8 (same signature); x holds rows*cols elements, x_fp4
    // rows*cols/2 bytes, sf layout.len(rows, cols) bytes, global one f32.
    unsafe { a.launch(launch_cfg) }.map_err(|e| GpuError::Driver(format!("launch {name}: {e}")))?;
    Ok(())
}

pub fn run_quantize(
    g: &Gpu,
    version: &str,
    inputs: &TensorMap,
    p: &Params,
    opts: &RunOpts,
) -> Result<TensorMap, GpuError> {
    const OP: &str = "nvfp4_quantize";
    let inp = Inputs::new(OP, inputs);
    let xt = inp.req("x")?;
    inp.rank("x", xt, 2)?;
    inp.dtype("x", xt, &[DType::F32, DType::BF16, DType::F16])?;
    let (rows, cols) = (xt.shape[0], xt.shape[1]);
    if cols % 16 != 0 || cols == 0 {
        return Err(inp
            .err(
                "x",
                format!(
                    "shape {:?}: cols = {cols} must be a positive multiple of 16",
                    xt.shape
                ),
            )
            .into());
    }
    let m = mode(p, OP)?;
    let l = layout(p, OP)?;
    let x = g.upload(xt)?;
    let dt = dtype_code(xt.dtype())?;
    let gs = match inp.opt_float("global_scale", 1)? {
        Some((gt, gv)) => {
            inp.shape("global_scale", gt, &[1], "(1,)")?;
            if !(gv[0].is_finite() && gv[0] > 0.0) {
                return Err(inp
                    .invalid(format!(
                        "global_scale = {} must be finite and > 0 (it is 448*6/amax)",
                        gv[0]
                    ))
                    .into());
            }
            gv[0]
        }
        None => {
            if rows == 0 {
                return Err(inp
                    .invalid("cannot derive global_scale from an empty x")
                    .into());
            }
            global_from_device_amax(g, x.ptr(&g.stream), dt, rows * cols)?
        }
    };
    let gdev = g.upload(&Tensor::from_f32(&[1], vec![gs]))?;
    let q = g.alloc_poisoned(&[rows, cols / 2], DType::U8, opts.poison)?;
    let sf = g.alloc_poisoned(&l.shape(rows, cols), DType::U8, opts.poison)?;
    launch_quantize(
        g,
        version,
        x.ptr(&g.stream),
        dt,
        rows,
        cols,
        gdev.ptr(&g.stream),
        m,
        l,
        q.ptr(&g.stream),
        sf.ptr(&g.stream),
    )?;
    g.sync()?;
    Ok(reference::op::outputs([
        ("x_fp4", g.download(&q, "x_fp4")?),
        ("sf", g.download(&sf, "sf")?),
        ("global_scale", Tensor::from_f32(&[1], vec![gs])),
    ]))
}

pub fn run_dequantize(
    g: &Gpu,
    _version: &str,
    inputs: &TensorMap,
    p: &Params,
    opts: &RunOpts,
) -> Result<TensorMap, GpuError> {
    const OP: &str = "nvfp4_dequantize";
    let inp = Inputs::new(OP, inputs);
    let xt = inp.req("x_fp4")?;
    inp.rank("x_fp4", xt, 2)?;
    inp.dtype("x_fp4", xt, &[DType::U8])?;
    let (rows, cols) = (xt.shape[0], xt.shape[1] * 2);
    if cols % 16 != 0 || cols == 0 {
        return Err(inp
            .err(
                "x_fp4",
                format!(
                    "shape {:?}: cols = {cols} is not a positive multiple of 16",
                    xt.shape
                ),
            )
            .into());
    }
    let l = layout(p, OP)?;
    let st = inp.req("sf")?;
    inp.dtype("sf", st, &[DType::U8])?;
    let want = l.shape(rows, cols);
    if st.numel() != want[0] * want[1] {
        return Err(inp
            .err(
                "sf",
                format!(
                    "shape {:?} does not match the {} layout {:?}",
                    st.shape,
                    l.name(),
                    want
                ),
            )
            .into());
    }
    let (gt, _) = inp.float("global_scale", 1)?;
    inp.shape("global_scale", gt, &[1], "(1,)")?;
    inp.dtype("global_scale", gt, &[DType::F32])?;
    let q = g.upload(xt)?;
    let sf = g.upload(st)?;
    let gd = g.upload(gt)?;
    let out = g.alloc_poisoned(&[rows, cols], DType::F32, opts.poison)?;
    let f = g.function("nvfp4", "nvfp4_dequantize_v1")?;
    let (qp, sp, gp, op) = (
        q.ptr(&g.stream),
        sf.ptr(&g.stream),
        gd.ptr(&g.stream),
        out.ptr(&g.stream),
    );
    let (r, c, lc) = (rows as i64, cols as i64, layout_code(l));
    let mut a = g.stream.launch_builder(&f);
    a.arg(&qp)
        .arg(&sp)
        .arg(&gp)
        .arg(&r)
        .arg(&c)
        .arg(&lc)
        .arg(&op);
    // SAFETY: matches nvfp4_dequantize_v1; sizes checked above.
    unsafe { a.launch(cfg(grid_for(g, (rows * cols / 16) as u64, 256), 256, 0)) }
        .map_err(|e| GpuError::Driver(format!("launch nvfp4_dequantize_v1: {e}")))?;
    g.sync()?;
    Ok(reference::op::outputs([("x", g.download(&out, "x")?)]))
}
