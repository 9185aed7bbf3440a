//! `causal_conv1d_fn` (prefill) and `causal_conv1d_update` (decode, single and multi token) on
//! the GPU (gpu/kernels/causal_conv1d.cu), against reference/src/ops/causal_conv1d_{fn,update}.rs.
//!
//! Prefill versions: `v1` one thread per output (any shape, the reference's summation order);
//! `v2` 16-byte vectors with warp-shuffle neighbour exchange, `__ldg` weights, FMA and fast SiLU
//! (needs L > 0, width <= 4 and rows starting on 16-byte boundaries: L * sizeof(x) % 16 == 0);
//! `auto` picks v2 where it applies. `v3` takes `layout = channel_last` (x / out (batch, seqlen,
//! dim), states (batch, width - 1, dim)): one thread per (row, 64-token chunk, channel),
//! consecutive threads on consecutive channels, the window sliding in registers; v1's
//! arithmetic (the reference's bits). `v4`: v3 with 4 channels per thread (one 8- / 16-byte
//! load and store per token, 4 tokens' loads in flight) and v2's arithmetic (FMA, fast silu),
//! dim % 4 == 0. `v5` (session 17): v2's arithmetic and exchange on a 2-D grid (x: spans of
//! 256 x 4 vectors of a row, y: rows), no division a thread, 4 loads a lane and lane 0's halo
//! vector issued before any arithmetic; v2's conditions. `v6` (session 17): channel-last with one
//! 16-byte vector of channels a thread (8 bf16 / f16, 4 f32), weights loaded once a thread, a
//! 2-D grid (channel vectors, (batch, 64-token chunk)); needs dim * sizeof(x) % 16 == 0.
//! `v8` (session 23): channel-first through the bulk copy engine (persistent blocks, 4 stages
//! of 512 vectors + the halo vector in shared memory; warp-specialized: 8 consumer warps and a
//! producer warp, a full and an empty mbarrier a stage); v2's conditions.
//! `v9` (session 23): channel-last through the bulk copy engine (a block owns a strip of 128
//! channel vectors and one token segment of a batch row, as many segments as fit one wave of
//! resident blocks; 4 stages of 4 token rows; taps and window in registers); v6's conditions
//! and batch <= 65535. `v10`: v9 warp-specialized as v8 is (a producer warp, full and empty
//! barriers a stage). v5 / v6 / v8 / v9 / v10 are compiled per x dtype (`_f32` / `_bf16` / `_f16`)
//! with the activation folded at compile time, silu on the ftz SFU forms.
//! `auto`: channel-first v5 where it applies, else v1; channel-last v10, else v6, v4, v3.
//! Update: `v1`, one thread per (row, channel), width <= 4.
//!
//! Session 23 (call 4, two runs; the driver's device-to-device memcpy of the same bytes 484.0 /
//! 484.1 us, duet's copy kernel 522.9 / 523.3): channel-last v10 547.3 / 551.6 us, v9 560.1 /
//! 564.7, v6 862.4 / 868.6; channel-first v5 569.6 / 569.6, v8 622.2 / 623.6 (v8 with a block
//! barrier a tile instead of a producer warp: 622.0 / 631.6 in call 3; v5 at 75 registers
//! before it was held to 64: 632.8 / 640.6).
//! Measured on the H200 (bench preset `conv1d_prefill_50k`: batch 1, 10240 channels, 50,000
//! tokens, width 4, bf16, silu; session 17 calls 4-5, four runs): v5 616.5-622.2 us (84.1-84.7%
//! of a same-bytes device copy at 522-524 us), v2 716.5-722.9, v1 ~6230; channel-last v6
//! 863.7-870.5 us (60.2-60.5%), v4 1020.6-1023.2, v3 ~2247. Target 520 us in both layouts: not
//! met. Measured and removed: v5 with 2 vectors a lane (696-700 us); `v7`, v5's spans on
//! persistent warps that prefetch the next span before computing this one (706-710 us: 3 blocks
//! an SM at 79 registers, 34% achieved occupancy, DRAM 61% under ncu).

use super::{grid_for, GpuOp, RunOpts};
use crate::runtime::{cfg, dtype_code, DevTensor, Gpu};
use crate::GpuError;
use cudarc::driver::PushKernelArg;
use reference::op::{Inputs, Params};
use reference::ops::causal_conv1d_fn::Activation;
use reference::{DType, Tensor, TensorMap};

const OP_FN: &str = "causal_conv1d_fn";
const OP_UPD: &str = "causal_conv1d_update";
/// Widest filter with a compiled v2 / update kernel.
pub const MAX_WIDTH: usize = 4;

pub fn ops() -> Vec<GpuOp> {
    vec![
        GpuOp {
            name: OP_FN,
            versions: &[
                "auto", "v1", "v2", "v3", "v4", "v5", "v6", "v8", "v9", "v10",
            ],
            run: run_fn,
            applicable: applicable_fn,
        },
        GpuOp {
            name: OP_UPD,
            versions: &["v1"],
            run: run_update,
            applicable: applicable_update,
        },
    ]
}

// ---- shared helpers (also used by ssd_chunk_scan.rs) ----

/// Uploads a float tensor as f32/bf16/f16 (f64 is converted to f32 first); returns the device
/// tensor and its dtype code.
pub(crate) fn upload_float(g: &Gpu, t: &Tensor) -> Result<(DevTensor, i32), GpuError> {
    match t.dtype() {
        DType::F32 | DType::BF16 | DType::F16 => Ok((g.upload(t)?, dtype_code(t.dtype())?)),
        _ => {
            let f = Tensor::from_f32(&t.shape, t.to_f32_vec());
            Ok((g.upload(&f)?, 0))
        }
    }
}

/// The storage dtype the GPU uses for a float tensor of dtype `d` (f64 -> f32).
pub(crate) fn gpu_float_dtype(d: DType) -> DType {
    match d {
        DType::BF16 | DType::F16 => d,
        _ => DType::F32,
    }
}

/// Converts a downloaded tensor back to the reference's dtype where the GPU computed in f32.
pub(crate) fn as_dtype(t: Tensor, want: DType) -> Tensor {
    if t.dtype() == want {
        t
    } else {
        Tensor::from_f32_as(&t.shape, &t.to_f32_vec(), want)
    }
}

/// Uploads integer values as i64.
pub(crate) fn upload_i64(g: &Gpu, v: &[i64]) -> Result<DevTensor, GpuError> {
    g.upload(&Tensor::from_i64(&[v.len()], v.to_vec()))
}

/// Device pointer of an optional tensor (0 = absent).
pub(crate) fn opt_ptr(g: &Gpu, t: &Option<(DevTensor, i32)>) -> (u64, i32) {
    t.as_ref().map_or((0, 0), |(d, c)| (d.ptr(&g.stream), *c))
}

fn drv(what: &'static str) -> impl Fn(cudarc::driver::DriverError) -> GpuError {
    move |e| GpuError::Driver(format!("launch {what}: {e}"))
}

fn activation(p: &Params, op: &str) -> Result<Activation, GpuError> {
    let s = p.str("activation")?;
    Activation::parse(s).ok_or_else(|| {
        reference::op::OpError::Param {
            op: op.into(),
            name: "activation".into(),
            msg: format!("'{s}' is not one of none, silu, swish"),
        }
        .into()
    })
}

// ---- prefill ----

/// v2 / v5 (`version`, channel-first 16-byte vectors) need seqlen > 0, width <= 4 and rows
/// starting on 16-byte boundaries.
fn v2_ok(version: &str, xdt: DType, seqlen: usize, width: usize) -> Option<String> {
    let es = gpu_float_dtype(xdt).size();
    if seqlen == 0 {
        return Some(format!("{version} needs seqlen > 0"));
    }
    if width == 0 || width > MAX_WIDTH {
        return Some(format!(
            "{version} needs width 1..={MAX_WIDTH} (width = {width})"
        ));
    }
    if !(seqlen * es).is_multiple_of(16) {
        return Some(format!(
            "{version} needs seqlen * {es} bytes to be a multiple of 16 (seqlen = {seqlen})"
        ));
    }
    None
}

/// v4 (channel-last, 4 channels per thread) needs dim % 4 == 0.
fn v4_ok(dim: usize) -> Option<String> {
    (!dim.is_multiple_of(4)).then(|| format!("v4 needs dim % 4 == 0 (dim = {dim})"))
}

/// v6 (channel-last, one 16-byte vector of channels per thread) needs every token row to start
/// on a 16-byte boundary: dim * sizeof(x) % 16 == 0 (x stored as `xdt`: f32, bf16 or f16).
fn v6_ok(xdt: DType, dim: usize) -> Option<String> {
    let ve = 16 / xdt.size();
    (!dim.is_multiple_of(ve)).then(|| {
        format!("v6 needs dim % {ve} == 0 for {xdt:?} x (dim = {dim}): 16-byte token rows")
    })
}

pub fn applicable_fn(version: &str, inputs: &TensorMap, p: &Params) -> Option<String> {
    let x = inputs.get("x")?;
    let w = inputs.get("weight")?;
    if x.rank() != 3 || w.rank() != 2 {
        return None; // run() reports the shape error
    }
    let cl = reference::ops::causal_conv1d_fn::read_channel_last(p).ok()?;
    match (version, cl) {
        ("v1" | "v2" | "v5" | "v8", true) => Some(format!(
            "{version} takes layout channel_first; channel_last runs v3 / v4 / v6 / v9 / v10"
        )),
        ("v3" | "v4" | "v6" | "v9" | "v10", false) => {
            Some(format!("{version} takes layout channel_last"))
        }
        ("v3" | "v4" | "v6" | "v9" | "v10", true) if w.shape[1] == 0 || w.shape[1] > MAX_WIDTH => {
            Some(format!(
                "{version} needs width 1..={MAX_WIDTH} (width = {})",
                w.shape[1]
            ))
        }
        ("v4", true) => v4_ok(x.shape[2]),
        ("v6", true) => v6_ok(gpu_float_dtype(x.dtype()), x.shape[2]),
        ("v9" | "v10", true) => {
            v6_ok(gpu_float_dtype(x.dtype()), x.shape[2]).map(|w| w.replace("v6", version))
        }
        ("v2" | "v5" | "v8", false) => v2_ok(version, x.dtype(), x.shape[2], w.shape[1]),
        _ => None,
    }
}

/// One prefill launch on device pointers (shared by `run_fn`, the tests and the bench).
#[derive(Clone, Copy, Debug)]
pub struct FnLaunch {
    pub x: u64,
    pub xdt: i32,
    pub w: u64,
    pub wdt: i32,
    pub bias: u64,
    pub bdt: i32,
    pub init: u64,
    pub idt: i32,
    pub batch: usize,
    pub dim: usize,
    pub seqlen: usize,
    pub width: usize,
    pub act: Activation,
    pub out: u64,
    pub fin: u64,
}

/// Segments of 4 tiles x 64 vectors per warp task (SEG in the kernel).
const V2_SEG_VECS: usize = 4 * 64;
/// Tokens per v3 (channel-last) thread (CL_CHUNK in the kernel).
const CL_CHUNK: usize = 64;
/// Tokens per v6 chunk (V6_CHUNK in the kernel).
const V6_CHUNK: usize = 64;
/// 16-byte vectors a lane in v5 (U in the kernel's name).
const V5_U: usize = 4;
/// v8 / v9 stages (CONV_TMA_ST in the kernel).
const TMA_STAGES: u32 = 4;
/// v8 threads a block (CONV8_BLOCK: 8 consumer warps and a producer warp) and 16-byte vectors
/// a tile (CONV8_TV).
const V8_THREADS: u32 = 288;
const V8_TV: usize = 512;
/// v9 threads a block (16-byte channel vectors a strip) and token rows a stage (CONV9_THREADS,
/// CONV9_TT).
const V9_THREADS: u32 = 128;
const V9_TT: u32 = 4;

/// v8's dynamic shared memory: 128 bytes of barriers (full and empty a stage), then TMA_STAGES
/// stages of the tile and the vector before it.
fn v8_smem_bytes() -> u32 {
    128 + TMA_STAGES * (V8_TV as u32 + 1) * 16
}

/// v9's dynamic shared memory: 128 bytes of barriers, then TMA_STAGES stages of V9_TT token
/// rows of a strip.
fn v9_smem_bytes() -> u32 {
    128 + TMA_STAGES * V9_TT * V9_THREADS * 16
}

/// v9's token segments per batch row: `fit` blocks per (strip, row) fit in one wave; at least
/// one, at most 65535 / batch (gridDim.y), and no more than the tokens / 16 (a segment of
/// fewer tokens is mostly halo).
fn v9_segments(seqlen: u64, fit: u64, batch: u64) -> u64 {
    let cap = (65535 / batch.max(1)).max(1);
    fit.min(seqlen / 16).min(cap).max(1)
}

impl FnLaunch {
    /// The leading arguments every prefill kernel takes: x, weight, bias and initial states
    /// with their dtype codes.
    fn push_inputs<'a>(&'a self, a: &mut cudarc::driver::LaunchArgs<'a>) {
        a.arg(&self.x).arg(&self.xdt).arg(&self.w).arg(&self.wdt);
        a.arg(&self.bias)
            .arg(&self.bdt)
            .arg(&self.init)
            .arg(&self.idt);
    }

    /// Launches `name`, a prefill kernel of causal_conv1d.cu taking (x, xdt, weight, wdt, bias,
    /// bdt, init, idt, lead, dim, L, act, out, fin) (every version but v1), on `grid` blocks of
    /// 256 threads. `lead`: rows (batch x dim) for the channel-first kernels, batch for the
    /// channel-last ones.
    ///
    /// # Safety
    /// The caller has checked the kernel's conditions on the shapes (width, alignment) and that
    /// this launch's device buffers hold the shapes in the module doc; the kernels walk any
    /// work past the grid themselves.
    unsafe fn launch_prefill(
        &self,
        g: &Gpu,
        name: &str,
        lead: i64,
        grid: (u32, u32),
    ) -> Result<(), GpuError> {
        let f = g.function("causal_conv1d", name)?;
        // SAFETY: passed through (this function's contract).
        unsafe { self.launch_prefill_on(g, &f, name, lead, grid, 256, 0) }
    }

    /// `launch_prefill` on a loaded kernel with `threads` a block and `smem` bytes of dynamic
    /// shared memory (v8 / v9's stages).
    ///
    /// # Safety
    /// As `launch_prefill`; `smem` covers what the kernel uses (above 48 KiB the caller has set
    /// the kernel's dynamic shared-memory attribute).
    #[allow(clippy::too_many_arguments)]
    unsafe fn launch_prefill_on(
        &self,
        g: &Gpu,
        f: &cudarc::driver::CudaFunction,
        name: &str,
        lead: i64,
        grid: (u32, u32),
        threads: u32,
        smem: u32,
    ) -> Result<(), GpuError> {
        let (dim, l) = (self.dim as i64, self.seqlen as i64);
        let act = (self.act == Activation::Silu) as i32;
        let mut a = g.stream.launch_builder(f);
        self.push_inputs(&mut a);
        a.arg(&lead)
            .arg(&dim)
            .arg(&l)
            .arg(&act)
            .arg(&self.out)
            .arg(&self.fin);
        let c = cudarc::driver::LaunchConfig {
            grid_dim: (grid.0, grid.1, 1),
            block_dim: (threads, 1, 1),
            shared_mem_bytes: smem,
        };
        // SAFETY: the argument list above is the kernel's (this function's contract); the
        // caller vouches for the shapes and buffers.
        unsafe { a.launch(c) }.map_err(|e| GpuError::Driver(format!("launch {name}: {e}")))?;
        Ok(())
    }

    /// The kernel `{stem}_{f32|h16}_w{width}`: the 16-byte-vector kernels come per x storage
    /// (f32, or bf16 / f16 sharing one kernel that takes xdt) and per filter width.
    fn kernel_name(&self, stem: &str) -> String {
        let s = if self.x_dtype() == DType::F32 {
            "f32"
        } else {
            "h16"
        };
        format!("{stem}_{s}_w{}", self.width)
    }

    /// The kernel `{stem}_{f32|bf16|f16}_w{width}`: v5 / v6 / v8 / v9 come per x dtype (the
    /// conversions and the activation fold into the kernel at compile time; session 23).
    fn kernel_name_dt(&self, stem: &str) -> String {
        let s = match self.x_dtype() {
            DType::F32 => "f32",
            DType::BF16 => "bf16",
            _ => "f16",
        };
        format!("{stem}_{s}_w{}", self.width)
    }

    /// The dtype x is stored in (its code `xdt`).
    fn x_dtype(&self) -> DType {
        match self.xdt {
            0 => DType::F32,
            1 => DType::BF16,
            _ => DType::F16,
        }
    }

    /// v5: grid (row spans of 256 x V5_U 16-byte vectors, rows).
    pub fn run_v5(&self, g: &Gpu) -> Result<(), GpuError> {
        let u = V5_U;
        let xd = self.x_dtype();
        if let Some(why) = v2_ok("v5", xd, self.seqlen, self.width) {
            return Err(GpuError::Unsupported(format!("{OP_FN} {why}")));
        }
        let rows = (self.batch * self.dim) as i64;
        if rows == 0 {
            return Ok(());
        }
        let nv = self.seqlen / (16 / xd.size());
        let gx = nv.div_ceil(256 * u) as u32;
        let gy = (rows as u64).min(65535) as u32;
        let name = self.kernel_name_dt(&format!("conv1d_fn_v5u{u}"));
        // SAFETY: conv1d_fn_v5u* takes launch_prefill's arguments with lead = rows; rows are
        // 16-byte aligned (checked above), device buffers start 256-byte aligned; the kernel
        // walks rows past gridDim.y itself.
        unsafe { self.launch_prefill(g, &name, rows, (gx, gy)) }
    }

    /// v6 (channel-last, one 16-byte vector of channels a thread): grid (channel vectors / 256,
    /// batch x chunks of V6_CHUNK tokens, capped at 65535 and walked by the kernel).
    pub fn run_v6(&self, g: &Gpu) -> Result<(), GpuError> {
        let xd = self.x_dtype();
        if self.width == 0 || self.width > MAX_WIDTH {
            return Err(GpuError::Unsupported(format!(
                "{OP_FN} v6 needs width 1..={MAX_WIDTH} (width = {})",
                self.width
            )));
        }
        if let Some(why) = v6_ok(xd, self.dim) {
            return Err(GpuError::Unsupported(format!("{OP_FN} {why}")));
        }
        let dvv = self.dim / (16 / xd.size());
        let nch = self.seqlen.div_ceil(V6_CHUNK).max(1);
        let ys = (self.batch * nch) as u64;
        if dvv == 0 || ys == 0 {
            return Ok(());
        }
        let name = self.kernel_name_dt("conv1d_fn_v6");
        let grid = (dvv.div_ceil(256) as u32, ys.min(65535) as u32);
        // SAFETY: conv1d_fn_v6_* takes launch_prefill's arguments with lead = batch; x / out
        // hold batch*L*dim, init / fin batch*(width-1)*dim values (channel-last); dim *
        // sizeof(x) % 16 == 0 (checked above), so every token row starts 16-byte aligned; the
        // kernel walks y past gridDim.y itself.
        unsafe { self.launch_prefill(g, &name, self.batch as i64, grid) }
    }

    /// Resident blocks of `f` at `threads` a block and `smem` bytes (the driver's occupancy,
    /// at least 1) times the SMs: the persistent grid of v8 / v9.
    fn resident(
        g: &Gpu,
        f: &cudarc::driver::CudaFunction,
        threads: u32,
        smem: u32,
    ) -> Result<u64, GpuError> {
        let per_sm = f
            .occupancy_max_active_blocks_per_multiprocessor(threads, smem as usize, None)
            .map_err(|e| GpuError::Driver(format!("conv1d occupancy: {e}")))?
            .max(1);
        Ok(g.sm_count as u64 * per_sm as u64)
    }

    /// v8 (channel-first through the bulk copy engine): persistent blocks over (row, tile of
    /// V8_TV vectors) tiles, TMA_STAGES stages of V8_TV + 1 vectors each.
    pub fn run_v8(&self, g: &Gpu) -> Result<(), GpuError> {
        let xd = self.x_dtype();
        if let Some(why) = v2_ok("v8", xd, self.seqlen, self.width) {
            return Err(GpuError::Unsupported(format!("{OP_FN} {why}")));
        }
        let rows = (self.batch * self.dim) as u64;
        let nv = (self.seqlen / (16 / xd.size())) as u64;
        let items = rows * nv.div_ceil(V8_TV as u64);
        if items == 0 {
            return Ok(());
        }
        let name = self.kernel_name_dt("conv1d_fn_v8");
        let f = g.function("causal_conv1d", &name)?;
        let smem = v8_smem_bytes();
        let grid = items.min(Self::resident(g, &f, V8_THREADS, smem)?).max(1) as u32;
        // SAFETY: conv1d_fn_v8_* takes launch_prefill's arguments with lead = rows; rows are
        // 16-byte aligned (checked above: the bulk copies need it), device buffers start
        // 256-byte aligned; smem = the kernel's barrier header + stages.
        unsafe { self.launch_prefill_on(g, &f, &name, rows as i64, (grid, 1), V8_THREADS, smem) }
    }

    /// v9 (channel-last through the bulk copy engine): grid (strips of V9_THREADS channel
    /// vectors, batch x segments), the segments per row as many as fit in one wave of resident
    /// blocks (at least one).
    pub fn run_v9(&self, g: &Gpu) -> Result<(), GpuError> {
        self.run_v9_form(g, "v9")
    }

    /// v10: v9 warp-specialized (a producer warp after the 128 consumer threads).
    pub fn run_v10(&self, g: &Gpu) -> Result<(), GpuError> {
        self.run_v9_form(g, "v10")
    }

    /// v9 / v10 (`v`): the kernel `conv1d_fn_{v}_*`, 160 threads for the warp-specialized form
    /// (over 48 KiB of shared memory the attribute is set).
    fn run_v9_form(&self, g: &Gpu, v: &str) -> Result<(), GpuError> {
        let xd = self.x_dtype();
        let ws = v != "v9";
        if self.width == 0 || self.width > MAX_WIDTH {
            return Err(GpuError::Unsupported(format!(
                "{OP_FN} {v} needs width 1..={MAX_WIDTH} (width = {})",
                self.width
            )));
        }
        if let Some(why) = v6_ok(xd, self.dim).map(|w| w.replace("v6", v)) {
            return Err(GpuError::Unsupported(format!("{OP_FN} {why}")));
        }
        if self.batch > 65535 {
            return Err(GpuError::Unsupported(format!(
                "{OP_FN} {v} takes batch <= 65535 (gridDim.y; batch = {}); use v6",
                self.batch
            )));
        }
        let dvv = (self.dim / (16 / xd.size())) as u64;
        let strips = dvv.div_ceil(V9_THREADS as u64);
        if strips == 0 || self.batch == 0 {
            return Ok(());
        }
        let name = self.kernel_name_dt(&format!("conv1d_fn_{v}"));
        let f = g.function("causal_conv1d", &name)?;
        let smem = v9_smem_bytes();
        if smem > 48 * 1024 {
            f.set_attribute(
                cudarc::driver::sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                smem as i32,
            )
            .map_err(|e| GpuError::Driver(format!("{name} shared-memory attribute: {e}")))?;
        }
        let threads = V9_THREADS + if ws { 32 } else { 0 };
        let fit = Self::resident(g, &f, threads, smem)? / (strips * self.batch as u64);
        let nseg = v9_segments(self.seqlen as u64, fit, self.batch as u64);
        let gy = self.batch as u64 * nseg;
        // SAFETY: conv1d_fn_v9_* takes launch_prefill's arguments with lead = batch; x / out
        // hold batch*L*dim, init / fin batch*(width-1)*dim values (channel-last); dim *
        // sizeof(x) % 16 == 0 (checked above: the bulk copies need 16-byte rows); gridDim.y =
        // batch * nseg (the kernel derives nseg from it); smem = barrier header + stages.
        unsafe {
            self.launch_prefill_on(
                g,
                &f,
                &name,
                self.batch as i64,
                (strips as u32, gy as u32),
                threads,
                smem,
            )
        }
    }

    /// `version`: "v1", "v2", "v5" or "v8" (channel-first pointers), "v3", "v4", "v6", "v9",
    /// or "v10" (channel-last: x / out (batch, L, dim), init / fin (batch,
    /// width-1, dim)); the caller resolves "auto".
    pub fn run(&self, g: &Gpu, version: &str) -> Result<(), GpuError> {
        let rows = (self.batch * self.dim) as i64;
        let (dim, l) = (self.dim as i64, self.seqlen as i64);
        let act = (self.act == Activation::Silu) as i32;
        match version {
            "v1" => {
                let total =
                    (self.batch * self.dim * (self.seqlen + self.width.saturating_sub(1))) as u64;
                if total == 0 {
                    return Ok(());
                }
                let width = self.width as i32;
                let f = g.function("causal_conv1d", "conv1d_fn_v1")?;
                let mut a = g.stream.launch_builder(&f);
                self.push_inputs(&mut a);
                a.arg(&rows)
                    .arg(&dim)
                    .arg(&l)
                    .arg(&width)
                    .arg(&act)
                    .arg(&self.out)
                    .arg(&self.fin);
                // SAFETY: matches conv1d_fn_v1; buffers hold the shapes in the module doc.
                unsafe { a.launch(cfg(grid_for(g, total, 256), 256, 0)) }
                    .map_err(drv("conv1d_fn_v1"))?;
                Ok(())
            }
            "v2" => {
                let xd = self.x_dtype();
                if let Some(why) = v2_ok("v2", xd, self.seqlen, self.width) {
                    return Err(GpuError::Unsupported(format!("{OP_FN} v2: {why}")));
                }
                if rows == 0 {
                    return Ok(());
                }
                let ve = 16 / xd.size();
                let nv = self.seqlen / ve;
                let tasks = (self.batch * self.dim) as u64 * nv.div_ceil(V2_SEG_VECS) as u64;
                let blocks = tasks.div_ceil(8).min(g.sm_count as u64 * 32).max(1) as u32;
                let name = self.kernel_name("conv1d_fn_v2");
                // SAFETY: conv1d_fn_v2_* takes launch_prefill's arguments with lead = rows; rows
                // are 16-byte aligned (checked above) and device buffers start 256-byte aligned.
                unsafe { self.launch_prefill(g, &name, rows, (blocks, 1)) }
            }
            "v3" | "v4" => {
                // Channel-last: x / out (batch, L, dim), init / fin (batch, width-1, dim); v3
                // one channel per thread, v4 four (v2's arithmetic).
                if self.width == 0 || self.width > MAX_WIDTH {
                    return Err(GpuError::Unsupported(format!(
                        "{OP_FN} {version} needs width 1..={MAX_WIDTH} (width = {})",
                        self.width
                    )));
                }
                let v4 = version == "v4";
                if let Some(why) = v4.then(|| v4_ok(self.dim)).flatten() {
                    return Err(GpuError::Unsupported(format!("{OP_FN} {why}")));
                }
                let nch = if self.seqlen > 0 {
                    self.seqlen.div_ceil(CL_CHUNK)
                } else {
                    1
                };
                let per = if v4 { 4 } else { 1 };
                let total = (self.batch * nch * self.dim / per) as u64;
                if total == 0 {
                    return Ok(());
                }
                let name = if v4 {
                    self.kernel_name("conv1d_fn_cl4")
                } else {
                    format!("conv1d_fn_cl_w{}", self.width)
                };
                // SAFETY: conv1d_fn_cl_w* / conv1d_fn_cl4_* take launch_prefill's arguments with
                // lead = batch; x / out hold batch*L*dim, init / fin batch*(width-1)*dim values
                // of their dtypes (channel-last), grid-stride over batch x chunks x channel
                // groups; v4: dim % 4 == 0, so every token row starts 8- (16-bit) or 16-byte
                // (f32) aligned (device buffers start 256-byte aligned).
                unsafe {
                    self.launch_prefill(g, &name, self.batch as i64, (grid_for(g, total, 256), 1))
                }
            }
            "v5" => self.run_v5(g),
            "v6" => self.run_v6(g),
            "v8" => self.run_v8(g),
            "v9" => self.run_v9(g),
            "v10" => self.run_v10(g),
            other => Err(GpuError::NoVersion {
                op: OP_FN.into(),
                version: other.into(),
                known: "auto, v1, v2, v3, v4, v5, v6, v8, v9, v10".into(),
            }),
        }
    }
}

pub fn run_fn(
    g: &Gpu,
    version: &str,
    inputs: &TensorMap,
    p: &Params,
    opts: &RunOpts,
) -> Result<TensorMap, GpuError> {
    let inp = Inputs::new(OP_FN, inputs);
    let cl = reference::ops::causal_conv1d_fn::read_channel_last(p)?;
    let (xt, _) = inp.float("x", 3)?;
    let (batch, dim, seqlen) = if cl {
        (xt.shape[0], xt.shape[2], xt.shape[1])
    } else {
        (xt.shape[0], xt.shape[1], xt.shape[2])
    };
    let (wt, _) = inp.float("weight", 2)?;
    let width = wt.shape[1];
    inp.shape("weight", wt, &[dim, width], "(dim, width)")?;
    if width == 0 {
        return Err(inp
            .err(
                "weight",
                "width is 0; pass weight of shape (dim, width >= 1)",
            )
            .into());
    }
    let bias = match inp.opt_float("bias", 1)? {
        None => None,
        Some((t, _)) => {
            inp.shape("bias", t, &[dim], "(dim,)")?;
            Some(upload_float(g, t)?)
        }
    };
    let (state_shape, state_pat) = if cl {
        (
            [batch, width - 1, dim],
            "(batch, width - 1, dim) (layout channel_last)",
        )
    } else {
        ([batch, dim, width - 1], "(batch, dim, width - 1)")
    };
    let init = match inp.opt_float("initial_states", 3)? {
        None => None,
        Some((t, _)) => {
            inp.shape("initial_states", t, &state_shape, state_pat)?;
            Some(upload_float(g, t)?)
        }
    };
    let act = activation(p, OP_FN)?;
    let version = match version {
        // Session 23 (H200, Super prefill, bf16 width 4, call 4): v10 547.3 / 551.6 us vs v9
        // 560.1 / 564.7 and v6 862-869; v5 (per dtype, 64 registers) 569.6 vs v8 622-624.
        // Session 17: v6 864-871 us vs v4 1021-1023; v5 617-622 vs v2 717-723.
        "auto"
            if cl
                && width <= MAX_WIDTH
                && batch <= 65535
                && v6_ok(gpu_float_dtype(xt.dtype()), dim).is_none() =>
        {
            "v10"
        }
        "auto" if cl && width <= MAX_WIDTH && v6_ok(gpu_float_dtype(xt.dtype()), dim).is_none() => {
            "v6"
        }
        "auto" if cl && v4_ok(dim).is_none() && width <= MAX_WIDTH => "v4",
        "auto" if cl => "v3",
        "auto" if v2_ok("v5", xt.dtype(), seqlen, width).is_none() => "v5",
        "auto" => "v1",
        v => v,
    };
    if matches!(version, "v3" | "v4" | "v6" | "v9" | "v10") != cl {
        return Err(GpuError::Unsupported(format!(
            "{OP_FN} {version} does not take layout {}: v1 / v2 / v5 / v8 are channel_first, v3 / v4 / v6 / v9 / v10 channel_last",
            if cl { "channel_last" } else { "channel_first" }
        )));
    }
    let (x, xdt) = upload_float(g, xt)?;
    let (w, wdt) = upload_float(g, wt)?;
    let odt = gpu_float_dtype(xt.dtype());
    let out_shape = if cl {
        [batch, seqlen, dim]
    } else {
        [batch, dim, seqlen]
    };
    let out = g.alloc_poisoned(&out_shape, odt, opts.poison)?;
    let fin = g.alloc_poisoned(&state_shape, odt, opts.poison)?;
    let (bias_p, bdt) = opt_ptr(g, &bias);
    let (init_p, idt) = opt_ptr(g, &init);
    let l = FnLaunch {
        x: x.ptr(&g.stream),
        xdt,
        w: w.ptr(&g.stream),
        wdt,
        bias: bias_p,
        bdt,
        init: init_p,
        idt,
        batch,
        dim,
        seqlen,
        width,
        act,
        out: out.ptr(&g.stream),
        fin: fin.ptr(&g.stream),
    };
    l.run(g, version)?;
    g.sync()?;
    Ok(reference::op::outputs([
        ("out", as_dtype(g.download(&out, "out")?, xt.dtype())),
        (
            "final_states",
            as_dtype(g.download(&fin, "final_states")?, xt.dtype()),
        ),
    ]))
}

// ---- update ----

pub fn applicable_update(_version: &str, inputs: &TensorMap, _p: &Params) -> Option<String> {
    let w = inputs.get("weight")?;
    if w.rank() == 2 && (w.shape[1] == 0 || w.shape[1] > MAX_WIDTH) {
        return Some(format!(
            "update v1 needs width 1..={MAX_WIDTH} (width = {})",
            w.shape[1]
        ));
    }
    None
}

/// One update launch on device pointers.
#[derive(Clone, Copy, Debug)]
pub struct UpdateLaunch {
    pub x: u64,
    pub xdt: i32,
    pub state: u64,
    pub sdt: i32,
    pub w: u64,
    pub wdt: i32,
    pub bias: u64,
    pub bdt: i32,
    /// i64 (batch,) or 0.
    pub cache_seqlens: u64,
    /// i64 (batch,) or 0.
    pub slots: u64,
    pub batch: usize,
    pub dim: usize,
    pub seqlen: usize,
    pub width: usize,
    pub state_len: usize,
    pub act: Activation,
    pub out: u64,
    /// (batch, seqlen, dim, width-1) in the state's dtype, or 0.
    pub inter: u64,
}

impl UpdateLaunch {
    pub fn run(&self, g: &Gpu) -> Result<(), GpuError> {
        if self.width == 0 || self.width > MAX_WIDTH {
            return Err(GpuError::Unsupported(format!(
                "{OP_UPD} v1 needs width 1..={MAX_WIDTH} (width = {})",
                self.width
            )));
        }
        let n = (self.batch * self.dim) as u64;
        if n == 0 {
            return Ok(());
        }
        let f = g.function(
            "causal_conv1d",
            &format!("conv1d_update_v1_w{}", self.width),
        )?;
        let (b, d, l, sl) = (
            self.batch as i64,
            self.dim as i64,
            self.seqlen as i64,
            self.state_len as i64,
        );
        let act = (self.act == Activation::Silu) as i32;
        let mut a = g.stream.launch_builder(&f);
        a.arg(&self.x)
            .arg(&self.xdt)
            .arg(&self.state)
            .arg(&self.sdt);
        a.arg(&self.w).arg(&self.wdt).arg(&self.bias).arg(&self.bdt);
        a.arg(&self.cache_seqlens).arg(&self.slots);
        a.arg(&b)
            .arg(&d)
            .arg(&l)
            .arg(&sl)
            .arg(&act)
            .arg(&self.out)
            .arg(&self.inter);
        // SAFETY: matches conv1d_update_v1_w*; shapes validated by run_update.
        unsafe { a.launch(cfg(grid_for(g, n, 128), 128, 0)) }.map_err(drv("conv1d_update_v1"))?;
        Ok(())
    }
}

pub fn run_update(
    g: &Gpu,
    _version: &str,
    inputs: &TensorMap,
    p: &Params,
    opts: &RunOpts,
) -> Result<TensorMap, GpuError> {
    let inp = Inputs::new(OP_UPD, inputs);
    let xt = inp.req("x")?;
    let multi = xt.rank() == 3;
    let (xt, _) = inp.float("x", if multi { 3 } else { 2 })?;
    let (batch, dim) = (xt.shape[0], xt.shape[1]);
    let seqlen = if multi { xt.shape[2] } else { 1 };
    let (st, _) = inp.float("conv_state", 3)?;
    let (slots, state_len) = (st.shape[0], st.shape[2]);
    inp.shape(
        "conv_state",
        st,
        &[slots, dim, state_len],
        "(batch|cache, dim, state_len)",
    )?;
    let (wt, _) = inp.float("weight", 2)?;
    let width = wt.shape[1];
    inp.shape("weight", wt, &[dim, width], "(dim, width)")?;
    if width == 0 || state_len + 1 < width {
        return Err(inp
            .err(
                "conv_state",
                format!(
                    "state_len {state_len} is smaller than width - 1 = {}; pass a conv_state \
                     with at least width - 1 columns",
                    width as i64 - 1
                ),
            )
            .into());
    }
    if state_len == 0 && seqlen > 0 && inputs.contains_key("cache_seqlens") {
        return Err(inp
            .err(
                "conv_state",
                "a ring buffer (cache_seqlens) needs state_len >= 1",
            )
            .into());
    }
    let bias = match inp.opt_float("bias", 1)? {
        None => None,
        Some((t, _)) => {
            inp.shape("bias", t, &[dim], "(dim,)")?;
            Some(upload_float(g, t)?)
        }
    };
    let cache_seqlens = match inp.opt_int("cache_seqlens")? {
        None => None,
        Some((t, v)) => {
            inp.shape("cache_seqlens", t, &[batch], "(batch,)")?;
            if let Some(i) = v.iter().position(|&s| s < 0) {
                return Err(inp
                    .err(
                        "cache_seqlens",
                        format!("entry {i} is {} (must be >= 0)", v[i]),
                    )
                    .into());
            }
            Some(upload_i64(g, &v)?)
        }
    };
    let indices = match inp.opt_int("conv_state_indices")? {
        None => {
            if slots < batch {
                return Err(inp
                    .err(
                        "conv_state",
                        format!(
                            "{slots} slots for {batch} rows; pass conv_state_indices or a state \
                             with batch slots"
                        ),
                    )
                    .into());
            }
            None
        }
        Some((t, v)) => {
            inp.shape("conv_state_indices", t, &[batch], "(batch,)")?;
            if let Some(i) = v.iter().position(|&s| s >= slots as i64) {
                return Err(inp
                    .err(
                        "conv_state_indices",
                        format!(
                            "entry {i} is {} but conv_state has {slots} slots (indices must be < \
                             {slots}, or negative for pad rows)",
                            v[i]
                        ),
                    )
                    .into());
            }
            Some(upload_i64(g, &v)?)
        }
    };
    let act = activation(p, OP_UPD)?;
    let (x, xdt) = upload_float(g, xt)?;
    let (state, sdt) = upload_float(g, st)?;
    let (w, wdt) = upload_float(g, wt)?;
    let odt = gpu_float_dtype(xt.dtype());
    let sdtype = gpu_float_dtype(st.dtype());
    let out = g.alloc_poisoned(&xt.shape, odt, opts.poison)?;
    let inter = if multi {
        Some(g.alloc_poisoned(&[batch, seqlen, dim, width - 1], sdtype, opts.poison)?)
    } else {
        None
    };
    let (bias_p, bdt) = opt_ptr(g, &bias);
    let l = UpdateLaunch {
        x: x.ptr(&g.stream),
        xdt,
        state: state.ptr(&g.stream),
        sdt,
        w: w.ptr(&g.stream),
        wdt,
        bias: bias_p,
        bdt,
        cache_seqlens: cache_seqlens.as_ref().map_or(0, |d| d.ptr(&g.stream)),
        slots: indices.as_ref().map_or(0, |d| d.ptr(&g.stream)),
        batch,
        dim,
        seqlen,
        width,
        state_len,
        act,
        out: out.ptr(&g.stream),
        inter: inter.as_ref().map_or(0, |d| d.ptr(&g.stream)),
    };
    l.run(g)?;
    g.sync()?;
    let mut m = reference::op::outputs([
        ("out", as_dtype(g.download(&out, "out")?, xt.dtype())),
        (
            "conv_state",
            as_dtype(g.download(&state, "conv_state")?, st.dtype()),
        ),
    ]);
    if let Some(it) = &inter {
        m.insert(
            "intermediate_conv_window".into(),
            as_dtype(g.download(it, "intermediate_conv_window")?, st.dtype()),
        );
    }
    Ok(m)
}

// ---- benchmark ----

/// Fast deterministic fill: 16-bit float bits (bf16 or f16 per `dt`) of values in [-2, 2).
pub(crate) fn fill_h16(n: usize, seed: u64, bf16: bool) -> Vec<u16> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let v = ((s >> 40) as f32) * (4.0 / (1u64 << 24) as f32) - 2.0;
            if bf16 {
                reference::tensor::f32_to_bf16(v)
            } else {
                reference::tensor::f32_to_f16(v)
            }
        })
        .collect()
}

pub(crate) fn timing_json(t: &crate::runtime::Timing) -> serde_json::Value {
    serde_json::json!({"median_us": t.median_us, "p10_us": t.p10_us, "p90_us": t.p90_us, "samples": t.samples})
}

/// Prefill conv1d at (batch, dim, seqlen, width), bf16 x/weight/bias, silu, no initial states;
/// v1 and v2 (channel-first) and v3 (channel-last) against the copy ceiling (same bytes).
pub fn bench_prefill(
    g: &Gpu,
    batch: usize,
    dim: usize,
    seqlen: usize,
    width: usize,
) -> Result<serde_json::Value, GpuError> {
    let n = batch * dim * seqlen;
    let xs = g
        .stream
        .clone_htod(&fill_h16(n, 11, true))
        .map_err(|e| GpuError::Driver(format!("upload x: {e}")))?;
    let ws = g
        .stream
        .clone_htod(&fill_h16(dim * width, 12, true))
        .map_err(|e| GpuError::Driver(format!("upload weight: {e}")))?;
    let bs = g
        .stream
        .clone_htod(&fill_h16(dim, 13, true))
        .map_err(|e| GpuError::Driver(format!("upload bias: {e}")))?;
    let out = g.alloc_raw::<u16>(n)?;
    let fin = g.alloc_raw::<u16>(batch * dim * width.saturating_sub(1))?;
    use cudarc::driver::DevicePtr;
    let (xp, _a) = xs.device_ptr(&g.stream);
    let (wp, _b) = ws.device_ptr(&g.stream);
    let (bp, _c) = bs.device_ptr(&g.stream);
    let (op, _d) = out.device_ptr(&g.stream);
    let (fp, _e) = fin.device_ptr(&g.stream);
    let l = FnLaunch {
        x: xp,
        xdt: 1,
        w: wp,
        wdt: 1,
        bias: bp,
        bdt: 1,
        init: 0,
        idt: 0,
        batch,
        dim,
        seqlen,
        width,
        act: Activation::Silu,
        out: op,
        fin: fp,
    };
    let bytes = (2 * n * 2) as f64;
    let (ct, cgbs) = crate::bench::copy_ceiling(g, n * 2)?;
    let mut versions = vec![];
    // v3 reads the same buffers as channel-last tensors (batch, seqlen, dim): the same bytes.
    for v in ["v1", "v2", "v5", "v8", "v3", "v4", "v6", "v9", "v10"] {
        let (t, _) = crate::bench::time_launch(g, false, || l.run(g, v))?;
        let gbs = bytes / (t.median_us * 1e-6) / 1e9;
        versions.push(
            serde_json::json!({"version": v, "time": timing_json(&t), "gb_per_s": gbs,
                                         "pct_of_copy": 100.0 * gbs / cgbs}),
        );
    }
    Ok(serde_json::json!({"op": OP_FN,
        "shape": {"batch": batch, "dim": dim, "seqlen": seqlen, "width": width, "dtype": "bf16", "activation": "silu"},
        "bytes": bytes,
        "copy": {"bytes": 2 * n * 2, "time": timing_json(&ct), "gb_per_s": cgbs,
                 "variants": crate::bench::copy_variants(g, n * 2, false)?},
        "versions": versions}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v9_segments_fill_one_wave_and_stay_long() {
        // Super prefill: 10 strips, 792 resident blocks -> 79 segments of a 50,000-token row.
        assert_eq!(v9_segments(50_000, 792 / 10, 1), 79);
        // Short rows: at least 16 tokens a segment, at least one segment.
        assert_eq!(v9_segments(100, 79, 1), 6);
        assert_eq!(v9_segments(10, 79, 1), 1);
        assert_eq!(v9_segments(0, 79, 1), 1);
        // More strips x rows than resident blocks: one segment each.
        assert_eq!(v9_segments(50_000, 0, 4), 1);
        // gridDim.y = batch x segments stays <= 65535.
        assert!(v9_segments(1 << 30, 1 << 20, 1000) * 1000 <= 65535);
    }

    #[test]
    fn tma_stages_fit_the_default_shared_memory() {
        // No attribute is set: both must stay under 48 KiB.
        assert!(v8_smem_bytes() <= 48 * 1024, "{}", v8_smem_bytes());
        assert!(v9_smem_bytes() <= 48 * 1024, "{}", v9_smem_bytes());
        assert_eq!(v8_smem_bytes(), 128 + 4 * 513 * 16);
    }
}
