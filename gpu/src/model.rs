//! The end-to-end Nemotron-H model on the GPU: [`GpuKernels`] implements the model's compute
//! backend ([`reference::model::ModelKernels`]), so `Model::set_kernels` runs the same network
//! (reference/src/model/nemotron.rs) with every op on the device.
//!
//! - Own kernels (gpu/kernels/model_ops.cu): the linear layers as a tiled fp32 GEMM (fp32
//!   accumulate with explicit FMAs, no TF32: comparable with the fp32 golden), RMSNorm, gated
//!   RMSNorm, ReLU² and GQA causal attention (one kernel, online softmax over key chunks).
//! - Reused op kernels (through [`crate::ops::run_version`], the same entry `duet check
//!   --backend gpu` tests): `causal_conv1d_fn` (prefill conv + SiLU), `causal_conv1d_update`
//!   (decode / verify conv with per-token windows), `ssd_chunk_scan`, `selective_state_update`
//!   and `noaux_tc_router`.
//! - Multi-token verification (`selective_state_update_multi_token` with an f32 state, chain
//!   from the unrounded state, main state kept) runs as `t` single-token
//!   `selective_state_update` launches on a copy of the state, recording the state after every
//!   step (with an f32 state this is the same recurrence step by step). The op's own GPU kernel
//!   (`ssu_mt_v1`, gpu/src/ops/ssu_multi_token.rs, bit-exact on the H200) could replace it.
//! - Linear layers with at most 8 rows (decode, MTP verification) run `model_gemv_f32` (a warp
//!   per output column), more rows the tiled `model_gemm_f32`.
//! - Routed experts (`GpuKernels`' `routed_experts`, session 5): `moe_permute` /
//!   `moe_finalize` on the host; per expert the gathered rows uploaded once and up GEMM,
//!   ReLU² and down GEMM queued back to back on the device into one expert-ordered buffer, one
//!   download per layer (before: one upload, launch and download per expert and op). The
//!   LatentMoE GPU ops (gpu/src/ops/moe.rs: permute, NVFP4 grouped GEMMs, finalize) are not
//!   wired in yet.
//!
//! Weights stay on the device: the weight operands of the model's own kernels (linear layer
//! weights and biases, RMSNorm and gated-RMSNorm weights) are uploaded once into a weight cache
//! and reused by every later call (see [`GpuKernels`] for the keys and the assumption that
//! makes them safe). Activations are still uploaded per call and results downloaded; the
//! reused op kernels (conv, SSD, SSU, router) get their small per-layer vectors (conv weight,
//! A, D, dt_bias, router bias) through the op runner's TensorMaps, per call. Outputs are
//! poisoned (every byte = [`GpuKernels::poison`]) and guarded before the kernels write them,
//! and a guard overwrite is an error.

use crate::ops::{self, RunOpts};
use crate::runtime::{self, DevTensor, Gpu};
use crate::GpuError;
use cudarc::driver::{LaunchConfig, PushKernelArg};
use reference::model::kernels::{
    check_routed_experts, mamba_decode_default, op_err, routed_experts_with, to_channel_major,
    to_token_major, AttnGeometry, LayerState, MambaStep, ResidentMamba, Route, SsmDims, SsmParams,
    SsmRows,
};
use reference::model::nemotron::ExpertFormat;
use reference::model::weights::Init;
use reference::model::{Mat, ModelError, ModelKernels};
use reference::ops::noaux_tc_router::{GroupMask, NormMode, RouterConfig, SigmoidMode};
use reference::ops::ssd_chunk_scan::{DtTransform, SsdArgs, SsdOutput};
use reference::{DType, Tensor, TensorMap};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Kernel file of the model's own kernels.
const FILE: &str = "model_ops";
/// Output tile edge and threads of `model_gemm_f32`.
const GEMM_TILE: u64 = 64;
/// `model_gemv_f32`: the most rows of x it takes (GEMV_MAXM) and its warps per block.
const GEMV_MAX_ROWS: usize = 8;
const GEMV_WARPS: u32 = 8;
/// `model_gemv1_*`: output columns per warp (GEMV1_R_F32 / _BF16 / _NV in model_ops.cu).
const GEMV1_R_F32: u32 = 2;
const GEMV1_R_BF16: u32 = 2;
const GEMV1_R_NV: u32 = 4;
/// `model_gemv1_slots_nvfp4w_pipe*`: columns per group (SLOTP_ROWS), a stage's bytes (32
/// rows x 64 chunks x 8 bytes of codes, 64 chunks x 16 f32 of x), a group's table of pairs,
/// the stages of the default, and the most dynamic shared memory a block may take beside the
/// 8 KB static table (227 KB on sm_90).
const SLOTP_ROWS: u32 = GEMV_WARPS * GEMV1_R_NV;
const SLOTP_STAGE: usize = 32 * 64 * 8 + 64 * 64;
const SLOTP_PAIRS: usize = 256 * 8;
const SLOTP_STAGES: usize = 3;
const SLOTP_MAX_SMEM: usize = 227 * 1024 - 8 * 1024;

/// Dynamic shared memory of `model_gemv1_slots_nvfp4w_pipe` with `stages` stages at K: per
/// stage a slice's codes and x, and a group's scale bytes (32 rows x K / 16, padded to 16)
/// and pairs.
pub(crate) fn slotp_smem(stages: usize, k: usize) -> usize {
    stages * (SLOTP_STAGE + (32 * (k / 16)).div_ceil(16) * 16 + SLOTP_PAIRS)
}

/// Dynamic shared memory of `model_gemv1_slots_nvfp4w_xs*` at K: x in 2 KB per 32 chunks,
/// then the 256 pairs.
pub(crate) fn slots_xs_smem(k: usize) -> usize {
    (k / 16).div_ceil(32) * 2048 + SLOTP_PAIRS
}

/// Dynamic shared memory of `model_gemv1_slots_nvfp4w_mma*` at K (K % 128 == 0): x's three
/// f16 terms in 768 bytes a 128-k step plus one zero step, then up to 8 x 16 partial sums.
pub(crate) fn slotm_smem(k: usize) -> usize {
    (k / 128 + 1) * 768 + 512
}

/// Whether `op` is a `model_gemv1_slots_nvfp4w_mma*` kernel (the tensor-core slot GEMV).
fn slots_mma_op(op: &str) -> bool {
    op.starts_with("model_gemv1_slots_nvfp4w_mma")
}

/// Warps a block of a `model_gemv1_slots_nvfp4w_mma*` kernel (8 for the `w8` forms, else 4).
fn slots_mma_warps(op: &str) -> u32 {
    if op.contains("w8") {
        8
    } else {
        4
    }
}

/// The K split of a `model_gemv1_slots_nvfp4w_mma<SK>*` kernel (warps a group of 16 columns).
fn slots_mma_split(op: &str) -> u32 {
    op.trim_start_matches("model_gemv1_slots_nvfp4w_mma")
        .chars()
        .next()
        .and_then(|c| c.to_digit(10))
        .unwrap_or(1)
}

/// Whether the default pipe kernel takes K: K % 32 == 0 and its stages fit.
pub(crate) fn slotp_fits(k: usize) -> bool {
    k > 0 && k.is_multiple_of(32) && slotp_smem(SLOTP_STAGES, k) <= SLOTP_MAX_SMEM
}

/// Whether a one-row product takes `model_gemv1_*`: K % 16 == 0, x 16-byte aligned, the
/// weight aligned for 16-weight chunk loads (f32 / bf16: 16 bytes; NVFP4 codes: 8).
fn gemv1_fits(k: usize, px: u64, pw: u64, dt: DType) -> bool {
    let wa = if dt == DType::U8 { 8 } else { 16 };
    k > 0 && k.is_multiple_of(16) && px.is_multiple_of(16) && pw.is_multiple_of(wa)
}
const GEMM_THREADS: u32 = 256;
const NORM_THREADS: u32 = 256;
/// `NORM_REG` in model_ops.cu: values of a row per thread that `model_rmsnorm` keeps in
/// registers (longer rows take its loop); `model_add_rmsnorm` takes rows up to that only.
const NORM_REG: usize = 16;

/// Warps per block of a `model_gemv1_*` launch over n columns, r per warp: GEMV_WARPS, or
/// fewer when that leaves under two blocks per SM of the H200 (132 SMs), so a small product
/// (the router gate 512 x 4096, the latent projections, attention's K / V) spreads over more
/// SMs (session 9's ncu profile of an engine step: the router gate's 32 blocks of 8 warps ran
/// on 32 SMs, 10.3 us for 8.4 MB). Every column's chunks and order stay the same: same bits.
pub fn gemv1_warps_per_block(n: usize, r: u32) -> u32 {
    let warps = (n as u64).div_ceil(r as u64);
    warps.div_ceil(2 * 132).clamp(1, GEMV_WARPS as u64) as u32
}

/// The split form of a one-row product (`model_gemv1_*_split`: a block of S warps shares r
/// columns, the chunks of a row dealt over its 32 S threads, the warps' sums added in warp
/// order): Some(S) for few long rows, i.e. K >= 4096 (256 chunks) and N < 2112 (under 8 warps
/// per SM of the H200 at 2 columns a warp in the one-warp form); S = chunks / 64 within 2..=8
/// (one trip of two chunks per thread at K = 4096). Session 9's ncu profile: the router gate
/// (512 x 4096 f32) took 9.5 us and the latent down projection (1024 x 4096 bf16) 6.4 us for
/// 8.4 MB each, each warp walking its rows in 4 dependent trips; split: 5.5 and ~5 us (call 5).
/// Other bits than the one-warp form, the same for every storage (the choice depends on the
/// shape only, not on the storage's columns per warp).
///
/// The decode engine's grouped expert GEMVs (`model_gemv1_slots_*`) have no split form, so the
/// engine keeps the model path's bits (per-expert GEMVs through here) only for expert shapes
/// that do not split: the Super experts (2688 x 1024, 1024 x 2688) do not (session 9 call 5
/// split K = 2688 too and the engine's logits moved 6.7e-7 from the model path's).
pub fn gemv1_split(n: usize, k: usize) -> Option<u32> {
    let chunks = (k / 16) as u64;
    (chunks >= 256 && (n as u64) < 2 * 8 * 132)
        .then(|| (chunks / 64).clamp(2, GEMV_WARPS as u64) as u32)
}

/// Whether `model_add_rmsnorm` takes a row of n values (n <= 256 * NORM_REG = 4096); the
/// engine falls back to the axpy and the norm for longer rows (the same bits).
pub fn add_rmsnorm_fits(n: usize) -> bool {
    n <= NORM_THREADS as usize * NORM_REG
}
const ATT_THREADS: u32 = 128;
/// CUDA's grid.y limit.
const MAX_GRID_Y: u64 = 65_535;

/// Default bound of the device weight cache (bytes): the H200 has 141 GB; the f32 super
/// preset with `MEMEMEM*E` (+ MTP `*E`) holds about 61 GB when every expert was touched.
pub const DEFAULT_WEIGHT_CACHE_BYTES: u64 = 100 << 30;

/// Elements sampled (evenly spaced, first and last included) to check a cached host weight.
const SAMPLES: usize = 64;

/// What identifies a cached weight.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum WeightKey {
    /// A host slice owned by the model: its address and length (see [`GpuKernels`]).
    Host { ptr: usize, len: usize },
    /// The same slice stored as bf16 (every value bf16-exact; [`GpuKernels::bf16_weights`]).
    HostBf16 { ptr: usize, len: usize },
    /// A lazily generated matrix: the generator determines every value.
    Lazy {
        rows: usize,
        cols: usize,
        seed: u64,
        /// (variant, two f32 parameters as bits)
        init: (u8, u32, u32),
        /// (format, NVFP4 global scale bits); (0, 0) for plain [`Mat::Lazy`]
        format: (u8, u32),
        /// device storage: 0 f32, 1 bf16, 2 NVFP4 for exact use ([`crate::nvfp4_store`])
        store: u8,
    },
    /// The one-element dummy passed for an absent bias.
    Dummy,
}

struct Cached {
    dev: Arc<DevTensor>,
    /// [`sample_hash`] of the host values when uploaded (0 for lazy keys).
    sample: u64,
    bytes: u64,
    last_use: u64,
}

#[derive(Default)]
struct WeightCache {
    map: HashMap<WeightKey, Cached>,
    bytes: u64,
    tick: u64,
}

/// Counters of the device weight cache ([`GpuKernels::weight_stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WeightStats {
    /// Weights uploaded (first use, a changed host weight, or after an eviction).
    pub uploads: u64,
    pub upload_bytes: u64,
    /// Calls served from the cache.
    pub hits: u64,
    /// Entries dropped to stay under [`GpuKernels::weight_cache_limit`].
    pub evictions: u64,
    /// Bytes resident now, and entries.
    pub resident_bytes: u64,
    pub entries: usize,
}

/// A cheap fingerprint of a host slice: its length and [`SAMPLES`] evenly spaced elements.
fn sample_hash(v: &[f32]) -> u64 {
    let n = v.len();
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ n as u64;
    let mut mix = |x: u64| {
        h ^= x;
        h = h.wrapping_mul(0x0000_0100_0000_01B3);
    };
    if n > 0 {
        let k = SAMPLES.min(n);
        for j in 0..k {
            // j = 0 -> 0, j = k-1 -> n-1
            let i = if k == 1 { 0 } else { j * (n - 1) / (k - 1) };
            mix(v[i].to_bits() as u64);
        }
    }
    h
}

/// Whether `x` is a bf16 value (its low 16 bits are zero: widening the bf16 gives it back;
/// NaN payloads included).
fn bf16_exact(x: f32) -> bool {
    x.to_bits() & 0xFFFF == 0
}

fn init_key(i: Init) -> (u8, u32, u32) {
    match i {
        Init::Linear => (0, 0, 0),
        Init::Around { center, spread } => (1, center.to_bits(), spread.to_bits()),
        Init::ALog => (2, 0, 0),
        Init::DtBias => (3, 0, 0),
    }
}

fn format_key(f: ExpertFormat, global_scale: f32) -> (u8, u32) {
    match f {
        ExpertFormat::F32 => (1, 0),
        ExpertFormat::Bf16 => (2, 0),
        ExpertFormat::Nvfp4 => (3, global_scale.to_bits()),
    }
}

/// Every value of a lazy matrix, generated on all host cores (row blocks per thread).
fn generate(w: &Mat) -> Vec<f32> {
    let (rows, cols) = (w.rows(), w.cols());
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(rows.max(1));
    if threads <= 1 || rows * cols < (1 << 16) || cols == 0 {
        return w.values().into_owned();
    }
    let per = rows.div_ceil(threads);
    let mut out = vec![0f32; rows * cols];
    std::thread::scope(|s| {
        for (i, chunk) in out.chunks_mut(per * cols).enumerate() {
            s.spawn(move || {
                let r0 = i * per;
                let r1 = r0 + chunk.len() / cols;
                chunk.copy_from_slice(&w.row_block(r0, r1));
            });
        }
    });
    out
}

/// The NVFP4 device buffer ([`crate::nvfp4_store`]) of the lazy matrix `raw` quantized with
/// `global_scale` (what [`Mat::LazyAs`] in NVFP4 dequantizes), quantized by row blocks on all
/// host cores (NVFP4 blocks run along a row, and the global scale is given, so row blocks
/// quantize as the whole). `None` when a block is not exact in the stored form.
fn pack_nvfp4_rows(raw: &Mat, global_scale: f32) -> Option<Vec<u8>> {
    use crate::nvfp4_store::{lut, pack_parts, Layout};
    use reference::ops::nvfp4_quantize::{quantize, Nvfp4Mode, SfLayout};
    let (rows, cols) = (raw.rows(), raw.cols());
    if rows == 0 || cols == 0 || !cols.is_multiple_of(16) {
        return None;
    }
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(rows);
    let per = rows.div_ceil(threads.max(1));
    let parts: Vec<Option<(Vec<u8>, Vec<u8>)>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..rows.div_ceil(per))
            .map(|i| {
                s.spawn(move || {
                    let (r0, r1) = (i * per, ((i + 1) * per).min(rows));
                    let x = raw.row_block(r0, r1);
                    let q = quantize(
                        &x,
                        r1 - r0,
                        cols,
                        Some(global_scale),
                        Nvfp4Mode::Kernel,
                        SfLayout::Linear,
                    )
                    .ok()?;
                    let (codes, sf) = pack_parts(&q)?;
                    Some((codes.to_vec(), sf.to_vec()))
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().ok().flatten()).collect()
    });
    let l = Layout::of(rows, cols);
    let mut out = Vec::with_capacity(l.len);
    for p in &parts {
        out.extend_from_slice(&p.as_ref()?.0);
    }
    out.resize(l.sf_off, 0);
    for p in &parts {
        out.extend_from_slice(&p.as_ref()?.1);
    }
    out.resize(l.lut_off, 0);
    out.extend_from_slice(&lut(global_scale));
    Some(out)
}

/// The GPU backend of the model.
///
/// Device-resident weights: the [`ModelKernels`] methods take their weight operands (linear
/// weights and biases, norm weights) from a cache that uploads each weight once:
/// - a lazily generated [`Mat`] (the super preset) is keyed by its generator (seed, init,
///   shape, storage format): generated on the host once (on every core) and uploaded once;
/// - a host slice (a dense [`Mat`] or a weight vector) is keyed by its address and length,
///   plus a fingerprint of 64 evenly spaced elements checked on every call (a changed
///   fingerprint re-uploads).
///
/// Assumption: the weight slices passed to these methods belong to a [`reference::model::Model`]
/// whose weights are immutable while it uses this backend (true of `Model`: its forward
/// passes take `&self`). A weight edited in place without changing any sampled element, or
/// freed and another weight of the same length and sampled values allocated at the same
/// address, would be served stale: after editing weights or before reusing one backend for
/// another model, call [`GpuKernels::clear_weights`]. The cache is bounded by the model's
/// weights and by [`GpuKernels::weight_cache_limit`] (least recently used entries go
/// first). The slice-taking methods ([`GpuKernels::gemm`], [`GpuKernels::rmsnorm_rows`],
/// [`GpuKernels::gated_rmsnorm_rows`]) upload their operands per call (no cache).
pub struct GpuKernels {
    g: Arc<Gpu>,
    /// Device weight cache (see the type doc).
    weights: Mutex<WeightCache>,
    /// Dense weights (key, fingerprint) found not bf16-exact ([`GpuKernels::bf16_weights`]).
    not_bf16: Mutex<std::collections::HashSet<(WeightKey, u64)>>,
    uploads: AtomicU64,
    upload_bytes: AtomicU64,
    hits: AtomicU64,
    evictions: AtomicU64,
    /// Bound of the weight cache in bytes ([`DEFAULT_WEIGHT_CACHE_BYTES`]).
    pub weight_cache_limit: u64,
    /// Byte written over every output buffer before a launch (0xFF = NaN for f32).
    pub poison: u8,
    /// Store bf16-exact linear weights as bf16 on the device (half the bytes; the GEMM /
    /// GEMV widen them exactly, so the outputs keep their bits). Off by default until the bf16
    /// kernels have run on the H200; `DUET_BF16_WEIGHTS=1` turns it on.
    pub bf16_weights: bool,
    /// Store NVFP4 weights ([`Mat::LazyAs`] in NVFP4: the super preset's experts) as codes
    /// and scale bytes plus a table of pairs ([`crate::nvfp4_store`], 0.5625 bytes per
    /// weight, the same results as the dequantized f32; run on the H200 in session 8, call 4).
    /// Off by default; `DUET_NVFP4_WEIGHTS=1` or `duet e2e --gpu-weights compact` turns it on.
    pub nvfp4_weights: bool,
    /// Kernel version of the reused `causal_conv1d_fn` (v1: the reference's summation order).
    pub conv_fn_version: &'static str,
    /// Kernel version of the reused `ssd_chunk_scan`.
    pub ssd_version: &'static str,
    /// Kernel version of the reused `selective_state_update`.
    pub ssu_version: &'static str,
    /// Kernel version of the reused `noaux_tc_router`.
    pub router_version: &'static str,
    /// MTP verification (`ssu_verify`): `None` runs `t` single-token `selective_state_update`
    /// launches recording the state after each (the default, run on the H200); `Some(v)` runs
    /// the `selective_state_update_multi_token` kernel version `v` once (one launch writes every
    /// intermediate state; same numbers: the bridge test below checks the TensorMap on the CPU
    /// reference; not yet run through the model on the H200).
    pub ssu_verify_kernel: Option<&'static str>,
    /// The routed slots' NVFP4 GEMV (the decode engine, where it applies: K % 16 == 0 and
    /// aligned rows): "chunk" (`model_gemv1_slots_nvfp4w`, the default until session 11),
    /// "xs" / "xs3" (the same with x and the pairs from shared memory,
    /// `model_gemv1_slots_nvfp4w_xs*`; xs3, three blocks an SM, was the default from session
    /// 11: chain 67.0 -> 61.6 us on the H200), "xs3m" (xs3 up, the fused down GEMV two
    /// columns a warp: the default since session 12), or "pipe" (`model_gemv1_slots_nvfp4w_pipe`:
    /// persistent blocks, the weights through cp.async stages; K % 32 == 0 and the stages
    /// fit; 75.6 us). Every form gives the same bits. `DUET_SLOT_KERNEL` or `duet e2e
    /// --slot-kernel` picks.
    pub slot_kernel: &'static str,
    /// The decode step's SSU kernel version ([`DECODE_SSUS`]; `DUET_DECODE_SSU`, default
    /// [`DECODE_SSU`]): every one gives the same state bits and `out` within the op's tolerance
    /// (v12 sums `out` in another order; v12 runs where it applies, dstate 128 and at most one
    /// head an SM, v10 elsewhere: [`decode_ssu_kernel`]).
    pub decode_ssu: &'static str,
}

impl std::fmt::Debug for GpuKernels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "GpuKernels({:?}, poison {:#04x})", self.g, self.poison)
    }
}

fn merr(op: &str) -> impl Fn(GpuError) -> ModelError + '_ {
    move |e| op_err(&format!("gpu {op}"), e)
}

fn bad(op: &str, msg: String) -> GpuError {
    GpuError::Unsupported(format!("{op}: {msg}"))
}

/// An f32 tensor of `shape`, checking the element count (no panic on a bad call).
fn tensor(op: &str, name: &str, shape: &[usize], v: &[f32]) -> Result<Tensor, GpuError> {
    let n: usize = shape.iter().product();
    if n != v.len() {
        return Err(bad(
            op,
            format!(
                "'{name}' has {} values but shape {shape:?} needs {n}",
                v.len()
            ),
        ));
    }
    Ok(Tensor::from_f32(shape, v.to_vec()))
}

/// The state-update ops' inputs for one sequence: state (1, h, hd, n); x, dt, B, C with the
/// leading dims `lead` ((1,) for one token, (1, t) for t tokens); A, D, dt_bias per head.
fn ssm_inputs(
    op: &str,
    dims: SsmDims,
    state: &[f32],
    lead: &[usize],
    p: &SsmParams<'_>,
    r: &SsmRows<'_>,
) -> Result<TensorMap, GpuError> {
    let SsmDims {
        nheads: h,
        headdim: hd,
        ngroups: g,
        dstate: n,
    } = dims;
    let with = |tail: &[usize]| [lead, tail].concat();
    let mut m = TensorMap::new();
    m.insert("state".into(), tensor(op, "state", &[1, h, hd, n], state)?);
    m.insert("x".into(), tensor(op, "x", &with(&[h, hd]), r.x)?);
    m.insert("dt".into(), tensor(op, "dt", &with(&[h]), r.dt)?);
    m.insert("A".into(), tensor(op, "A", &[h], p.a)?);
    m.insert("B".into(), tensor(op, "B", &with(&[g, n]), r.b)?);
    m.insert("C".into(), tensor(op, "C", &with(&[g, n]), r.c)?);
    m.insert("D".into(), tensor(op, "D", &[h], p.d)?);
    m.insert("dt_bias".into(), tensor(op, "dt_bias", &[h], p.dt_bias)?);
    Ok(m)
}

/// Output `name` of an op's result map as f32 values, moved out of the map (an f32 tensor's
/// values are not copied: the decode state update returns a 4 MB state per call).
fn out_f32(m: &mut TensorMap, op: &str, name: &str) -> Result<Vec<f32>, GpuError> {
    match m.remove(name) {
        Some(Tensor {
            data: reference::Data::F32(v),
            ..
        }) => Ok(v),
        Some(t) => Ok(t.to_f32_vec()),
        None => Err(GpuError::Driver(format!(
            "{op}: the GPU op returned no '{name}'"
        ))),
    }
}

fn launch_err(what: &'static str) -> impl Fn(cudarc::driver::DriverError) -> GpuError {
    move |e| GpuError::Driver(format!("launch {what}: {e}"))
}

fn grid_u32(op: &str, blocks: u64) -> Result<u32, GpuError> {
    u32::try_from(blocks)
        .ok()
        .filter(|&b| b <= i32::MAX as u32)
        .ok_or_else(|| bad(op, format!("{blocks} blocks exceed the grid limit")))
}

impl GpuKernels {
    /// Opens the GPU (a clear [`GpuError::NoDevice`] without one) with the default versions.
    pub fn new() -> Result<GpuKernels, GpuError> {
        Ok(GpuKernels::on(runtime::gpu()?))
    }

    /// The backend on an opened GPU.
    pub fn on(g: Arc<Gpu>) -> GpuKernels {
        GpuKernels {
            g,
            weights: Mutex::new(WeightCache::default()),
            not_bf16: Mutex::new(std::collections::HashSet::new()),
            uploads: AtomicU64::new(0),
            upload_bytes: AtomicU64::new(0),
            hits: AtomicU64::new(0),
            evictions: AtomicU64::new(0),
            weight_cache_limit: DEFAULT_WEIGHT_CACHE_BYTES,
            poison: 0xFF,
            bf16_weights: std::env::var("DUET_BF16_WEIGHTS").is_ok_and(|v| v == "1"),
            nvfp4_weights: std::env::var("DUET_NVFP4_WEIGHTS").is_ok_and(|v| v == "1"),
            conv_fn_version: "v1",
            ssd_version: "v1",
            ssu_version: "auto",
            router_version: "auto",
            ssu_verify_kernel: None,
            slot_kernel: slot_kernel_from_env(),
            decode_ssu: decode_ssu_from_env(),
        }
    }

    /// The same backend writing `poison` over outputs before every launch.
    pub fn with_poison(mut self, poison: u8) -> GpuKernels {
        self.poison = poison;
        self
    }

    pub fn gpu(&self) -> &Arc<Gpu> {
        &self.g
    }

    /// Waits for every launched kernel (for timing).
    pub fn sync(&self) -> Result<(), GpuError> {
        self.g.sync()
    }

    /// Counters of the weight cache.
    pub fn weight_stats(&self) -> WeightStats {
        let (resident_bytes, entries) = match self.weights.lock() {
            Ok(c) => (c.bytes, c.map.len()),
            Err(p) => (p.get_ref().bytes, p.get_ref().map.len()),
        };
        WeightStats {
            uploads: self.uploads.load(Ordering::Relaxed),
            upload_bytes: self.upload_bytes.load(Ordering::Relaxed),
            hits: self.hits.load(Ordering::Relaxed),
            evictions: self.evictions.load(Ordering::Relaxed),
            resident_bytes,
            entries,
        }
    }

    /// Drops every cached weight (the next calls upload again).
    pub fn clear_weights(&self) {
        let mut c = match self.weights.lock() {
            Ok(c) => c,
            Err(p) => p.into_inner(),
        };
        c.map.clear();
        c.bytes = 0;
        if let Ok(mut n) = self.not_bf16.lock() {
            n.clear();
        }
    }

    /// The cached device copy of a weight: `key`, `sample` (the fingerprint checked on a hit),
    /// `make` (the host values, called on a miss).
    fn cached(
        &self,
        key: WeightKey,
        sample: u64,
        make: impl FnOnce() -> Vec<f32>,
    ) -> Result<Arc<DevTensor>, GpuError> {
        self.cached_as(key, sample, DType::F32, make)
    }

    /// [`GpuKernels::cached`] stored as `store` (F32, or BF16 for values that are all
    /// bf16-exact: the conversion loses nothing).
    fn cached_as(
        &self,
        key: WeightKey,
        sample: u64,
        store: DType,
        make: impl FnOnce() -> Vec<f32>,
    ) -> Result<Arc<DevTensor>, GpuError> {
        self.cached_tensor(key, sample, || {
            let v = make();
            Ok(if store == DType::BF16 {
                let n = v.len().max(1);
                let v = if v.is_empty() { vec![0.0] } else { v };
                Tensor::from_f32_as(&[n], &v, DType::BF16)
            } else if v.is_empty() {
                Tensor::from_f32(&[1], vec![0.0])
            } else {
                Tensor::from_f32(&[v.len()], v)
            })
        })
    }

    /// The cache lookup / insert behind [`GpuKernels::cached_as`], for a host tensor of any
    /// dtype: `make` runs on a miss (or a changed host weight), without the lock held.
    fn cached_tensor(
        &self,
        key: WeightKey,
        sample: u64,
        make: impl FnOnce() -> Result<Tensor, GpuError>,
    ) -> Result<Arc<DevTensor>, GpuError> {
        let lock_err = |_| GpuError::Driver("the weight cache lock is poisoned".into());
        {
            let mut c = self.weights.lock().map_err(lock_err)?;
            c.tick += 1;
            let tick = c.tick;
            if let Some(e) = c.map.get_mut(&key) {
                if e.sample == sample {
                    e.last_use = tick;
                    self.hits.fetch_add(1, Ordering::Relaxed);
                    return Ok(e.dev.clone());
                }
            }
        }
        let dev = Arc::new(self.g.upload(&make()?)?);
        let bytes = dev.len as u64;
        self.uploads.fetch_add(1, Ordering::Relaxed);
        self.upload_bytes.fetch_add(bytes, Ordering::Relaxed);
        let mut c = self.weights.lock().map_err(lock_err)?;
        c.tick += 1;
        let last_use = c.tick;
        if let Some(old) = c.map.insert(
            key,
            Cached {
                dev: dev.clone(),
                sample,
                bytes,
                last_use,
            },
        ) {
            c.bytes -= old.bytes;
        }
        c.bytes += bytes;
        // Least recently used entries go first (never the one just inserted).
        while c.bytes > self.weight_cache_limit && c.map.len() > 1 {
            let victim = c
                .map
                .iter()
                .filter(|(k, _)| **k != key)
                .min_by_key(|(_, e)| e.last_use)
                .map(|(k, _)| *k);
            let Some(vk) = victim else { break };
            if let Some(e) = c.map.remove(&vk) {
                c.bytes -= e.bytes;
                self.evictions.fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(dev)
    }

    /// A model weight slice, device-resident (keyed by address and length).
    pub(crate) fn weight_vec(&self, v: &[f32]) -> Result<Arc<DevTensor>, GpuError> {
        let key = WeightKey::Host {
            ptr: v.as_ptr() as usize,
            len: v.len(),
        };
        self.cached(key, sample_hash(v), || v.to_vec())
    }

    /// A model weight matrix, device-resident: f32, or bf16 when
    /// [`GpuKernels::bf16_weights`] is on and every value is bf16-exact (a
    /// [`Mat::LazyAs`] in bf16, or dense values that all survive the round trip). The GEMM /
    /// GEMV kernels read either ([`GpuKernels::launch_gemm`]) with the same bits out.
    pub(crate) fn weight_mat(&self, w: &Mat) -> Result<Arc<DevTensor>, GpuError> {
        if self.bf16_weights {
            match w {
                Mat::Dense { data, .. } => {
                    let key = WeightKey::HostBf16 {
                        ptr: data.as_ptr() as usize,
                        len: data.len(),
                    };
                    // The check runs once per upload; a cached entry is served by its
                    // fingerprint as any host weight.
                    let sample = sample_hash(data);
                    let hit = self
                        .weights
                        .lock()
                        .map(|c| c.map.get(&key).is_some_and(|e| e.sample == sample))
                        .unwrap_or(false);
                    // A weight found not bf16-exact is remembered (with its fingerprint), so
                    // it is scanned once, not on every call.
                    let known_not = self
                        .not_bf16
                        .lock()
                        .map(|n| n.contains(&(key, sample)))
                        .unwrap_or(false);
                    if hit || (!known_not && data.iter().all(|&x| bf16_exact(x))) {
                        return self.cached_as(key, sample, DType::BF16, || data.clone());
                    }
                    if !known_not {
                        if let Ok(mut n) = self.not_bf16.lock() {
                            n.insert((key, sample));
                        }
                    }
                }
                Mat::LazyAs {
                    rows,
                    cols,
                    seed,
                    init,
                    format: ExpertFormat::Bf16,
                    global_scale,
                } => {
                    return self.cached_as(
                        WeightKey::Lazy {
                            rows: *rows,
                            cols: *cols,
                            seed: *seed,
                            init: init_key(*init),
                            format: format_key(ExpertFormat::Bf16, *global_scale),
                            store: 1,
                        },
                        0,
                        DType::BF16,
                        || generate(w),
                    );
                }
                _ => {}
            }
        }
        if self.nvfp4_weights {
            if let Mat::LazyAs {
                rows,
                cols,
                seed,
                init,
                format: ExpertFormat::Nvfp4,
                global_scale,
            } = w
            {
                let key = WeightKey::Lazy {
                    rows: *rows,
                    cols: *cols,
                    seed: *seed,
                    init: init_key(*init),
                    format: format_key(ExpertFormat::Nvfp4, *global_scale),
                    store: 2,
                };
                let hit = self
                    .weights
                    .lock()
                    .map(|c| c.map.contains_key(&key))
                    .unwrap_or(false);
                let raw = Mat::Lazy {
                    rows: *rows,
                    cols: *cols,
                    seed: *seed,
                    init: *init,
                };
                // A matrix `pack` refuses (a subnormal value) is stored f32 below.
                let packed = if hit {
                    None
                } else {
                    pack_nvfp4_rows(&raw, *global_scale)
                };
                if hit || packed.is_some() {
                    return self.cached_tensor(key, 0, || {
                        // (Evicted since the lookup: pack again.)
                        let b = packed
                            .or_else(|| pack_nvfp4_rows(&raw, *global_scale))
                            .ok_or_else(|| {
                                GpuError::Driver("NVFP4 weight: not exact in storage".into())
                            })?;
                        Ok(Tensor::new(&[b.len()], reference::tensor::Data::U8(b)))
                    });
                }
            }
        }
        match w {
            Mat::Dense { data, .. } => self.weight_vec(data),
            Mat::Lazy {
                rows,
                cols,
                seed,
                init,
            } => self.cached(
                WeightKey::Lazy {
                    rows: *rows,
                    cols: *cols,
                    seed: *seed,
                    init: init_key(*init),
                    format: (0, 0),
                    store: 0,
                },
                0,
                || generate(w),
            ),
            Mat::LazyAs {
                rows,
                cols,
                seed,
                init,
                format,
                global_scale,
            } => self.cached(
                WeightKey::Lazy {
                    rows: *rows,
                    cols: *cols,
                    seed: *seed,
                    init: init_key(*init),
                    format: format_key(*format, *global_scale),
                    store: 0,
                },
                0,
                || generate(w),
            ),
        }
    }

    /// The dummy operand of an absent bias (never read), device-resident.
    pub(crate) fn dummy(&self) -> Result<Arc<DevTensor>, GpuError> {
        self.cached(WeightKey::Dummy, 0, || vec![0.0])
    }

    /// A kernel's bias argument: `bias`, or the cached dummy's address (never read: the
    /// kernel gets has_bias 0), and has_bias.
    fn bias_arg(&self, bias: Option<u64>) -> Result<(u64, i32), GpuError> {
        match bias {
            Some(b) => Ok((b, 1)),
            None => Ok((self.dummy()?.ptr(&self.g.stream), 0)),
        }
    }

    fn opts(&self) -> RunOpts {
        RunOpts {
            poison: self.poison,
        }
    }

    /// Uploads f32 values (an empty slice becomes one dummy element: never read).
    pub(crate) fn up(&self, v: &[f32]) -> Result<DevTensor, GpuError> {
        if v.is_empty() {
            self.g.upload(&Tensor::from_f32(&[1], vec![0.0]))
        } else {
            self.g.upload(&Tensor::from_f32(&[v.len()], v.to_vec()))
        }
    }

    /// Uploads owned f32 values (no copy before the upload's own; empty: one dummy element).
    fn up_owned(&self, v: Vec<f32>) -> Result<DevTensor, GpuError> {
        if v.is_empty() {
            self.up(&[])
        } else {
            self.g.upload(&Tensor::from_f32(&[v.len()], v))
        }
    }

    pub(crate) fn out(&self, n: usize) -> Result<DevTensor, GpuError> {
        self.g.alloc_poisoned(&[n.max(1)], DType::F32, self.poison)
    }

    fn down(&self, d: &DevTensor, n: usize, what: &str) -> Result<Vec<f32>, GpuError> {
        self.g.sync()?;
        let mut v = self.g.download(d, what)?.to_f32_vec();
        v.truncate(n);
        Ok(v)
    }

    // ---- own kernels (gpu/kernels/model_ops.cu) ----

    /// `y = x · Wᵀ (+ bias)`: x (m, k), w (n, k) row-major, y (m, n); tiled fp32 GEMM with
    /// fp32 accumulation (`model_gemm_f32`).
    pub fn gemm(
        &self,
        x: &[f32],
        m: usize,
        w: &[f32],
        n: usize,
        k: usize,
        bias: Option<&[f32]>,
    ) -> Result<Vec<f32>, GpuError> {
        const OP: &str = "model_gemm_f32";
        if x.len() != m * k || w.len() != n * k {
            return Err(bad(
                OP,
                format!(
                    "x has {} values (expected m * k = {m} * {k}), w {} (expected n * k = {n} * {k})",
                    x.len(),
                    w.len()
                ),
            ));
        }
        if let Some(b) = bias {
            if b.len() != n {
                return Err(bad(
                    OP,
                    format!("bias has {} values, expected n = {n}", b.len()),
                ));
            }
        }
        if m == 0 || n == 0 {
            return Ok(vec![0.0; m * n]);
        }
        let wd = self.up(w)?;
        let bd = bias.map(|b| self.up(b)).transpose()?;
        self.gemm_dev(x, m, &wd, n, k, bd.as_ref())
    }

    /// [`GpuKernels::gemm`] with the weight (n * k values) and bias (n values) on the device.
    fn gemm_dev(
        &self,
        x: &[f32],
        m: usize,
        wd: &DevTensor,
        n: usize,
        k: usize,
        bias: Option<&DevTensor>,
    ) -> Result<Vec<f32>, GpuError> {
        const OP: &str = "model_gemm_f32";
        // (NVFP4-stored weights are bytes: launch_gemm checks their size.)
        if x.len() != m * k || (n * k > 0 && wd.dtype != DType::U8 && wd.numel() != n * k) {
            return Err(bad(
                OP,
                format!(
                    "x has {} values (expected m * k = {m} * {k}), w {} (expected n * k = {n} * {k})",
                    x.len(),
                    wd.numel()
                ),
            ));
        }
        if let Some(b) = bias {
            if b.numel() != n {
                return Err(bad(
                    OP,
                    format!("bias has {} values, expected n = {n}", b.numel()),
                ));
            }
        }
        if m == 0 || n == 0 {
            return Ok(vec![0.0; m * n]);
        }
        let xd = self.up(x)?;
        let y = self.out(m * n)?;
        let st = &self.g.stream;
        let pb = bias.map(|b| b.ptr(st));
        self.launch_gemm(xd.ptr(st), m, wd, n, k, pb, y.ptr(st))?;
        self.down(&y, m * n, "linear out")
    }

    /// Queues `y = x · Wᵀ (+ bias)` on device pointers (x m*k, w n*k, bias n, y m*n f32
    /// values; the caller checked the sizes): [`GEMV_MAX_ROWS`] rows or fewer go to
    /// `model_gemv_f32` (a warp per output column), more to the tiled `model_gemm_f32`.
    #[allow(clippy::too_many_arguments)]
    /// The storage of a weight for the GEMM / GEMV kernels: (bf16, NVFP4, the NVFP4 layout's
    /// scale and table offsets).
    fn weight_storage(
        &self,
        w: &DevTensor,
        n: usize,
        k: usize,
    ) -> Result<(bool, bool, (i64, i64)), GpuError> {
        // The weight's storage: f32, bf16, or NVFP4 for exact use (u8 bytes: codes, scale
        // bytes, table of pairs; crate::nvfp4_store::Layout).
        let (wbf16, wnv) = (w.dtype == DType::BF16, w.dtype == DType::U8);
        let nv = if wnv {
            let l = crate::nvfp4_store::Layout::of(n, k);
            if !k.is_multiple_of(16) || w.len != l.len {
                return Err(bad(
                    "model_gemm",
                    format!(
                        "NVFP4 weight of {} bytes for {n} x {k} (K % 16 == 0 and {} bytes expected)",
                        w.len, l.len
                    ),
                ));
            }
            (l.sf_off as i64, l.lut_off as i64)
        } else if wbf16 || w.dtype == DType::F32 {
            (0, 0)
        } else {
            return Err(bad(
                "model_gemm",
                format!(
                    "weights of dtype {} (f32, bf16 or NVFP4 bytes expected)",
                    w.dtype
                ),
            ));
        };
        Ok((wbf16, wnv, nv))
    }

    /// The one-row product on 16-weight chunks (model_gemv1_*), `relu_add`: y += W . relu²(x)
    /// (+ bias) (model_gemv1_*_relu_add, never split). The caller checked gemv1_fits and
    /// passes the weight's `weight_storage`.
    #[allow(clippy::too_many_arguments)]
    fn launch_gemv1(
        &self,
        px: u64,
        w: &DevTensor,
        (wbf16, wnv, nv): (bool, bool, (i64, i64)),
        n: usize,
        k: usize,
        pb: u64,
        has_bias: i32,
        py: u64,
        relu_add: bool,
    ) -> Result<(), GpuError> {
        let pw = w.ptr(&self.g.stream);
        let (nn, kk) = (n as i64, k as i64);
        let r = if wnv {
            GEMV1_R_NV
        } else if wbf16 {
            GEMV1_R_BF16
        } else {
            GEMV1_R_F32
        };
        let split = if relu_add { None } else { gemv1_split(n, k) };
        let op = match (wnv, wbf16, split.is_some(), relu_add) {
            (true, _, _, true) => "model_gemv1_nvfp4w_relu_add",
            (false, true, _, true) => "model_gemv1_bf16w_relu_add",
            (false, false, _, true) => "model_gemv1_f32_relu_add",
            (true, _, false, false) => "model_gemv1_nvfp4w",
            (true, _, true, false) => "model_gemv1_nvfp4w_split",
            (false, true, false, false) => "model_gemv1_bf16w",
            (false, true, true, false) => "model_gemv1_bf16w_split",
            (false, false, false, false) => "model_gemv1_f32",
            (false, false, true, false) => "model_gemv1_f32_split",
        };
        // Split: one block of `s` warps per r columns; else `wb` warps of r columns each.
        let (wb, cols_per_block) = match split {
            Some(s) => (s, r),
            None => {
                let wb = gemv1_warps_per_block(n, r);
                (wb, wb * r)
            }
        };
        let blocks = grid_u32(op, (n as u64).div_ceil(cols_per_block as u64))?;
        let f = self.g.function(FILE, op)?;
        let mut a = self.g.stream.launch_builder(&f);
        a.arg(&px).arg(&pw);
        if wnv {
            a.arg(&nv.0).arg(&nv.1);
        }
        a.arg(&pb).arg(&py).arg(&nn).arg(&kk).arg(&has_bias);
        // SAFETY: model_gemv1_{f32,bf16w}[_split|_relu_add](x, w, bias, y, N, K, has_bias) or
        // model_gemv1_nvfp4w*(x, w, sf_off, lut_off, bias, ...); x holds k, w n*k (of its
        // dtype; NVFP4: the buffer of the layout checked by weight_storage), bias n (or a
        // dummy never read), y n f32 values (read too with relu_add); K % 16 == 0 and the
        // alignment checked by the caller (gemv1_fits).
        unsafe { a.launch(runtime::cfg(blocks, 32 * wb, 0)) }.map_err(launch_err(op))?;
        Ok(())
    }

    /// y += W . relu²(x) (+ bias) for one row in one launch (`model_gemv1_*_relu_add`), with
    /// the bits of relu2, the GEMV and the add of model_axpy (a = 1) as three launches; false
    /// (nothing queued) where the GEMV would not be the unsplit one-row form, so that the
    /// caller runs the three.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn launch_gemv_relu2_add(
        &self,
        px: u64,
        w: &DevTensor,
        n: usize,
        k: usize,
        bias: Option<u64>,
        py: u64,
    ) -> Result<bool, GpuError> {
        let pw = w.ptr(&self.g.stream);
        if n == 0 || !gemv1_fits(k, px, pw, w.dtype) || gemv1_split(n, k).is_some() {
            return Ok(false);
        }
        let storage = self.weight_storage(w, n, k)?;
        let (pb, has_bias) = self.bias_arg(bias)?;
        self.launch_gemv1(px, w, storage, n, k, pb, has_bias, py, true)?;
        Ok(true)
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn launch_gemm(
        &self,
        px: u64,
        m: usize,
        w: &DevTensor,
        n: usize,
        k: usize,
        bias: Option<u64>,
        py: u64,
    ) -> Result<(), GpuError> {
        let storage = self.weight_storage(w, n, k)?;
        let (wbf16, wnv, nv) = storage;
        let pw = w.ptr(&self.g.stream);
        if m == 0 || n == 0 {
            return Ok(());
        }
        let (pb, has_bias) = self.bias_arg(bias)?;
        let (mm, nn, kk) = (m as i64, n as i64, k as i64);
        let st = &self.g.stream;
        // One row, 16-weight chunks (model_gemv1_*): K % 16 == 0, x 16-byte aligned, weight
        // rows aligned for the chunk loads (f32 / bf16 16 bytes, NVFP4 codes 8; the rows
        // follow from K % 16). Every storage takes it or none does, so the bits of a weight
        // stored bf16 or NVFP4 are the f32 storage's.
        if m == 1 && gemv1_fits(k, px, pw, w.dtype) {
            return self.launch_gemv1(px, w, storage, n, k, pb, has_bias, py, false);
        }
        if m <= GEMV_MAX_ROWS {
            let op = if wnv {
                "model_gemv_nvfp4w"
            } else if wbf16 {
                "model_gemv_bf16w"
            } else {
                "model_gemv_f32"
            };
            let blocks = grid_u32(op, (n as u64).div_ceil(GEMV_WARPS as u64))?;
            // Vector loads need K % 4 == 0, 16-byte aligned rows of x and 4-weight aligned
            // rows of w (16 bytes of f32, 8 of bf16).
            let wa = if wnv {
                2
            } else if wbf16 {
                8
            } else {
                16
            };
            let vec4 =
                (k.is_multiple_of(4) && px.is_multiple_of(16) && pw.is_multiple_of(wa)) as i32;
            let f = self.g.function(FILE, op)?;
            let mut a = st.launch_builder(&f);
            a.arg(&px).arg(&pw);
            if wnv {
                a.arg(&nv.0).arg(&nv.1);
            }
            a.arg(&pb).arg(&py);
            a.arg(&mm).arg(&nn).arg(&kk).arg(&has_bias).arg(&vec4);
            // SAFETY: model_gemv_{f32,bf16w}(x, w, bias, y, M, N, K, has_bias, vec4) or
            // model_gemv_nvfp4w(x, w, sf_off, lut_off, bias, ...); x holds m*k, w n*k (of its
            // dtype; NVFP4: the size checked above), bias n (or a dummy never read), y m*n f32
            // values, M <= GEMV_MAXM = 8; vec4 only with K % 4 == 0 and aligned rows.
            unsafe { a.launch(runtime::cfg(blocks, 32 * GEMV_WARPS, 0)) }
                .map_err(launch_err("model_gemv"))?;
            return Ok(());
        }
        let op = if wnv {
            "model_gemm_nvfp4w"
        } else if wbf16 {
            "model_gemm_bf16w"
        } else {
            "model_gemm_f32"
        };
        const OP: &str = "model_gemm";
        let gy = (m as u64).div_ceil(GEMM_TILE);
        if gy > MAX_GRID_Y {
            return Err(bad(
                OP,
                format!(
                    "{m} rows exceed {} (grid.y limit); split the rows",
                    MAX_GRID_Y * GEMM_TILE
                ),
            ));
        }
        let gx = grid_u32(OP, (n as u64).div_ceil(GEMM_TILE))?;
        let f = self.g.function(FILE, op)?;
        let mut a = st.launch_builder(&f);
        a.arg(&px).arg(&pw);
        if wnv {
            a.arg(&nv.0).arg(&nv.1);
        }
        a.arg(&pb).arg(&py);
        a.arg(&mm).arg(&nn).arg(&kk).arg(&has_bias);
        let cfg = LaunchConfig {
            grid_dim: (gx, gy as u32, 1),
            block_dim: (GEMM_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: model_gemm_{f32,bf16w}(x, w, bias, y, M, N, K, has_bias) or
        // model_gemm_nvfp4w(x, w, sf_off, lut_off, bias, ...); x holds m*k, w n*k (of its dtype;
        // NVFP4: the size checked above), bias n (or a dummy never read), y m*n f32 values;
        // the kernel bounds-checks every tile.
        unsafe { a.launch(cfg) }.map_err(launch_err(OP))?;
        Ok(())
    }

    /// Queues relu(x)² over n f32 values from device pointer `px` into `po`.
    pub(crate) fn launch_relu2(&self, px: u64, po: u64, n: usize) -> Result<(), GpuError> {
        const OP: &str = "model_relu2";
        if n == 0 {
            return Ok(());
        }
        let f = self.g.function(FILE, OP)?;
        let st = &self.g.stream;
        let nn = n as i64;
        let mut a = st.launch_builder(&f);
        a.arg(&px).arg(&po).arg(&nn);
        let grid = ops::grid_for(&self.g, n as u64, 256);
        // SAFETY: model_relu2(x, out, n): grid-stride over n values of x and out.
        unsafe { a.launch(runtime::cfg(grid, 256, 0)) }.map_err(launch_err(OP))?;
        Ok(())
    }

    /// RMSNorm of every row of `x` (rows, w.len()) (`model_rmsnorm`).
    pub fn rmsnorm_rows(&self, x: &[f32], w: &[f32], eps: f32) -> Result<Vec<f32>, GpuError> {
        const OP: &str = "model_rmsnorm";
        let n = w.len();
        if n == 0 || !x.len().is_multiple_of(n) {
            return Err(bad(
                OP,
                format!("x has {} values, not a multiple of hidden = {n}", x.len()),
            ));
        }
        let wd = self.up(w)?;
        self.rmsnorm_dev(x, &wd, n, eps)
    }

    /// [`GpuKernels::rmsnorm_rows`] with the weight (n values) on the device.
    fn rmsnorm_dev(
        &self,
        x: &[f32],
        wd: &DevTensor,
        n: usize,
        eps: f32,
    ) -> Result<Vec<f32>, GpuError> {
        const OP: &str = "model_rmsnorm";
        if n == 0 || wd.numel() != n || !x.len().is_multiple_of(n) {
            return Err(bad(
                OP,
                format!(
                    "x has {} values, not a multiple of hidden = {n} (weight {})",
                    x.len(),
                    wd.numel()
                ),
            ));
        }
        let rows = x.len() / n;
        if rows == 0 {
            return Ok(vec![]);
        }
        let (xd, o) = (self.up(x)?, self.out(x.len())?);
        let st = &self.g.stream;
        self.launch_rmsnorm(xd.ptr(st), wd.ptr(st), o.ptr(st), rows, n, eps)?;
        self.down(&o, x.len(), "rmsnorm out")
    }

    /// Queues `model_rmsnorm` on device pointers: x and out (rows, n), w (n) f32 values (the
    /// caller checked the sizes).
    pub(crate) fn launch_rmsnorm(
        &self,
        px: u64,
        pw: u64,
        po: u64,
        rows: usize,
        n: usize,
        eps: f32,
    ) -> Result<(), GpuError> {
        self.launch_rmsnorm_named("model_rmsnorm", px, pw, po, rows, n, eps)
    }

    /// [`GpuKernels::launch_rmsnorm`] on kernel `op` (model_rmsnorm or a bench variant).
    #[allow(clippy::too_many_arguments)]
    fn launch_rmsnorm_named(
        &self,
        op: &'static str,
        px: u64,
        pw: u64,
        po: u64,
        rows: usize,
        n: usize,
        eps: f32,
    ) -> Result<(), GpuError> {
        if rows == 0 {
            return Ok(());
        }
        let blocks = grid_u32(op, rows as u64)?;
        let f = self.g.function(FILE, op)?;
        let (r, nn) = (rows as i64, n as i64);
        let mut a = self.g.stream.launch_builder(&f);
        a.arg(&px).arg(&pw).arg(&po).arg(&r).arg(&nn).arg(&eps);
        // SAFETY: model_rmsnorm(x, w, out, rows, n, eps); x and out hold rows*n, w n values.
        unsafe { a.launch(runtime::cfg(blocks, NORM_THREADS, 0)) }.map_err(launch_err(op))?;
        Ok(())
    }

    /// Queues `model_add_rmsnorm`: `h[i] += x[i]`, then `out = rmsnorm(h) * w` over one row of
    /// n f32 values (device pointers; the caller holds h, x, w, out at n values).
    pub(crate) fn launch_add_rmsnorm(
        &self,
        [ph, px, pw, po]: [u64; 4],
        n: usize,
        eps: f32,
    ) -> Result<(), GpuError> {
        const OP: &str = "model_add_rmsnorm";
        if n == 0 {
            return Ok(());
        }
        if !add_rmsnorm_fits(n) {
            return Err(GpuError::Driver(format!(
                "{OP}: a row of {n} values; it takes at most {} (use axpy + rmsnorm)",
                NORM_THREADS as usize * NORM_REG
            )));
        }
        let f = self.g.function(FILE, OP)?;
        let nn = n as i64;
        let mut a = self.g.stream.launch_builder(&f);
        a.arg(&ph).arg(&px).arg(&pw).arg(&po).arg(&nn).arg(&eps);
        // SAFETY: model_add_rmsnorm(h, x, w, out, n, eps); each holds n f32 values.
        unsafe { a.launch(runtime::cfg(1, NORM_THREADS, 0)) }.map_err(launch_err(OP))?;
        Ok(())
    }

    /// Gated RMSNorm (gate then norm, groups of `group`) of x, z (rows, w.len())
    /// (`model_gated_rmsnorm`).
    pub fn gated_rmsnorm_rows(
        &self,
        x: &[f32],
        z: &[f32],
        w: &[f32],
        group: usize,
        eps: f32,
    ) -> Result<Vec<f32>, GpuError> {
        const OP: &str = "model_gated_rmsnorm";
        let d = w.len();
        if d == 0 || !x.len().is_multiple_of(d) || z.len() != x.len() {
            return Err(bad(
                OP,
                format!(
                    "x has {} values, z {}; expected rows * d twice with d = {d}",
                    x.len(),
                    z.len()
                ),
            ));
        }
        if group == 0 || !d.is_multiple_of(group) {
            return Err(bad(OP, format!("group {group} does not divide d = {d}")));
        }
        let wd = self.up(w)?;
        self.gated_rmsnorm_dev(x, z, &wd, d, group, eps)
    }

    /// [`GpuKernels::gated_rmsnorm_rows`] with the weight (d values) on the device.
    fn gated_rmsnorm_dev(
        &self,
        x: &[f32],
        z: &[f32],
        wd: &DevTensor,
        d: usize,
        group: usize,
        eps: f32,
    ) -> Result<Vec<f32>, GpuError> {
        const OP: &str = "model_gated_rmsnorm";
        if d == 0 || wd.numel() != d || !x.len().is_multiple_of(d) || z.len() != x.len() {
            return Err(bad(
                OP,
                format!(
                    "x has {} values, z {}; expected rows * d twice with d = {d} (weight {})",
                    x.len(),
                    z.len(),
                    wd.numel()
                ),
            ));
        }
        if group == 0 || !d.is_multiple_of(group) {
            return Err(bad(OP, format!("group {group} does not divide d = {d}")));
        }
        let rows = x.len() / d;
        if rows == 0 {
            return Ok(vec![]);
        }
        let (xd, zd, o) = (self.up(x)?, self.up(z)?, self.out(x.len())?);
        let st = &self.g.stream;
        self.launch_gated_rmsnorm(
            [xd.ptr(st), zd.ptr(st), wd.ptr(st), o.ptr(st)],
            rows,
            d,
            group,
            eps,
        )?;
        self.down(&o, x.len(), "gated_rmsnorm out")
    }

    /// Queues `model_gated_rmsnorm` on device pointers [x, z, w, out]: x, z, out (rows, d), w
    /// (d) f32 values, `group` dividing d (the caller checked).
    pub(crate) fn launch_gated_rmsnorm(
        &self,
        [px, pz, pw, po]: [u64; 4],
        rows: usize,
        d: usize,
        group: usize,
        eps: f32,
    ) -> Result<(), GpuError> {
        self.launch_gated_rmsnorm_named(
            "model_gated_rmsnorm",
            [px, pz, pw, po],
            rows,
            d,
            group,
            eps,
        )
    }

    /// [`GpuKernels::launch_gated_rmsnorm`] on kernel `op` (the default or a bench variant).
    fn launch_gated_rmsnorm_named(
        &self,
        op: &'static str,
        [px, pz, pw, po]: [u64; 4],
        rows: usize,
        d: usize,
        group: usize,
        eps: f32,
    ) -> Result<(), GpuError> {
        if rows == 0 {
            return Ok(());
        }
        if group == 0 || !d.is_multiple_of(group) {
            return Err(bad(op, format!("group {group} does not divide d = {d}")));
        }
        let blocks = grid_u32(op, (rows * (d / group)) as u64)?;
        let f = self.g.function(FILE, op)?;
        let (r, dd, gg) = (rows as i64, d as i64, group as i64);
        let mut a = self.g.stream.launch_builder(&f);
        a.arg(&px).arg(&pz).arg(&pw).arg(&po);
        a.arg(&r).arg(&dd).arg(&gg).arg(&eps);
        // SAFETY: model_gated_rmsnorm(x, z, w, out, rows, d, group, eps); x, z, out hold
        // rows*d values, w d; group divides d.
        unsafe { a.launch(runtime::cfg(blocks, NORM_THREADS, 0)) }.map_err(launch_err(op))?;
        Ok(())
    }

    /// relu(x)² (`model_relu2`).
    pub fn relu2_vec(&self, x: &[f32]) -> Result<Vec<f32>, GpuError> {
        if x.is_empty() {
            return Ok(vec![]);
        }
        let (xd, o) = (self.up(x)?, self.out(x.len())?);
        let st = &self.g.stream;
        self.launch_relu2(xd.ptr(st), o.ptr(st), x.len())?;
        self.down(&o, x.len(), "relu2 out")
    }

    /// GQA causal attention (`model_attention`): q (t, nq*hd); keys, vals (len, nkv*hd) with
    /// len >= p0 + t; query row i at position p0 + i sees keys 0..=p0+i.
    pub fn attention_f32(
        &self,
        q: &[f32],
        keys: &[f32],
        vals: &[f32],
        p0: usize,
        geo: AttnGeometry,
    ) -> Result<Vec<f32>, GpuError> {
        const OP: &str = "model_attention";
        reference::model::kernels::check_attention(q, keys, vals, p0, geo)
            .map_err(|e| bad(OP, e.to_string()))?;
        if geo.t == 0 {
            return Ok(vec![]);
        }
        let (qd, kd, vd) = (self.up(q)?, self.up(keys)?, self.up(vals)?);
        let o = self.out(q.len())?;
        let st = &self.g.stream;
        self.launch_attention([qd.ptr(st), kd.ptr(st), vd.ptr(st), o.ptr(st)], p0, geo)?;
        self.down(&o, q.len(), "attention out")
    }
}

impl GpuKernels {
    /// Queues `model_attention` on device pointers [q, keys, vals, out]: q and out (t, nq*hd),
    /// keys / vals at least (p0 + t, nkv*hd) f32 values (the caller checked, as
    /// [`reference::model::kernels::check_attention`]).
    pub(crate) fn launch_attention(
        &self,
        [pq, pk, pv, po]: [u64; 4],
        p0: usize,
        geo: AttnGeometry,
    ) -> Result<(), GpuError> {
        const OP: &str = "model_attention";
        let AttnGeometry { nq, nkv, hd, t } = geo;
        if t == 0 {
            return Ok(());
        }
        let blocks = grid_u32(OP, (t * nq) as u64)?;
        let smem = u32::try_from(2 * hd * 4)
            .ok()
            .filter(|&b| b <= 40 * 1024)
            .ok_or_else(|| bad(OP, format!("head_dim {hd} needs too much shared memory")))?;
        let f = self.g.function(FILE, OP)?;
        let (tt, a_nq, a_nkv, a_hd, a_p0) = (t as i64, nq as i64, nkv as i64, hd as i64, p0 as i64);
        let scale = 1.0 / (hd as f32).sqrt();
        let mut a = self.g.stream.launch_builder(&f);
        a.arg(&pq).arg(&pk).arg(&pv).arg(&po);
        a.arg(&tt)
            .arg(&a_nq)
            .arg(&a_nkv)
            .arg(&a_hd)
            .arg(&a_p0)
            .arg(&scale);
        // SAFETY: model_attention(q, keys, vals, out, t, nq, nkv, hd, p0, scale); the caller
        // holds keys/vals at >= p0 + t rows; 2*hd floats of dynamic smem.
        unsafe { a.launch(runtime::cfg(blocks, ATT_THREADS, smem)) }.map_err(launch_err(OP))?;
        Ok(())
    }

    /// Queues `model_gemv_slots_*` (one token's routed slots in one launch): slot s multiplies
    /// the weight at device address `ws[s]`, or `ws[ids[s]]` when `ids` (a device array of
    /// `slots` i32) is not 0 (`ws` a device array of u64; every weight
    /// of storage `wdt`: F32, BF16, or U8 = NVFP4 for exact use) by the f32 row at
    /// `x + 4 * s * x_stride` into `y + 4 * s * n`. The caller holds every buffer at its size
    /// and says whether every row start is aligned for the vector loads (`vec4`: x rows 16
    /// bytes, weights 16 bytes, NVFP4 buffers 16); with K % 16 == 0 as well the slots take
    /// `model_gemv1_slots_*` (the chunked one-row kernel, [`GpuKernels::launch_gemm`]'s at M = 1),
    /// and with NVFP4 weights the form [`GpuKernels::slot_kernel`] names where it applies
    /// (the same bits).
    ///
    /// `relu2`: x is read through ReLU² (`model_gemv1_slots_*_relu`: `model_relu2`'s values,
    /// so the bits of `launch_relu2` then this, one launch fewer). Only the chunked form has
    /// it: Ok(false) queues nothing where that does not apply (K % 16 != 0, unaligned rows),
    /// and the caller runs the two launches. Ok(true): queued.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn launch_gemv_slots(
        &self,
        px: u64,
        x_stride: usize,
        (ws, ids): (u64, u64),
        wdt: DType,
        py: u64,
        (n, k, slots): (usize, usize, usize),
        vec4: bool,
        relu2: bool,
    ) -> Result<bool, GpuError> {
        let one = vec4 && k.is_multiple_of(16);
        if relu2 && !one {
            return Ok(false);
        }
        if n == 0 || slots == 0 {
            return Ok(true);
        }
        let (op, r) = match (wdt, one, relu2) {
            (DType::F32, false, _) => ("model_gemv_slots_f32", 1),
            (DType::BF16, false, _) => ("model_gemv_slots_bf16w", 1),
            (DType::U8, false, _) => ("model_gemv_slots_nvfp4w", 1),
            (DType::F32, true, false) => ("model_gemv1_slots_f32", GEMV1_R_F32),
            (DType::BF16, true, false) => ("model_gemv1_slots_bf16w", GEMV1_R_BF16),
            (DType::U8, true, false) => ("model_gemv1_slots_nvfp4w", GEMV1_R_NV),
            (DType::F32, true, true) => ("model_gemv1_slots_f32_relu", GEMV1_R_F32),
            (DType::BF16, true, true) => ("model_gemv1_slots_bf16w_relu", GEMV1_R_BF16),
            (DType::U8, true, true) => ("model_gemv1_slots_nvfp4w_relu", GEMV1_R_NV),
            (other, _, _) => {
                return Err(bad("model_gemv_slots", format!("weights of dtype {other}")))
            }
        };
        if wdt == DType::U8 && !k.is_multiple_of(16) {
            return Err(bad(
                "model_gemv_slots",
                format!("NVFP4 weights need K % 16 == 0 (K = {k})"),
            ));
        }
        let shape = (n, k, slots);
        if wdt == DType::U8 && one {
            let w = (ws, ids);
            match self.slot_kernel {
                "pipe" if slotp_fits(k) => {
                    let op = if relu2 {
                        "model_gemv1_slots_nvfp4w_pipe_relu"
                    } else {
                        "model_gemv1_slots_nvfp4w_pipe"
                    };
                    self.launch_slots_pipe(op, SLOTP_STAGES, px, x_stride, w, py, shape)?;
                    return Ok(true);
                }
                "mma"
                    if k.is_multiple_of(128)
                        && slotm_smem(k) <= SLOTP_MAX_SMEM
                        && px.is_multiple_of(16)
                        && x_stride.is_multiple_of(4) =>
                {
                    // The unfused down GEMV (K > N: ReLU² already applied) on the fused
                    // kernel's arithmetic, so --engine-fuse keeps the bits.
                    let (up, down) = slot_mma_ops();
                    let op = match (relu2, k > n) {
                        (true, _) => down,
                        (false, true) => slot_mma_plain(down),
                        (false, false) => up,
                    };
                    self.launch_slots_mma(op, px, x_stride, w, py, shape)?;
                    return Ok(true);
                }
                "xs" | "xs3" | "xs3m" if slots_xs_smem(k) <= SLOTP_MAX_SMEM => {
                    let op = match (self.slot_kernel, relu2) {
                        ("xs", false) => "model_gemv1_slots_nvfp4w_xs",
                        ("xs", true) => "model_gemv1_slots_nvfp4w_xs_relu",
                        ("xs3m", true) => "model_gemv1_slots_nvfp4w_xs4r2_relu",
                        (_, false) => "model_gemv1_slots_nvfp4w_xs3",
                        (_, true) => "model_gemv1_slots_nvfp4w_xs3_relu",
                    };
                    self.launch_slots_xs(op, px, x_stride, w, py, shape)?;
                    return Ok(true);
                }
                _ => {}
            }
        }
        self.launch_slots_kernel(op, r, one, px, x_stride, (ws, ids), wdt, py, shape, vec4)?;
        Ok(true)
    }

    /// Queues the NVFP4 slot kernel `op` by its form: a `_pipe*` kernel
    /// ([`GpuKernels::launch_slots_pipe`]), an `_xs*` kernel ([`GpuKernels::launch_slots_xs`]),
    /// or another `model_gemv1_slots_nvfp4w*` of `r` columns a warp (aligned rows, K % 16 ==
    /// 0; the pipe and xs forms take their columns from their names). The benches' and
    /// tests' one way to launch a variant by name.
    #[allow(clippy::too_many_arguments)]
    fn launch_slot_op(
        &self,
        op: &str,
        r: u32,
        px: u64,
        x_stride: usize,
        w: (u64, u64),
        py: u64,
        shape: (usize, usize, usize),
    ) -> Result<(), GpuError> {
        match slotp_stages(op) {
            Some(st) => self.launch_slots_pipe(op, st, px, x_stride, w, py, shape),
            None if slots_xs_op(op) => self.launch_slots_xs(op, px, x_stride, w, py, shape),
            None if slots_mma_op(op) => self.launch_slots_mma(op, px, x_stride, w, py, shape),
            None => {
                let u8w = DType::U8;
                self.launch_slots_kernel(op, r, true, px, x_stride, w, u8w, py, shape, true)
            }
        }
    }

    /// Seeded NVFP4 experts on the device (`Mat::Lazy` of `Init::Linear` in NVFP4, packed for
    /// exact use) for the slot benches and tests: one per (rows, cols, seed), and the device
    /// table of their addresses (u64 each, in order), and their bytes in all.
    fn upload_nvfp4_experts(
        &self,
        what: &str,
        experts: &[(usize, usize, u64)],
    ) -> Result<(Vec<DevTensor>, DevTensor, u64), GpuError> {
        use reference::tensor::Data;
        let st = &self.g.stream;
        let mut bufs = Vec::with_capacity(experts.len());
        let mut bytes = 0u64;
        for &(rows, cols, seed) in experts {
            let raw = Mat::Lazy {
                rows,
                cols,
                seed,
                init: Init::Linear,
            };
            let Some(Mat::LazyAs { global_scale, .. }) = raw.lazy_as(ExpertFormat::Nvfp4) else {
                return Err(GpuError::Driver(format!("{what}: lazy NVFP4 expert")));
            };
            let b = pack_nvfp4_rows(&raw, global_scale).ok_or_else(|| {
                GpuError::Driver(format!("{what}: an expert is not exact in storage"))
            })?;
            bytes += b.len() as u64;
            bufs.push(self.g.upload(&Tensor::new(&[b.len()], Data::U8(b)))?);
        }
        let table: Vec<u8> = bufs.iter().flat_map(|t| t.ptr(st).to_le_bytes()).collect();
        let td = self
            .g
            .upload(&Tensor::new(&[table.len()], Data::U8(table)))?;
        Ok((bufs, td, bytes))
    }

    /// The checks and the function of a slot kernel taking `smem` bytes of dynamic shared
    /// memory (K a multiple of `kmul`, the bytes under [`SLOTP_MAX_SMEM`]), with the
    /// function's limit raised to them where static + dynamic may pass 48 KB (session 11 call
    /// 3: pipe2's 43.5 KB + 8 KB static at K = 2688 failed without it). None: nothing
    /// to launch (no columns or no slots).
    fn slot_smem_function(
        &self,
        op: &str,
        (n, k, slots): (usize, usize, usize),
        kmul: usize,
        smem: usize,
    ) -> Result<Option<cudarc::driver::CudaFunction>, GpuError> {
        if !k.is_multiple_of(kmul) || k == 0 {
            return Err(bad(
                op,
                format!("needs K % {kmul} == 0 and K > 0 (K = {k})"),
            ));
        }
        if smem > SLOTP_MAX_SMEM {
            return Err(bad(
                op,
                format!("K = {k} needs {smem} bytes of shared memory (at most {SLOTP_MAX_SMEM})"),
            ));
        }
        if n == 0 || slots == 0 {
            return Ok(None);
        }
        let f = self.g.function(FILE, op)?;
        // Only past the default 48 KB with the largest static table (16 KB, `_t16`): no driver
        // call per launch on the engine's eager path otherwise.
        if smem > 32 * 1024 {
            f.set_attribute(
                cudarc::driver::sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                smem as i32,
            )
            .map_err(|e| GpuError::Driver(format!("{op} shared memory attribute: {e}")))?;
        }
        Ok(Some(f))
    }

    /// Queues a `model_gemv1_slots_nvfp4w_xs*` kernel ([`GpuKernels::launch_gemv_slots`]'s
    /// arguments, NVFP4 weights in buffers of `Layout::of(n, k)`, K % 16 == 0, x rows 16-byte
    /// aligned): grid (ceil(N / (8 R)), slots) for R columns a warp
    /// ([`slots_xs_columns`]), x and the pairs staged in shared memory.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn launch_slots_xs(
        &self,
        op: &str,
        px: u64,
        x_stride: usize,
        (ws, ids): (u64, u64),
        py: u64,
        (n, k, slots): (usize, usize, usize),
    ) -> Result<(), GpuError> {
        let smem = slots_xs_smem(k);
        let Some(f) = self.slot_smem_function(op, (n, k, slots), 16, smem)? else {
            return Ok(());
        };
        let rows = GEMV_WARPS as u64 * slots_xs_columns(op) as u64;
        let io = (px, x_stride, ws, ids, py);
        self.launch_slots_staged(
            op,
            &f,
            io,
            (n, k, slots),
            (rows, 32 * GEMV_WARPS, smem),
            None,
        )
    }

    /// The launch of a slot GEMV that stages x per block (`_xs*`, `_mma*`): grid (ceil(N /
    /// rows), slots) of `threads`-thread blocks with `smem` dynamic bytes, arguments (x,
    /// x_stride, ws, ids, sf_off, lut_off, y, N, K) plus a `_mix` kernel's (w, out, cnt).
    #[allow(clippy::too_many_arguments)]
    fn launch_slots_staged(
        &self,
        op: &str,
        f: &cudarc::driver::CudaFunction,
        (px, x_stride, ws, ids, py): (u64, usize, u64, u64, u64),
        (n, k, slots): (usize, usize, usize),
        (rows, threads, smem): (u64, u32, usize),
        mix: Option<(u64, u64, u64)>,
    ) -> Result<(), GpuError> {
        let gx = grid_u32(op, (n as u64).div_ceil(rows))?;
        let gy = u32::try_from(slots)
            .ok()
            .filter(|&g| (g as u64) <= MAX_GRID_Y)
            .ok_or_else(|| bad(op, format!("{slots} slots exceed the grid")))?;
        let (xs, nn, kk) = (x_stride as i64, n as i64, k as i64);
        let l = crate::nvfp4_store::Layout::of(n, k);
        let (sf_off, lut_off) = (l.sf_off as i64, l.lut_off as i64);
        let mut a = self.g.stream.launch_builder(f);
        a.arg(&px).arg(&xs).arg(&ws).arg(&ids);
        a.arg(&sf_off).arg(&lut_off);
        a.arg(&py).arg(&nn).arg(&kk);
        let (pmw, pout, pcnt);
        if let Some(m) = mix {
            (pmw, pout, pcnt) = m;
            a.arg(&pmw).arg(&pout).arg(&pcnt);
        }
        let cfg = LaunchConfig {
            grid_dim: (gx, gy, 1),
            block_dim: (threads, 1, 1),
            shared_mem_bytes: smem as u32,
        };
        // SAFETY: model_gemv1_slots_nvfp4w_{xs,mma}*(x, x_stride, ws, ids, sf_off, lut_off, y,
        // N, K [, w, out, cnt for the _mix forms]): ws holds the addresses of NVFP4 buffers of
        // Layout::of(n, k) (16-byte aligned for mma) that slots (or ids, whose entries index
        // ws) name, x rows of k f32 at x_stride (16-byte aligned: the callers check), y slots *
        // n f32 values (the caller's sizes), with a mix w slots f32, out n f32 and cnt ceil(n /
        // 16) zero u32 (launch_down_mix's caller); K % 16 == 0 (xs) / K % 128 == 0 (mma) and
        // the `smem` bytes were checked by slot_smem_function and set as the limit.
        unsafe { a.launch(cfg) }.map_err(|e| GpuError::Driver(format!("launch {op}: {e}")))?;
        Ok(())
    }

    /// Queues a `model_gemv1_slots_nvfp4w_mma<SK>*` kernel ([`GpuKernels::launch_gemv_slots`]'s
    /// arguments, NVFP4 weights in 16-byte aligned buffers of `Layout::of(n, k)`, K % 128 == 0,
    /// x rows 16-byte aligned): blocks of W warps (8 for the `w8` forms, else 4), W / SK
    /// groups of 16 columns a block, grid (ceil(N / (16 W / SK)), slots), x's f16 terms staged
    /// in shared memory
    /// ([`slotm_smem`]).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn launch_slots_mma(
        &self,
        op: &str,
        px: u64,
        x_stride: usize,
        w: (u64, u64),
        py: u64,
        shape: (usize, usize, usize),
    ) -> Result<(), GpuError> {
        self.launch_slots_mma_mix(op, px, x_stride, w, py, shape, None)
    }

    /// [`GpuKernels::launch_slots_mma`], for a `_mix` kernel with its (weights, out,
    /// counters) arguments.
    #[allow(clippy::too_many_arguments)]
    fn launch_slots_mma_mix(
        &self,
        op: &str,
        px: u64,
        x_stride: usize,
        (ws, ids): (u64, u64),
        py: u64,
        (n, k, slots): (usize, usize, usize),
        mix: Option<(u64, u64, u64)>,
    ) -> Result<(), GpuError> {
        if !px.is_multiple_of(16) || !x_stride.is_multiple_of(4) {
            return Err(bad(
                op,
                format!("x rows must be 16-byte aligned (x at {px:#x}, stride {x_stride})"),
            ));
        }
        let smem = slotm_smem(k);
        let Some(f) = self.slot_smem_function(op, (n, k, slots), 128, smem)? else {
            return Ok(());
        };
        let warps = slots_mma_warps(op);
        let rows = 16 * (warps / slots_mma_split(op)) as u64;
        let io = (px, x_stride, ws, ids, py);
        self.launch_slots_staged(op, &f, io, (n, k, slots), (rows, 32 * warps, smem), mix)
    }

    /// Whether [`GpuKernels::launch_down_mix`] takes the fused down GEMV of (lw, inter, k):
    /// the `mma` slot form, NVFP4 down weights, inter % 128 == 0, h rows 16-byte aligned.
    pub(crate) fn slot_mix_fits(
        &self,
        ddt: DType,
        (lw, inter, k): (usize, usize, usize),
        ph: u64,
    ) -> bool {
        self.slot_kernel == "mma"
            && ddt == DType::U8
            && lw > 0
            && k > 0
            && inter.is_multiple_of(128)
            && slotm_smem(inter) <= SLOTP_MAX_SMEM
            && ph.is_multiple_of(16)
    }

    /// Queues the `mma` form's fused down GEMV with the slot mix (`<down>_mix`, model_ops.cu:
    /// ReLU² of h (k rows of `inter` at `h_stride`), the down GEMVs into `po` (k rows of lw), and
    /// the weighted mix of those rows (weights `pmw`) into `pout`; `pcnt` holds ceil(lw / 16)
    /// zero u32 counters, left zero). The caller checked [`GpuKernels::slot_mix_fits`].
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn launch_down_mix(
        &self,
        ph: u64,
        h_stride: usize,
        w: (u64, u64),
        po: u64,
        shape: (usize, usize, usize),
        mix: (u64, u64, u64),
    ) -> Result<(), GpuError> {
        self.launch_down_mix_op(slot_mma_ops().1, ph, h_stride, w, po, shape, mix)
    }

    /// [`GpuKernels::launch_down_mix`] with the `_mix` form of `down` (one of
    /// [`SLOT_MMA_DOWNS`]).
    #[allow(clippy::too_many_arguments)]
    fn launch_down_mix_op(
        &self,
        down: &str,
        ph: u64,
        h_stride: usize,
        w: (u64, u64),
        po: u64,
        shape: (usize, usize, usize),
        mix: (u64, u64, u64),
    ) -> Result<(), GpuError> {
        let Some(i) = SLOT_MMA_DOWNS.iter().position(|d| *d == down) else {
            return Err(bad(down, "not one of the mma down GEMVs".into()));
        };
        self.launch_slots_mma_mix(SLOT_MMA_MIXES[i], ph, h_stride, w, po, shape, Some(mix))
    }

    /// Queues a `model_gemv1_slots_nvfp4w_pipe*` kernel of `stages` shared-memory stages
    /// (model_ops.cu; [`GpuKernels::launch_gemv_slots`]'s arguments, NVFP4 weights in
    /// 16-byte aligned buffers of `Layout::of(n, k)`, K % 32 == 0, [`slotp_fits`]): persistent
    /// blocks, as many as the SMs hold at once (the driver's occupancy for the registers and
    /// the stages' shared memory), at most one per group of 32 columns.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn launch_slots_pipe(
        &self,
        op: &str,
        stages: usize,
        px: u64,
        x_stride: usize,
        (ws, ids): (u64, u64),
        py: u64,
        (n, k, slots): (usize, usize, usize),
    ) -> Result<(), GpuError> {
        let smem = slotp_smem(stages, k);
        let Some(f) = self.slot_smem_function(op, (n, k, slots), 32, smem)? else {
            return Ok(());
        };
        let smem32 = smem as u32;
        let threads = 32 * GEMV_WARPS;
        let resident = f
            .occupancy_max_active_blocks_per_multiprocessor(threads, smem, None)
            .map_err(|e| GpuError::Driver(format!("{op} occupancy: {e}")))?
            .max(1) as u64;
        let groups = (slots as u64).saturating_mul((n as u64).div_ceil(SLOTP_ROWS as u64));
        let blocks = grid_u32(op, groups.min(self.g.sm_count as u64 * resident).max(1))?;
        let (xs, nn, kk, ss) = (x_stride as i64, n as i64, k as i64, slots as i64);
        let l = crate::nvfp4_store::Layout::of(n, k);
        let (sf_off, lut_off) = (l.sf_off as i64, l.lut_off as i64);
        let mut a = self.g.stream.launch_builder(&f);
        a.arg(&px).arg(&xs).arg(&ws).arg(&ids);
        a.arg(&sf_off).arg(&lut_off);
        a.arg(&py).arg(&nn).arg(&kk).arg(&ss);
        let cfg = LaunchConfig {
            grid_dim: (blocks, 1, 1),
            block_dim: (threads, 1, 1),
            shared_mem_bytes: smem32,
        };
        // SAFETY: model_gemv1_slots_nvfp4w_pipe*(x, x_stride, ws, ids, sf_off, lut_off, y, N,
        // K, slots): ws holds the addresses of 16-byte aligned NVFP4 buffers of
        // Layout::of(n, k) that slots (or ids, whose entries index ws) name, x rows of k f32
        // at x_stride, y slots * n f32 values (the caller's sizes); K % 32 == 0 and the
        // stages' `smem` bytes were checked above and set as the function's limit.
        unsafe { a.launch(cfg) }.map_err(|e| GpuError::Driver(format!("launch {op}: {e}")))?;
        Ok(())
    }

    /// [`GpuKernels::launch_gemv_slots`] on the kernel `op` (a `model_gemv_slots_*` or, with
    /// `one`, a `model_gemv1_slots_*` form of `r` columns per warp, incl. the bench variants).
    #[allow(clippy::too_many_arguments)]
    fn launch_slots_kernel(
        &self,
        op: &str,
        r: u32,
        one: bool,
        px: u64,
        x_stride: usize,
        (ws, ids): (u64, u64),
        wdt: DType,
        py: u64,
        (n, k, slots): (usize, usize, usize),
        vec4: bool,
    ) -> Result<(), GpuError> {
        let gx = grid_u32(op, (n as u64).div_ceil((GEMV_WARPS * r) as u64))?;
        let gy = u32::try_from(slots)
            .ok()
            .filter(|&g| (g as u64) <= MAX_GRID_Y)
            .ok_or_else(|| bad(op, format!("{slots} slots exceed the grid")))?;
        let f = self.g.function(FILE, op)?;
        let (xs, nn, kk, v4) = (x_stride as i64, n as i64, k as i64, vec4 as i32);
        let l = crate::nvfp4_store::Layout::of(n, k);
        let (sf_off, lut_off) = (l.sf_off as i64, l.lut_off as i64);
        let mut a = self.g.stream.launch_builder(&f);
        a.arg(&px).arg(&xs).arg(&ws).arg(&ids);
        if wdt == DType::U8 {
            a.arg(&sf_off).arg(&lut_off);
        }
        a.arg(&py).arg(&nn).arg(&kk);
        if !one {
            a.arg(&v4);
        }
        let cfg = LaunchConfig {
            grid_dim: (gx, gy, 1),
            block_dim: (32 * GEMV_WARPS, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: model_gemv_slots_{f32,bf16w}(x, x_stride, ws, ids, y, N, K, vec4),
        // model_gemv_slots_nvfp4w(x, x_stride, ws, ids, sf_off, lut_off, y, N, K, vec4), or
        // the model_gemv1_slots_* forms without vec4 (K % 16 == 0 and aligned: `one`); ws
        // holds the addresses of (n, k) weights of `wdt` (NVFP4: buffers of Layout::of(n, k))
        // that slots (or ids, whose entries index ws) name, x rows at x_stride, y slots * n
        // f32 values (the caller's sizes); vec4 only when aligned.
        unsafe { a.launch(cfg) }.map_err(launch_err("model_gemv_slots"))?;
        Ok(())
    }

    /// Queues `model_attention_pos`: [`GpuKernels::launch_attention`] with p0 read from the
    /// device i64 at `pp0` (the caller holds keys / values at every position it will hold).
    pub(crate) fn launch_attention_pos(
        &self,
        [pq, pk, pv, po]: [u64; 4],
        pp0: u64,
        geo: AttnGeometry,
    ) -> Result<(), GpuError> {
        const OP: &str = "model_attention_pos";
        let AttnGeometry { nq, nkv, hd, t } = geo;
        if t == 0 {
            return Ok(());
        }
        let blocks = grid_u32(OP, (t * nq) as u64)?;
        let smem = u32::try_from(2 * hd * 4)
            .ok()
            .filter(|&b| b <= 40 * 1024)
            .ok_or_else(|| bad(OP, format!("head_dim {hd} needs too much shared memory")))?;
        let f = self.g.function(FILE, OP)?;
        let (tt, a_nq, a_nkv, a_hd) = (t as i64, nq as i64, nkv as i64, hd as i64);
        let scale = 1.0 / (hd as f32).sqrt();
        let mut a = self.g.stream.launch_builder(&f);
        a.arg(&pq).arg(&pk).arg(&pv).arg(&po);
        a.arg(&tt)
            .arg(&a_nq)
            .arg(&a_nkv)
            .arg(&a_hd)
            .arg(&pp0)
            .arg(&scale);
        // SAFETY: model_attention_pos(q, keys, vals, out, t, nq, nkv, hd, p0 ptr, scale); the
        // caller holds keys / vals at >= *p0 + t rows; 2*hd floats of dynamic smem.
        unsafe { a.launch(runtime::cfg(blocks, ATT_THREADS, smem)) }.map_err(launch_err(OP))?;
        Ok(())
    }

    /// Queues `model_kv_store`: `cache[*pos * n + i] = src[i]`, i < n, with the position read
    /// from the device i64 at `ppos`.
    pub(crate) fn launch_kv_store(
        &self,
        pcache: u64,
        psrc: u64,
        n: usize,
        ppos: u64,
    ) -> Result<(), GpuError> {
        const OP: &str = "model_kv_store";
        if n == 0 {
            return Ok(());
        }
        let f = self.g.function(FILE, OP)?;
        let nn = n as i64;
        let mut a = self.g.stream.launch_builder(&f);
        a.arg(&pcache).arg(&psrc).arg(&nn).arg(&ppos);
        let grid = ops::grid_for(&self.g, n as u64, 256);
        // SAFETY: model_kv_store(cache, src, n, pos): the caller holds src at n values and the
        // cache at (*pos + 1) * n.
        unsafe { a.launch(runtime::cfg(grid, 256, 0)) }.map_err(launch_err(OP))?;
        Ok(())
    }

    /// Queues `model_mix_slots`: y[i] = Σ_s w[s] · o[s*n + i] over `k` slots in order, i < n.
    pub(crate) fn launch_mix_slots(
        &self,
        po: u64,
        pw: u64,
        k: usize,
        n: usize,
        py: u64,
    ) -> Result<(), GpuError> {
        self.launch_mix_slots_named("model_mix_slots", po, pw, k, n, py)
    }

    /// [`GpuKernels::launch_mix_slots`] on kernel `op` (the default or a bench variant).
    fn launch_mix_slots_named(
        &self,
        op: &'static str,
        po: u64,
        pw: u64,
        k: usize,
        n: usize,
        py: u64,
    ) -> Result<(), GpuError> {
        if n == 0 {
            return Ok(());
        }
        let f = self.g.function(FILE, op)?;
        let (kk, nn) = (k as i64, n as i64);
        let mut a = self.g.stream.launch_builder(&f);
        a.arg(&po).arg(&pw).arg(&kk).arg(&nn).arg(&py);
        let grid = ops::grid_for(&self.g, n as u64, 256);
        // SAFETY: model_mix_slots(o, w, k, n, y): o holds k*n, w k, y n f32 values.
        unsafe { a.launch(runtime::cfg(grid, 256, 0)) }.map_err(launch_err(op))?;
        Ok(())
    }

    /// Queues `model_axpy` (gpu/kernels/model_ops.cu) over n f32 values: mode 0 `y += a * x`,
    /// 1 `y = x`, 2 `y = a` (x not read).
    pub(crate) fn launch_axpy(
        &self,
        py: u64,
        px: u64,
        a: f32,
        n: usize,
        mode: i32,
    ) -> Result<(), GpuError> {
        const OP: &str = "model_axpy";
        if n == 0 {
            return Ok(());
        }
        let f = self.g.function(FILE, OP)?;
        let nn = n as i64;
        let mut l = self.g.stream.launch_builder(&f);
        l.arg(&py).arg(&px).arg(&a).arg(&nn).arg(&mode);
        let grid = ops::grid_for(&self.g, n as u64, 256);
        // SAFETY: model_axpy(y, x, a, n, mode): grid-stride over n values of y (and of x unless
        // mode 2); the caller holds both at >= n values, not overlapping.
        unsafe { l.launch(runtime::cfg(grid, 256, 0)) }.map_err(launch_err(OP))?;
        Ok(())
    }
}

/// What `t` single-token state updates produced (MTP verification).
pub(crate) struct SsuRun {
    /// (t, nheads*headdim)
    out: Vec<f32>,
    /// (t, nheads, headdim, dstate): the state after every step
    states: Vec<f32>,
}

/// Kernel versions of the reused ops.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Versions {
    conv_fn: &'static str,
    ssd: &'static str,
    ssu: &'static str,
    router: &'static str,
}

/// Runs a reused op by name: the GPU op table for [`GpuKernels`]; the CPU reference in the
/// unit tests below (which so check every TensorMap this module builds, with no GPU).
pub(crate) trait OpExec {
    fn exec(
        &self,
        op: &str,
        version: &str,
        inputs: &TensorMap,
        sets: &[(String, String)],
    ) -> Result<TensorMap, GpuError>;
}

impl OpExec for GpuKernels {
    fn exec(
        &self,
        op: &str,
        version: &str,
        inputs: &TensorMap,
        sets: &[(String, String)],
    ) -> Result<TensorMap, GpuError> {
        let o = ops::find(op)?;
        ops::run_version(&self.g, &o, version, inputs, sets, &self.opts())
    }
}

impl Reused for GpuKernels {
    fn versions(&self) -> Versions {
        Versions {
            conv_fn: self.conv_fn_version,
            ssd: self.ssd_version,
            ssu: self.ssu_version,
            router: self.router_version,
        }
    }

    /// The decode step without the op runner, where `auto` would run v10 (batch 1, an f32 state,
    /// A per head: every Nemotron-H decode step): the state goes up and comes back as raw f32
    /// (`clone_htod` from the slice, `memcpy_dtoh` into it) instead of the op runner's tensor
    /// map, guarded staging copy and byte conversions (5.7 ms of host work per call at the
    /// Super shape, 4 MB of state: session 6 call 1, `ssu_step` 22.7 of 37.4 ms per step);
    /// A, D, dt_bias come from the weight cache. The kernel parameters are
    /// [`ops::selective_state_update::decode_params`], which a unit test holds equal to the op's
    /// own. `None`: not this case (another version configured, other dims, lengths the op's
    /// parser should report): the caller runs the op.
    fn ssu_decode_direct(
        &self,
        dims: SsmDims,
        state: &mut [f32],
        p: &SsmParams<'_>,
        x: &[f32],
        dt: &[f32],
        b: &[f32],
        c: &[f32],
    ) -> Result<Option<Vec<f32>>, GpuError> {
        let SsmDims {
            nheads: h,
            headdim: hd,
            ngroups: ng,
            dstate: n,
        } = dims;
        let lengths_ok = state.len() == h * hd * n
            && x.len() == h * hd
            && dt.len() == h
            && b.len() == ng * n
            && c.len() == ng * n;
        if !lengths_ok || !self.ssu_direct_ok(dims, p) {
            return Ok(None);
        }
        let s = &self.g.stream;
        let mut st = s
            .clone_htod(state)
            .map_err(|e| GpuError::Driver(format!("selective_state_update state upload: {e}")))?;
        let (xd, dtd, bd, cd) = (self.up(x)?, self.up(dt)?, self.up(b)?, self.up(c)?);
        let out = self.out(h * hd)?;
        {
            use cudarc::driver::DevicePtrMut;
            let (stp, _sync) = st.device_ptr_mut(s);
            self.launch_ssu_decode(
                dims,
                p,
                [xd.ptr(s), dtd.ptr(s), bd.ptr(s), cd.ptr(s)],
                stp,
                out.ptr(s),
            )?;
        }
        let y = self.down(&out, h * hd, "selective_state_update out")?;
        s.memcpy_dtoh(&st, state)
            .map_err(|e| GpuError::Driver(format!("selective_state_update state download: {e}")))?;
        Ok(Some(y))
    }
}
/// The routed slots of one token on the Super shapes for `duet bench --shape moe_slots_t1`:
/// every `model_gemv1_slots_nvfp4w` variant (model_ops.cu: columns per warp, chunks per trip,
/// register cap) over 22 NVFP4 experts (up 2688 x 1024, down 1024 x 2688, 0.5625 bytes per
/// weight), each GEMV alone and the decode engine's four launches (up, ReLU², down, mix),
/// CUDA-graph timing; every exact variant's outputs are checked against the default's,
/// bitwise (outputs poisoned first); the production-numerics one (the third field false) reports
/// its max relative difference (max |a - b| / max |a|) instead.
pub const SLOT_VARIANTS: &[(&str, u32, bool)] = &[
    ("model_gemv1_slots_nvfp4w", GEMV1_R_NV, true),
    // the 16-entry table (the default until session 8)
    ("model_gemv1_slots_nvfp4w_t16", GEMV1_R_NV, true),
    // the down GEMV reading the up GEMV's output through ReLU² (no relu2 launch in its chain:
    // `--engine-fuse`; session 9, not yet run)
    ("model_gemv1_slots_nvfp4w_relu", GEMV1_R_NV, true),
    ("model_gemv1_slots_nvfp4w_r4c1", 4, true),
    ("model_gemv1_slots_nvfp4w_r4c1lb3", 4, true),
    ("model_gemv1_slots_nvfp4w_r2", 2, true),
    ("model_gemv1_slots_nvfp4w_r2lb3", 2, true),
    ("model_gemv1_slots_nvfp4w_r2c1lb4", 2, true),
    // production numerics (per-block partial sums, then the scale): not the reference's bits
    ("model_gemv1_slots_nvfp4p", GEMV1_R_NV, false),
    // session 11: the weights through shared-memory stages (cp.async, persistent blocks;
    // `_pipe` 3 stages, `_pipe2` / `_pipe4` 2 / 4; `_pipe_relu` the fused down GEMV)
    ("model_gemv1_slots_nvfp4w_pipe", GEMV1_R_NV, true),
    ("model_gemv1_slots_nvfp4w_pipe_relu", GEMV1_R_NV, true),
    ("model_gemv1_slots_nvfp4w_pipe2", GEMV1_R_NV, true),
    ("model_gemv1_slots_nvfp4w_pipe4", GEMV1_R_NV, true),
    // session 11: x and the pairs from shared memory (`_xs3`: three blocks an SM)
    ("model_gemv1_slots_nvfp4w_xs", GEMV1_R_NV, true),
    ("model_gemv1_slots_nvfp4w_xs_relu", GEMV1_R_NV, true),
    ("model_gemv1_slots_nvfp4w_xs3", GEMV1_R_NV, true),
    ("model_gemv1_slots_nvfp4w_xs3_relu", GEMV1_R_NV, true),
    ("model_gemv1_slots_nvfp4w_xs3_t16", GEMV1_R_NV, true),
    // two columns a warp, four blocks an SM (session 12 call 1: down 28.50 us vs _xs3 29.39)
    ("model_gemv1_slots_nvfp4w_xs4r2", 2, true),
    ("model_gemv1_slots_nvfp4w_xs4r2_relu", 2, true),
    // session 13: the tensor-core forms (mma.sync f16, x in three f16 terms; within f32
    // rounding of the default, not its bits); the digit is the K split (warps a column group)
    ("model_gemv1_slots_nvfp4w_mma1", 1, false),
    ("model_gemv1_slots_nvfp4w_mma2", 1, false),
    ("model_gemv1_slots_nvfp4w_mma4", 1, false),
    ("model_gemv1_slots_nvfp4w_mma1_relu", 1, false),
    ("model_gemv1_slots_nvfp4w_mma2_relu", 1, false),
    ("model_gemv1_slots_nvfp4w_mma4_relu", 1, false),
    // D steps in flight a warp (the others: 2)
    ("model_gemv1_slots_nvfp4w_mma1d3", 1, false),
    ("model_gemv1_slots_nvfp4w_mma1d3_relu", 1, false),
    ("model_gemv1_slots_nvfp4w_mma1d4", 1, false),
    ("model_gemv1_slots_nvfp4w_mma1d4_relu", 1, false),
    ("model_gemv1_slots_nvfp4w_mma1d6", 1, false),
    ("model_gemv1_slots_nvfp4w_mma1d6_relu", 1, false),
    // eight warps a block, K over two / four of them (session 13, after call 3)
    ("model_gemv1_slots_nvfp4w_mma2w8", 1, false),
    ("model_gemv1_slots_nvfp4w_mma2w8_relu", 1, false),
    ("model_gemv1_slots_nvfp4w_mma4w8", 1, false),
    ("model_gemv1_slots_nvfp4w_mma4w8_relu", 1, false),
];

/// The `mma` slot form's up GEMV (also the unfused down GEMV). Session 13 call 1
/// (moe_slots_t1): one warp a column group (mma1) 12.84 us up / 16.24 down, against K split
/// over two / four warps 15.65 / 17.07 and 19.46 / 22.15 (every block stages x).
pub const SLOT_MMA_UP: &str = "model_gemv1_slots_nvfp4w_mma1";
/// The `mma` slot form's fused down GEMV (x read through ReLU²; the unfused down GEMV runs
/// its form without `_relu`, [`slot_mma_plain`], so `--engine-fuse` keeps the bits): eight
/// warps a block with K over two of them (session 13 call 3's ncu had the one-warp form at
/// 27.1 us under a cold L2 for the down shape's 1408 warps of 21 steps, against 16.1 for the
/// up GEMV's 3696 warps of 8).
pub const SLOT_MMA_DOWN: &str = "model_gemv1_slots_nvfp4w_mma2w8_relu";

/// The SSU version of the decode step (batch 1, f32 state, A per head: what `auto` picks
/// there): v12 since session 32 (one 512-thread block a head; at the Super shape, f32 state,
/// dt per head, 4.87-4.99 us against v10's 6.61-6.78, session 31 call 3), where it applies
/// (dstate 128, at most one head an SM: [`decode_ssu_kernel`]); v10 elsewhere (session 12:
/// 16 rows a block and the loads before the prologue). Every version's state update is
/// bit-exact against the reference (the same state bits whatever the choice); v12 sums `out`
/// in another order than v6 / v10 (last-bit differences, gpu_model
/// `decode_ssu_versions_agree_at_the_super_shape`). Session 32 (fused super engine): its
/// mamba_step 46.0-48.4 us a step (4 layers, per-op events) on v12 against 53.4-54.0 on v10;
/// under ncu the step's 4 SSU launches 22.66 us against 28.77.
pub const DECODE_SSU: &str = "v12";

/// The values of [`GpuKernels::decode_ssu`] (v6: the decode step's kernel until session 12,
/// v10 until session 31).
pub const DECODE_SSUS: &[&str] = &["v6", "v10", "v12"];

/// The kernel the decode step runs for the configured version: (version, threads a block).
/// v12 needs dstate [`ops::selective_state_update::V12_DSTATE`] and takes one block a head,
/// so it runs where the heads fit one wave (`nheads <= sms`); elsewhere v10.
pub fn decode_ssu_kernel(
    configured: &'static str,
    nheads: usize,
    dstate: usize,
    sms: usize,
) -> (&'static str, u32) {
    use crate::ops::selective_state_update as ssu;
    if configured != "v12" {
        return (configured, 128);
    }
    if ssu::v12_ok(dstate, DType::F32).is_none() && nheads <= sms {
        ("v12", 512)
    } else {
        ("v10", 128)
    }
}

/// [`GpuKernels::decode_ssu`] from `DUET_DECODE_SSU` (unset: [`DECODE_SSU`]; an unknown value
/// says so on stderr and keeps the default).
fn decode_ssu_from_env() -> &'static str {
    choice_from_env("DUET_DECODE_SSU", DECODE_SSUS, DECODE_SSU)
}

/// The values of [`GpuKernels::slot_kernel`].
/// `xs3m`: `_xs3` for the up GEMV (x as is), `_xs4r2_relu` for the fused down GEMV (x read
/// through ReLU²); `_xs3` where the down GEMV is not fused.
/// `mma`: the tensor-core GEMVs ([`SLOT_MMA_UP`], [`SLOT_MMA_DOWN`]) where K % 128 == 0 and x
/// rows are 16-byte aligned, within f32 rounding of the others rather than their bits (the
/// model path runs its experts through the exact one-row GEMV: the engine's logits differ from
/// it by ~4e-6, session 13 call 2, instead of matching bit for bit).
pub const SLOT_KERNELS: &[&str] = &["chunk", "xs", "xs3", "xs3m", "pipe", "mma"];

/// The default slot form: `mma` from session 13 (fused super engine, graphs, 24 steps, same
/// run: xs3m 1.1582 ms, mma 1.0801, call 2); `xs3m` (the exact kernels' fastest) from session
/// 12. `mma` is within f32 rounding of the exact forms, not their bits.
pub const DEFAULT_SLOT_KERNEL: &str = "mma";

/// The `mma` slot form's up-GEMV kernels (one warp a column group: the same bits whatever
/// the steps in flight).
pub const SLOT_MMA_UPS: &[&str] = &[
    "model_gemv1_slots_nvfp4w_mma1",
    "model_gemv1_slots_nvfp4w_mma1d3",
    "model_gemv1_slots_nvfp4w_mma1d4",
    "model_gemv1_slots_nvfp4w_mma1d6",
];
/// The `mma` slot form's fused down-GEMV kernels (the same bits as the up kernels on ReLU²'d
/// x).
pub const SLOT_MMA_DOWNS: &[&str] = &[
    "model_gemv1_slots_nvfp4w_mma1_relu",
    "model_gemv1_slots_nvfp4w_mma1d3_relu",
    "model_gemv1_slots_nvfp4w_mma1d4_relu",
    "model_gemv1_slots_nvfp4w_mma1d6_relu",
    "model_gemv1_slots_nvfp4w_mma2w8_relu",
    "model_gemv1_slots_nvfp4w_mma4w8_relu",
];

/// The fused down GEMVs with the slot mix, one for each of [`SLOT_MMA_DOWNS`] (that name +
/// `_mix`).
pub const SLOT_MMA_MIXES: &[&str] = &[
    "model_gemv1_slots_nvfp4w_mma1_relu_mix",
    "model_gemv1_slots_nvfp4w_mma1d3_relu_mix",
    "model_gemv1_slots_nvfp4w_mma1d4_relu_mix",
    "model_gemv1_slots_nvfp4w_mma1d6_relu_mix",
    "model_gemv1_slots_nvfp4w_mma2w8_relu_mix",
    "model_gemv1_slots_nvfp4w_mma4w8_relu_mix",
];

/// The unfused form of a fused down GEMV (`down` without `_relu`: a bench variant; `down`
/// itself when there is none).
fn slot_mma_plain(down: &'static str) -> &'static str {
    let plain = down.strip_suffix("_relu").unwrap_or(down);
    SLOT_VARIANTS
        .iter()
        .find(|v| v.0 == plain)
        .map_or(down, |v| v.0)
}

/// The `mma` form's (up, fused down) kernels: [`SLOT_MMA_UP`] / [`SLOT_MMA_DOWN`] unless
/// `DUET_SLOT_MMA_UP` / `DUET_SLOT_MMA_DOWN` name others of [`SLOT_MMA_UPS`] /
/// [`SLOT_MMA_DOWNS`] (read once).
fn slot_mma_ops() -> (&'static str, &'static str) {
    static OPS: std::sync::OnceLock<(&'static str, &'static str)> = std::sync::OnceLock::new();
    *OPS.get_or_init(|| {
        (
            choice_from_env("DUET_SLOT_MMA_UP", SLOT_MMA_UPS, SLOT_MMA_UP),
            choice_from_env("DUET_SLOT_MMA_DOWN", SLOT_MMA_DOWNS, SLOT_MMA_DOWN),
        )
    })
}

/// [`GpuKernels::slot_kernel`] from `DUET_SLOT_KERNEL` (unset: [`DEFAULT_SLOT_KERNEL`]; an
/// unknown value says so on stderr and keeps the default: every form gives the same bits).
fn slot_kernel_from_env() -> &'static str {
    choice_from_env("DUET_SLOT_KERNEL", SLOT_KERNELS, DEFAULT_SLOT_KERNEL)
}

/// One of `known` named by the environment variable `var` (unset: `default`; an unknown value
/// says so on stderr and keeps `default`).
fn choice_from_env(var: &str, known: &[&'static str], default: &'static str) -> &'static str {
    match std::env::var(var) {
        Ok(v) => known.iter().find(|k| **k == v).copied().unwrap_or_else(|| {
            eprintln!(
                "duet: {var}={v} is not one of {}; using {default}",
                known.join(", ")
            );
            default
        }),
        Err(_) => default,
    }
}

/// Whether `op` is a `model_gemv1_slots_nvfp4w_xs*` kernel.
fn slots_xs_op(op: &str) -> bool {
    op.starts_with("model_gemv1_slots_nvfp4w_xs")
}

/// Output columns a warp of a `model_gemv1_slots_nvfp4w_xs*` kernel computes (`_xs4r2`: 2).
fn slots_xs_columns(op: &str) -> u32 {
    if op.strip_suffix("_relu").unwrap_or(op).ends_with("r2") {
        2
    } else {
        GEMV1_R_NV
    }
}

/// The shared-memory stages of a `model_gemv1_slots_nvfp4w_pipe*` kernel (None: not one).
fn slotp_stages(op: &str) -> Option<usize> {
    let rest = op.strip_prefix("model_gemv1_slots_nvfp4w_pipe")?;
    match rest.strip_suffix("_relu").unwrap_or(rest) {
        "" => Some(SLOTP_STAGES),
        "2" => Some(2),
        "4" => Some(4),
        _ => None,
    }
}

/// Seeded inputs of the bench presets below: a lazy matrix's values (no RNG of our own).
fn bench_values(n: usize, seed: u64) -> Vec<f32> {
    Mat::Lazy {
        rows: 1,
        cols: n,
        seed,
        init: Init::Linear,
    }
    .values()
    .into_owned()
}

/// The engine's small per-step kernels at the Super shapes for `duet bench --shape
/// norms_super`, the default next to a variant of the same FMAs in the same order (model_ops.cu:
/// the norms' loop forms, the defaults until session 8; the slot mix unrolled): rmsnorm of one 4096 row, gated rmsnorm of
/// one 8192 row in groups of 1024, the mix of 22 slots of 1024. Bits checked against the
/// default (outputs poisoned first); single-launch and CUDA-graph timing.
pub const NORM_VARIANTS: &[(&str, &str)] = &[
    ("model_rmsnorm", "model_rmsnorm_loop"),
    ("model_gated_rmsnorm", "model_gated_rmsnorm_loop"),
    ("model_mix_slots", "model_mix_slots_u8"),
];

impl GpuKernels {
    /// The bits of a device buffer's f32 values (the benches' bitwise checks).
    fn download_bits(&self, d: &DevTensor, what: &str) -> Result<Vec<u32>, GpuError> {
        Ok(self
            .g
            .download(d, what)?
            .to_f32_vec()
            .iter()
            .map(|v| v.to_bits())
            .collect())
    }

    pub fn bench_norms(&self) -> Result<serde_json::Value, GpuError> {
        use crate::bench::{time_launch, timing_json};
        let st = &self.g.stream;
        let vals = |n: usize, seed: u64| -> Vec<f32> {
            bench_values(n, seed).iter().map(|v| v * 40.0).collect()
        };
        let up = |v: Vec<f32>| self.g.upload(&Tensor::from_f32(&[v.len()], v));
        let (hs, di, grp, k, lw) = (4096usize, 8192usize, 1024usize, 22usize, 1024usize);
        let x = up(vals(di, 9101))?;
        let z = up(vals(di, 9102))?;
        let w = up(vals(di, 9103))?;
        let o = up(vals(k * lw, 9104))?;
        let sw = up(vals(k, 9105))?;
        let y = self.g.alloc_poisoned(&[di], DType::F32, self.poison)?;
        let (px, pz, pw, po, psw, py) = (
            x.ptr(st),
            z.ptr(st),
            w.ptr(st),
            o.ptr(st),
            sw.ptr(st),
            y.ptr(st),
        );
        let launch = |op: &'static str| -> Result<(), GpuError> {
            match op {
                "model_rmsnorm" | "model_rmsnorm_loop" => {
                    self.launch_rmsnorm_named(op, px, pw, py, 1, hs, 1e-5)
                }
                "model_gated_rmsnorm" | "model_gated_rmsnorm_loop" => {
                    self.launch_gated_rmsnorm_named(op, [px, pz, pw, py], 1, di, grp, 1e-5)
                }
                _ => self.launch_mix_slots_named(op, po, psw, k, lw, py),
            }
        };
        let mut rows = vec![];
        for &(base, var) in NORM_VARIANTS {
            let mut want: Option<Vec<u32>> = None;
            for op in [base, var] {
                self.launch_axpy(py, py, f32::NAN, di, 2)?;
                launch(op)?;
                self.g.sync()?;
                let got = self.download_bits(&y, "y")?;
                let n = if op.starts_with("model_rmsnorm") {
                    hs
                } else if op.starts_with("model_gated") {
                    di
                } else {
                    lw
                };
                let finite = got[..n].iter().all(|b| f32::from_bits(*b).is_finite());
                let same = match &want {
                    None => {
                        want = Some(got);
                        true
                    }
                    Some(w) => *w == got,
                };
                let (t, gt) = time_launch(&self.g, true, || launch(op))?;
                rows.push(serde_json::json!({
                    "kernel": op, "default": op == base, "finite": finite,
                    "same_bits_as_default": same,
                    "single": timing_json(&t), "graph_per_launch": gt.as_ref().map(timing_json),
                }));
            }
        }
        Ok(serde_json::json!({
            "op": "norms", "shape": {"rmsnorm": hs, "gated_rmsnorm": [di, grp], "mix_slots": [k, lw]},
            "variants": rows,
        }))
    }

    pub fn bench_moe_slots(&self) -> Result<serde_json::Value, GpuError> {
        use crate::bench::{copy_ceiling, time_launch, timing_json};
        let (k, inter, lw) = (22usize, 2688usize, 1024usize);
        let st = &self.g.stream;
        let experts: Vec<(usize, usize, u64)> = [(inter, lw, 7000u64), (lw, inter, 8000)]
            .iter()
            .flat_map(|&(r, c, s0)| (0..k).map(move |e| (r, c, s0 + e as u64)))
            .collect();
        let (_bufs, td, wbytes) = self.upload_nvfp4_experts("moe_slots_t1", &experts)?;
        let x = bench_values(lw, 9001);
        let w: Vec<f32> = bench_values(k, 9002)
            .iter()
            .map(|v| v.abs() + 0.01)
            .collect();
        let xd = self.g.upload(&Tensor::from_f32(&[lw], x))?;
        let wd = self.g.upload(&Tensor::from_f32(&[k], w))?;
        let out = |n: usize| self.g.alloc_poisoned(&[n], DType::F32, self.poison);
        let (h, rl, o, y) = (out(k * inter)?, out(k * inter)?, out(k * lw)?, out(lw)?);
        let (px, pt, pw) = (xd.ptr(st), td.ptr(st), wd.ptr(st));
        let (ph, pr, po, py) = (h.ptr(st), rl.ptr(st), o.ptr(st), y.ptr(st));
        let up =
            |op: &str, rr: u32| self.launch_slot_op(op, rr, px, 0, (pt, 0), ph, (inter, lw, k));
        // `_relu`: the down GEMV reads h through ReLU² (no relu2 launch; the up GEMV is the
        // default's).
        let relu = |op: &str| op.ends_with("_relu");
        let down = |op: &str, rr: u32| {
            let x = if relu(op) { ph } else { pr };
            let w = (pt + 8 * k as u64, 0);
            self.launch_slot_op(op, rr, x, inter, w, po, (lw, inter, k))
        };
        // The `_relu` forms' up GEMV: the same kernel without the suffix.
        let up_op = |op: &'static str| op.strip_suffix("_relu").unwrap_or(op);
        let chain = |op: &'static str, rr: u32| {
            up(up_op(op), rr)?;
            if !relu(op) {
                self.launch_relu2(ph, pr, k * inter)?;
            }
            down(op, rr)?;
            self.launch_mix_slots(po, pw, k, lw, py)
        };
        let (ct, cgbs) = copy_ceiling(&self.g, 1 << 28)?;
        let mut want: Option<(Vec<u32>, Vec<u32>)> = None;
        let mut rows = vec![];
        // DUET_SLOT_VARIANTS=a,b: the default and these only (e.g. under ncu).
        let only: Option<Vec<String>> = std::env::var("DUET_SLOT_VARIANTS")
            .ok()
            .map(|v| v.split(',').map(|s| s.trim().to_string()).collect());
        let picked = |op: &str| {
            op == SLOT_VARIANTS[0].0 || only.as_ref().is_none_or(|o| o.iter().any(|n| n == op))
        };
        for &(op, rr, exact) in SLOT_VARIANTS.iter().filter(|v| picked(v.0)) {
            // Poison, one chain, compare with the default's bits.
            for (p, n) in [(ph, k * inter), (pr, k * inter), (po, k * lw), (py, lw)] {
                self.launch_axpy(p, p, f32::NAN, n, 2)?;
            }
            chain(op, rr)?;
            self.g.sync()?;
            let got = (self.download_bits(&h, "h")?, self.download_bits(&y, "y")?);
            let finite = got
                .0
                .iter()
                .chain(&got.1)
                .all(|b| f32::from_bits(*b).is_finite());
            // max |a - b| / max |a| over the final output against the default's.
            let rel = |w: &[u32], g: &[u32]| {
                let (mut d, mut m) = (0f64, 0f64);
                for (a, b) in w.iter().zip(g) {
                    let (a, b) = (f32::from_bits(*a) as f64, f32::from_bits(*b) as f64);
                    d = d.max((a - b).abs());
                    m = m.max(a.abs());
                }
                if m > 0.0 {
                    d / m
                } else {
                    d
                }
            };
            let (same, max_rel) = match &want {
                None => {
                    want = Some(got);
                    (true, 0.0)
                }
                Some(w) => (*w == got, rel(&w.1, &got.1)),
            };
            let (tu, gu) = time_launch(&self.g, true, || up(up_op(op), rr))?;
            let (tdn, gdn) = time_launch(&self.g, true, || down(op, rr))?;
            let (tc, gc) = time_launch(&self.g, true, || chain(op, rr))?;
            let pick = |single: &crate::runtime::Timing, g: &Option<crate::runtime::Timing>| {
                g.as_ref().map_or(single.median_us, |t| t.median_us)
            };
            let chain_us = pick(&tc, &gc);
            let gbs = wbytes as f64 / (chain_us * 1e-6) / 1e9;
            rows.push(serde_json::json!({
                "kernel": op, "columns_per_warp": rr, "exact": exact,
                "same_bits_as_default": same, "max_rel_vs_default": max_rel, "finite": finite,
                "up": {"single": timing_json(&tu), "graph_per_launch": gu.as_ref().map(timing_json)},
                "down": {"single": timing_json(&tdn), "graph_per_launch": gdn.as_ref().map(timing_json)},
                "chain": {"single": timing_json(&tc), "graph_per_launch": gc.as_ref().map(timing_json)},
                "chain_us": chain_us, "weight_gb_per_s": gbs, "pct_of_copy": 100.0 * gbs / cgbs,
            }));
        }
        Ok(serde_json::json!({
            "op": "moe_slots", "shape": {"slots": k, "inter": inter, "latent": lw, "weights": "nvfp4 (0.5625 B/weight + table)"},
            "weight_bytes": wbytes, "floor_us": wbytes as f64 / (cgbs * 1e9) * 1e6,
            "copy": {"time": timing_json(&ct), "gb_per_s": cgbs},
            "variants": rows,
        }))
    }
}

/// One case of [`GpuKernels::slot_variant_vs_chunk`]: the outputs' bits of the default slot
/// GEMV and of a variant on the same inputs.
#[derive(Debug)]
pub struct SlotPipeCase {
    pub chunk: Vec<u32>,
    pub variant: Vec<u32>,
    /// The column groups (32 columns of one slot) the pipe kernel walked.
    pub groups: u64,
}

impl GpuKernels {
    /// The routed slots' NVFP4 GEMV `op` (`model_gemv1_slots_nvfp4w` or one of its `_pipe*` /
    /// `_xs*` forms) over one slot whose weight is the device buffer `w` (an NVFP4 buffer of
    /// `Layout::of(n, k)`, 16-byte aligned): y = W . x, poisoned before the launch. For the
    /// past-2^31 test (gpu/tests/gpu_index64.rs), whose buffer is too big to build twice.
    pub fn slot_gemv_on(
        &self,
        w: &DevTensor,
        (n, k): (usize, usize),
        x: &[f32],
        op: &str,
    ) -> Result<Vec<f32>, GpuError> {
        use reference::tensor::Data;
        let st = &self.g.stream;
        let need = crate::nvfp4_store::Layout::of(n, k).len;
        if x.len() != k || w.dtype != DType::U8 || w.len < need {
            return Err(bad(
                op,
                format!(
                    "x of {} values (K = {k}), weight of {} bytes of {} ({need} u8 needed)",
                    x.len(),
                    w.len,
                    w.dtype
                ),
            ));
        }
        let table = w.ptr(st).to_le_bytes().to_vec();
        let td = self.g.upload(&Tensor::new(&[8], Data::U8(table)))?;
        let xd = self.g.upload(&Tensor::from_f32(&[k], x.to_vec()))?;
        let y = self.g.alloc_poisoned(&[n], DType::F32, self.poison)?;
        let (px, wt, py) = (xd.ptr(st), (td.ptr(st), 0u64), y.ptr(st));
        let shape = (n, k, 1);
        if !(op == "model_gemv1_slots_nvfp4w"
            || slotp_stages(op).is_some()
            || slots_xs_op(op)
            || slots_mma_op(op))
        {
            return Err(bad(op, "not an NVFP4 slot GEMV".into()));
        }
        self.launch_slot_op(op, GEMV1_R_NV, px, 0, wt, py, shape)?;
        self.g.sync()?;
        Ok(self.g.download(&y, "y")?.to_f32_vec())
    }

    /// The slot GEMV `op` (a `model_gemv1_slots_nvfp4w_pipe*` or `_xs*` kernel) next to the
    /// default `model_gemv1_slots_nvfp4w` (its `_relu` form for an `op` ending in `_relu`) on
    /// `slots` seeded NVFP4 experts of (n, k) picked through a device `ids` array (`picks`:
    /// indices into the experts, repeats allowed), x rows of k values at `x_stride`
    /// (poisoned outputs first). For the tests (gpu/tests/gpu_model.rs): odd column counts,
    /// partial slices, strides.
    pub fn slot_variant_vs_chunk(
        &self,
        (n, k, experts): (usize, usize, usize),
        picks: &[i32],
        x_stride: usize,
        op: &str,
    ) -> Result<SlotPipeCase, GpuError> {
        let relu = op.ends_with("_relu");
        use reference::tensor::Data;
        let st = &self.g.stream;
        let slots = picks.len();
        if (x_stride != 0 && x_stride < k) || picks.iter().any(|&p| p < 0 || p as usize >= experts)
        {
            return Err(bad(
                "slot_pipe_vs_chunk",
                "x_stride < k or a pick out of range".into(),
            ));
        }
        if slotp_stages(op).is_none() && !slots_xs_op(op) && !slots_mma_op(op) {
            return Err(bad(op, "not a pipe, xs or mma slot kernel".into()));
        }
        let shapes: Vec<(usize, usize, u64)> = (0..experts)
            .map(|e| (n, k, 31_000 + 17 * e as u64 + n as u64))
            .collect();
        let (_bufs, td, _) = self.upload_nvfp4_experts("slot_variant_vs_chunk", &shapes)?;
        let idd = self
            .g
            .upload(&Tensor::new(&[slots], Data::I32(picks.to_vec())))?;
        // x: signed values about N(0, 1) (ReLU² then zeroes about half), the stride's gaps
        // included (bench_values are N(0, 1) / sqrt(len)).
        let len = (slots * x_stride).max(k);
        let sc = (len as f32).sqrt();
        let xv: Vec<f32> = bench_values(len, 9301 + k as u64)
            .iter()
            .map(|v| sc * v)
            .collect();
        let xd = self.g.upload(&Tensor::from_f32(&[xv.len()], xv))?;
        let out = || self.g.alloc_poisoned(&[slots * n], DType::F32, self.poison);
        let (ya, yb) = (out()?, out()?);
        let (px, pt, pi) = (xd.ptr(st), td.ptr(st), idd.ptr(st));
        let shape = (n, k, slots);
        let chunk = if relu {
            "model_gemv1_slots_nvfp4w_relu"
        } else {
            "model_gemv1_slots_nvfp4w"
        };
        let w = (pt, pi);
        self.launch_slot_op(chunk, GEMV1_R_NV, px, x_stride, w, ya.ptr(st), shape)?;
        self.launch_slot_op(op, GEMV1_R_NV, px, x_stride, w, yb.ptr(st), shape)?;
        self.g.sync()?;
        Ok(SlotPipeCase {
            chunk: self.download_bits(&ya, "chunk y")?,
            variant: self.download_bits(&yb, "variant y")?,
            groups: (slots * n.div_ceil(SLOTP_ROWS as usize)) as u64,
        })
    }
}

impl GpuKernels {
    /// The `mma` form's fused down GEMV + slot mix ([`GpuKernels::launch_down_mix`], run
    /// `launches` times on the same inputs: each launch must leave its counters zero for the
    /// next) next to the unfused pair (the same down kernel without the mix, then
    /// `model_mix_slots`) for the fused down GEMV `down` (one of [`SLOT_MMA_DOWNS`]) on
    /// `picks.len()` slots of seeded NVFP4 experts of (lw, inter) picked
    /// through device ids, h rows at `h_stride`, seeded slot weights; outputs poisoned first.
    /// Returns ((unfused o, unfused mix), (fused o, fused mix)) as bits. For gpu_model's test.
    #[allow(clippy::type_complexity)]
    pub fn slot_down_mix_vs_unfused(
        &self,
        (lw, inter, experts): (usize, usize, usize),
        picks: &[i32],
        h_stride: usize,
        launches: usize,
        down: &str,
    ) -> Result<((Vec<u32>, Vec<u32>), (Vec<u32>, Vec<u32>)), GpuError> {
        use reference::tensor::Data;
        let st = &self.g.stream;
        let k = picks.len();
        if h_stride < inter || picks.iter().any(|&p| p < 0 || p as usize >= experts) {
            return Err(bad(
                "slot_down_mix",
                "h_stride < inter or a pick out of range".into(),
            ));
        }
        let shapes: Vec<(usize, usize, u64)> = (0..experts)
            .map(|e| (lw, inter, 47_000 + 13 * e as u64 + lw as u64))
            .collect();
        let (_bufs, td, _) = self.upload_nvfp4_experts("slot_down_mix", &shapes)?;
        let idd = self
            .g
            .upload(&Tensor::new(&[k], Data::I32(picks.to_vec())))?;
        let len = k * h_stride;
        let sc = (inter as f32).sqrt();
        let hv: Vec<f32> = bench_values(len, 9401 + inter as u64)
            .iter()
            .map(|v| sc * v)
            .collect();
        let wv: Vec<f32> = bench_values(k, 9402)
            .iter()
            .map(|v| v.abs() + 0.01)
            .collect();
        let hd = self.g.upload(&Tensor::from_f32(&[len], hv))?;
        let wd = self.g.upload(&Tensor::from_f32(&[k], wv))?;
        let out = |n: usize| self.g.alloc_poisoned(&[n], DType::F32, self.poison);
        let (oa, ma, ob, mb) = (out(k * lw)?, out(lw)?, out(k * lw)?, out(lw)?);
        let cnt = out(lw.div_ceil(16))?;
        let (ph, pt, pi, pw, pc) = (hd.ptr(st), td.ptr(st), idd.ptr(st), wd.ptr(st), cnt.ptr(st));
        self.launch_axpy(pc, pc, 0.0, lw.div_ceil(16), 2)?;
        let shape = (lw, inter, k);
        self.launch_slots_mma(down, ph, h_stride, (pt, pi), oa.ptr(st), shape)?;
        self.launch_mix_slots(oa.ptr(st), pw, k, lw, ma.ptr(st))?;
        for _ in 0..launches {
            for (p, n) in [(ob.ptr(st), k * lw), (mb.ptr(st), lw)] {
                self.launch_axpy(p, p, f32::NAN, n, 2)?;
            }
            let m = (pw, mb.ptr(st), pc);
            self.launch_down_mix_op(down, ph, h_stride, (pt, pi), ob.ptr(st), shape, m)?;
        }
        self.g.sync()?;
        let counters = self.download_bits(&cnt, "counters")?;
        if counters.iter().any(|&c| c != 0) {
            return Err(bad(
                "slot_down_mix",
                format!("counters left non-zero: {counters:?}"),
            ));
        }
        Ok((
            (
                self.download_bits(&oa, "o")?,
                self.download_bits(&ma, "mix")?,
            ),
            (
                self.download_bits(&ob, "fused o")?,
                self.download_bits(&mb, "fused mix")?,
            ),
        ))
    }

    /// What the decode step's SSU launch runs at these dims: ([`decode_ssu_kernel`]'s version,
    /// threads a block) for the configured [`GpuKernels::decode_ssu`] and this GPU's SMs.
    pub fn decode_ssu_launch(&self, dims: SsmDims) -> (&'static str, u32) {
        decode_ssu_kernel(
            self.decode_ssu,
            dims.nheads,
            dims.dstate,
            self.g.sm_count as usize,
        )
    }

    /// Whether the decode step can run its SSU kernel ([`decode_ssu_kernel`]: v12 or v10)
    /// directly, where `auto` would run it (batch 1, an f32 state, A per head: every
    /// Nemotron-H decode step): the `auto` version configured, a dstate v10 compiles for
    /// (v12 needs 128 and falls back to v10 otherwise), fewer heads than 4 per SM, per-head
    /// operands of `nheads`.
    pub(crate) fn ssu_direct_ok(&self, dims: SsmDims, p: &SsmParams<'_>) -> bool {
        use crate::ops::selective_state_update as ssu;
        let SsmDims {
            nheads: h,
            ngroups: ng,
            dstate: n,
            ..
        } = dims;
        self.ssu_version == "auto"
            && h > 0
            && ng > 0
            && h % ng == 0
            && p.a.len() == h
            && p.d.len() == h
            && p.dt_bias.len() == h
            && n <= ssu::MAX_DSTATE
            && ssu::v3_ok(n, DType::F32).is_none()
            && (h as u64) < 4 * self.g.sm_count as u64
    }

    /// Launches the decode step's SSU ([`DECODE_SSU`], f32 state) on device pointers: `rows` = [x, dt, B, C] (x
    /// nheads*headdim, dt nheads, B / C ngroups*dstate f32), `state` (nheads, headdim, dstate)
    /// f32 updated in place, `out` nheads*headdim. A, D, dt_bias come from the weight cache.
    /// The parameters are [`ops::selective_state_update::decode_params`] (a unit test holds
    /// them equal to the op's own); the caller checked [`Self::ssu_direct_ok`] and the sizes.
    pub(crate) fn launch_ssu_decode(
        &self,
        dims: SsmDims,
        p: &SsmParams<'_>,
        rows: [u64; 4],
        state: u64,
        out: u64,
    ) -> Result<(), GpuError> {
        use crate::ops::selective_state_update as ssu;
        let SsmDims {
            nheads: h,
            headdim: hd,
            ngroups: ng,
            dstate: n,
        } = dims;
        let prm = ssu::decode_params(h, hd, n, ng)?;
        let (version, threads) = decode_ssu_kernel(self.decode_ssu, h, n, self.g.sm_count as usize);
        let (fname, dtiles) = ssu::launch_shape(version, hd, n, DType::F32, false);
        let f = self.g.function("selective_state_update", &fname)?;
        let blocks = grid_u32("selective_state_update", h as u64 * dtiles as u64)?;
        let s = &self.g.stream;
        let (ad, dd, biasd) = (
            self.weight_vec(p.a)?,
            self.weight_vec(p.d)?,
            self.weight_vec(p.dt_bias)?,
        );
        let dummy = self.dummy()?;
        let [x, dt, b, c] = rows;
        // x, dt, A, B, C, D, z, dt_bias, sbi, state, state_scale, out: the common ssu
        // signature (z, sbi and the scale are dummies: has_z = has_sbi = 0, f32 state).
        let ptrs = [
            x,
            dt,
            ad.ptr(s),
            b,
            c,
            dd.ptr(s),
            dummy.ptr(s),
            biasd.ptr(s),
            dummy.ptr(s),
            state,
            dummy.ptr(s),
            out,
        ];
        let mut l = s.launch_builder(&f);
        l.arg(&prm);
        for q in &ptrs {
            l.arg(q);
        }
        // SAFETY: the common ssu signature (params, then the 12 buffers above); the caller holds
        // the state at h * hd * n f32, x and out at h * hd, dt h, B / C ngroups * n; A / D /
        // dt_bias hold h (ssu_direct_ok); the dummies are never read (their has_* flags are 0).
        // v12 takes one 512-thread block a head (launch_shape: one d-tile), the others 128.
        unsafe { l.launch(runtime::cfg(blocks, threads, 0)) }
            .map_err(launch_err("selective_state_update decode step"))?;
        Ok(())
    }

    /// Whether [`GpuKernels::launch_mamba_step`] takes this layer: conv width 2..=4, xBC =
    /// [x | B | C] with d_inner and ngroups*dstate multiples of 4, per-head operands of
    /// nheads, and the ssu decode case (v12 / v10)
    /// ([`GpuKernels::ssu_direct_ok`]).
    pub(crate) fn mamba_step_ok(&self, m: &MambaStep<'_>) -> bool {
        use crate::ops::causal_conv1d::MAX_WIDTH;
        let d = m.dims;
        let (di, gs) = (d.nheads * d.headdim, d.ngroups * d.dstate);
        let cd = m.conv_dim;
        // B and C are read from the conv output at offsets di and di + gs: multiples of 4
        // keep them 16-byte aligned like separate buffers.
        m.conv_k >= 2
            && m.conv_k <= MAX_WIDTH
            && di.is_multiple_of(4)
            && gs.is_multiple_of(4)
            && cd == di + 2 * gs
            && m.conv_w.len() == cd * m.conv_k
            && m.conv_b.is_none_or(|b| b.len() == cd)
            && self.ssu_direct_ok(d, &m.params)
    }

    /// Queues one Mamba decode step on device pointers: `causal_conv1d_update` v1 (SiLU) of
    /// xBC (conv_dim f32 at `xbc`) on the conv window `conv` (conv_dim, k-1) into `xa`
    /// (conv_dim f32 of scratch), then the decode SSU (v12 / v10: [`decode_ssu_kernel`]) on the SSM state `ssm` (nheads, headdim, dstate)
    /// with x, B and C read straight from `xa` and the raw dt (nheads f32 at `dt`); y
    /// (nheads*headdim f32) into `y`. The caller checked [`GpuKernels::mamba_step_ok`] and the
    /// buffer sizes.
    pub(crate) fn launch_mamba_step(
        &self,
        m: &MambaStep<'_>,
        [xbc, dt]: [u64; 2],
        [conv, ssm]: [u64; 2],
        xa: u64,
        y: u64,
    ) -> Result<(), GpuError> {
        use crate::ops::causal_conv1d::UpdateLaunch;
        let d = m.dims;
        let (di, gs) = (d.nheads * d.headdim, d.ngroups * d.dstate);
        let s = &self.g.stream;
        let conv_w = self.weight_vec(m.conv_w)?;
        let conv_b = m.conv_b.map(|b| self.weight_vec(b)).transpose()?;
        UpdateLaunch {
            x: xbc,
            xdt: 0,
            state: conv,
            sdt: 0,
            w: conv_w.ptr(s),
            wdt: 0,
            bias: conv_b.as_ref().map_or(0, |b| b.ptr(s)),
            bdt: 0,
            cache_seqlens: 0,
            slots: 0,
            batch: 1,
            dim: m.conv_dim,
            seqlen: 1,
            width: m.conv_k,
            state_len: m.conv_k - 1,
            act: reference::ops::causal_conv1d_fn::Activation::Silu,
            out: xa,
            inter: 0,
        }
        .run(&self.g)?;
        // x, B, C are consecutive f32 ranges of the conv output (one token).
        let rows = [xa, dt, xa + 4 * di as u64, xa + 4 * (di + gs) as u64];
        self.launch_ssu_decode(d, &m.params, rows, ssm, y)
    }

    /// [`ModelKernels::mamba_decode`] with the layer's states resident on the device: the
    /// first decode step after a prefill (or after states came back to the host) uploads them
    /// once into a [`GpuMambaState`]; every step then uploads the token's xBC and dt rows, runs
    /// `causal_conv1d_update` v1 (SiLU) on the resident conv window, and the decode SSU (v12 / v10) on the resident
    /// SSM state reading x, B and C straight from the conv output, and downloads y. `None`:
    /// not this case (the op runner path runs on host states instead).
    fn mamba_decode_resident(
        &self,
        st: &mut LayerState,
        m: &MambaStep<'_>,
        xbc: &[f32],
        dt: &[f32],
    ) -> Result<Option<Vec<f32>>, ModelError> {
        let d = m.dims;
        let (di, cd) = (d.nheads * d.headdim, m.conv_dim);
        let (conv_len, ssm_len) = (cd * m.conv_k.saturating_sub(1), di * d.dstate);
        if xbc.len() != cd
            || dt.len() != d.nheads
            || !self.mamba_step_ok(m)
            || !resident_states_on()
        {
            return Ok(None);
        }
        // The layer's resident states: ours as they are, anything else through the host.
        let ours = match st {
            LayerState::MambaResident(r) => r
                .as_any_mut()
                .downcast_ref::<GpuMambaState>()
                .is_some_and(|g| g.conv_len == conv_len && g.ssm_len == ssm_len),
            _ => false,
        };
        if !ours {
            st.make_host()?;
            let LayerState::Mamba { conv, ssm } = &*st else {
                return Ok(None);
            };
            if conv.len() != conv_len || ssm.len() != ssm_len {
                return Ok(None);
            }
            let g = GpuMambaState::upload(&self.g, conv, ssm).map_err(merr("mamba_decode"))?;
            *st = LayerState::MambaResident(Box::new(g));
        }
        let LayerState::MambaResident(r) = st else {
            return Err(op_err("mamba_decode", "the layer's state is not resident"));
        };
        let Some(res) = r.as_any_mut().downcast_mut::<GpuMambaState>() else {
            return Err(op_err("mamba_decode", "the layer's state is not the GPU's"));
        };
        let mut run = || -> Result<Vec<f32>, GpuError> {
            let s = &self.g.stream;
            let (xd, dtd) = (self.up(xbc)?, self.up(dt)?);
            let xa = self.out(cd)?;
            let out = self.out(di)?;
            use cudarc::driver::DevicePtrMut;
            let (convp, _s1) = res.conv.device_ptr_mut(s);
            let (ssmp, _s2) = res.ssm.device_ptr_mut(s);
            self.launch_mamba_step(
                m,
                [xd.ptr(s), dtd.ptr(s)],
                [convp, ssmp],
                xa.ptr(s),
                out.ptr(s),
            )?;
            self.down(&out, di, "mamba_decode y")
        };
        run().map(Some).map_err(merr("mamba_decode"))
    }
}

/// `DUET_DECODE_STATES=host` turns the resident decode states off (every decode step then
/// runs the conv update and the state update on host states, as before session 7): a
/// fallback for bisecting, read once per process.
fn resident_states_on() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("DUET_DECODE_STATES").map_or(true, |v| v != "host"))
}

/// A Mamba layer's decode states on the device (f32): the conv window (conv_dim, kernel-1) and
/// the SSM state (nheads, headdim, dstate), kept between decode steps
/// ([`ModelKernels::mamba_decode`] of [`GpuKernels`]).
pub struct GpuMambaState {
    conv: cudarc::driver::CudaSlice<f32>,
    ssm: cudarc::driver::CudaSlice<f32>,
    conv_len: usize,
    ssm_len: usize,
    stream: Arc<cudarc::driver::CudaStream>,
}

impl std::fmt::Debug for GpuMambaState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "GpuMambaState {{ conv: {} f32, ssm: {} f32 }}",
            self.conv_len, self.ssm_len
        )
    }
}

impl GpuMambaState {
    fn upload(g: &Gpu, conv: &[f32], ssm: &[f32]) -> Result<GpuMambaState, GpuError> {
        let s = &g.stream;
        let up = |v: &[f32], what: &str| {
            s.clone_htod(v)
                .map_err(|e| GpuError::Driver(format!("mamba state upload ({what}): {e}")))
        };
        Ok(GpuMambaState {
            conv: up(conv, "conv window")?,
            ssm: up(ssm, "ssm state")?,
            conv_len: conv.len(),
            ssm_len: ssm.len(),
            stream: s.clone(),
        })
    }
}

impl ResidentMamba for GpuMambaState {
    fn download(&self) -> Result<(Vec<f32>, Vec<f32>), ModelError> {
        let down = |v: &cudarc::driver::CudaSlice<f32>, what: &str| {
            self.stream
                .clone_dtoh(v)
                .map_err(|e| op_err("mamba state download", format!("{what}: {e}")))
        };
        Ok((
            down(&self.conv, "conv window")?,
            down(&self.ssm, "ssm state")?,
        ))
    }
    fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
        self
    }
}

/// The model's calls into the reused op kernels: the model's operands as the ops' TensorMaps
/// and back.
pub(crate) trait Reused: OpExec {
    fn versions(&self) -> Versions;

    /// A decode step that bypasses the op runner (GpuKernels: v10 on the raw f32 state, see
    /// its impl); `None` runs the op.
    #[allow(clippy::too_many_arguments)]
    fn ssu_decode_direct(
        &self,
        _dims: SsmDims,
        _state: &mut [f32],
        _p: &SsmParams<'_>,
        _x: &[f32],
        _dt: &[f32],
        _b: &[f32],
        _c: &[f32],
    ) -> Result<Option<Vec<f32>>, GpuError> {
        Ok(None)
    }

    /// Runs `name` (`version`) on `inputs` with `sets`.
    fn run_op(
        &self,
        name: &str,
        version: &str,
        inputs: &TensorMap,
        sets: &[(&str, String)],
    ) -> Result<TensorMap, GpuError> {
        let sets: Vec<(String, String)> = sets
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        self.exec(name, version, inputs, &sets)
    }

    #[allow(clippy::too_many_arguments)]
    fn conv_prefill(
        &self,
        x: &[f32],
        t: usize,
        dim: usize,
        weight: &[f32],
        bias: Option<&[f32]>,
        k: usize,
        init: Option<&[f32]>,
    ) -> Result<(Vec<f32>, Vec<f32>), GpuError> {
        const OP: &str = "causal_conv1d_fn";
        if k == 0 {
            return Err(bad(OP, "conv kernel width is 0".into()));
        }
        tensor(OP, "x", &[t, dim], x)?;
        let mut m = TensorMap::new();
        m.insert(
            "x".into(),
            Tensor::from_f32(&[1, dim, t], to_channel_major(x, t, dim)),
        );
        m.insert("weight".into(), tensor(OP, "weight", &[dim, k], weight)?);
        if let Some(b) = bias {
            m.insert("bias".into(), tensor(OP, "bias", &[dim], b)?);
        }
        if let Some(s) = init {
            m.insert(
                "initial_states".into(),
                tensor(OP, "initial_states", &[1, dim, k - 1], s)?,
            );
        }
        let mut o = self.run_op(
            OP,
            self.versions().conv_fn,
            &m,
            &[("activation", "silu".into())],
        )?;
        let y = out_f32(&mut o, OP, "out")?;
        if y.len() != t * dim {
            return Err(GpuError::Driver(format!(
                "{OP}: out has {} values",
                y.len()
            )));
        }
        Ok((
            to_token_major(&y, t, dim),
            out_f32(&mut o, OP, "final_states")?,
        ))
    }

    #[allow(clippy::too_many_arguments)]
    fn conv_update(
        &self,
        x: &[f32],
        t: usize,
        dim: usize,
        state: &mut [f32],
        weight: &[f32],
        bias: Option<&[f32]>,
        k: usize,
    ) -> Result<(Vec<f32>, Vec<f32>), GpuError> {
        const OP: &str = "causal_conv1d_update";
        if k == 0 {
            return Err(bad(OP, "conv kernel width is 0".into()));
        }
        tensor(OP, "x", &[t, dim], x)?;
        let mut m = TensorMap::new();
        m.insert(
            "x".into(),
            Tensor::from_f32(&[1, dim, t], to_channel_major(x, t, dim)),
        );
        m.insert(
            "conv_state".into(),
            tensor(OP, "conv_state", &[1, dim, k - 1], state)?,
        );
        m.insert("weight".into(), tensor(OP, "weight", &[dim, k], weight)?);
        if let Some(b) = bias {
            m.insert("bias".into(), tensor(OP, "bias", &[dim], b)?);
        }
        let mut o = self.run_op(OP, "v1", &m, &[("activation", "silu".into())])?;
        let y = out_f32(&mut o, OP, "out")?;
        let st = out_f32(&mut o, OP, "conv_state")?;
        if y.len() != t * dim || st.len() != state.len() {
            return Err(GpuError::Driver(format!(
                "{OP}: out has {} values, conv_state {}",
                y.len(),
                st.len()
            )));
        }
        state.copy_from_slice(&st);
        Ok((
            to_token_major(&y, t, dim),
            out_f32(&mut o, OP, "intermediate_conv_window")?,
        ))
    }

    fn ssd(&self, a: &SsdArgs<'_>, chunk: usize) -> Result<SsdOutput, GpuError> {
        const OP: &str = "ssd_chunk_scan";
        let d = a.dims;
        let (b, l, h, p, g, n) = (d.batch, d.seqlen, d.nheads, d.headdim, d.ngroups, d.dstate);
        let mut m = TensorMap::new();
        m.insert("x".into(), tensor(OP, "x", &[b, l, h, p], a.x)?);
        m.insert("dt".into(), tensor(OP, "dt", &[b, l, h], a.dt)?);
        m.insert("A".into(), tensor(OP, "A", &[h], a.a)?);
        m.insert("B".into(), tensor(OP, "B", &[b, l, g, n], a.b)?);
        m.insert("C".into(), tensor(OP, "C", &[b, l, g, n], a.c)?);
        if let Some(v) = a.d {
            m.insert("D".into(), tensor(OP, "D", &[h, p], v)?);
        }
        if let Some(v) = a.z {
            m.insert("z".into(), tensor(OP, "z", &[b, l, h, p], v)?);
        }
        if let Some(v) = a.dt_bias {
            m.insert("dt_bias".into(), tensor(OP, "dt_bias", &[h], v)?);
        }
        if let Some(v) = a.initial_states {
            m.insert(
                "initial_states".into(),
                tensor(OP, "initial_states", &[b, h, p, n], v)?,
            );
        }
        if let Some(v) = a.seq_idx {
            if v.len() != b * l {
                return Err(bad(
                    OP,
                    format!("seq_idx has {} values, expected {b} * {l}", v.len()),
                ));
            }
            m.insert("seq_idx".into(), Tensor::from_i64(&[b, l], v.to_vec()));
        }
        let softplus = a.dt_cfg.transform == DtTransform::Softplus;
        let mut o = self.run_op(
            OP,
            self.versions().ssd,
            &m,
            &[
                ("chunk_size", chunk.to_string()),
                ("dt_softplus", softplus.to_string()),
                ("dt_min", a.dt_cfg.dt_min.to_string()),
                ("dt_max", a.dt_cfg.dt_max.to_string()),
            ],
        )?;
        Ok(SsdOutput {
            y: out_f32(&mut o, OP, "y")?,
            final_states: out_f32(&mut o, OP, "final_states")?,
        })
    }

    /// One `selective_state_update` launch (batch 1, f32 state updated in place).
    #[allow(clippy::too_many_arguments)]
    fn ssu_one(
        &self,
        dims: SsmDims,
        state: &mut [f32],
        p: &SsmParams<'_>,
        x: &[f32],
        dt: &[f32],
        b: &[f32],
        c: &[f32],
    ) -> Result<Vec<f32>, GpuError> {
        const OP: &str = "selective_state_update";
        if let Some(y) = self.ssu_decode_direct(dims, state, p, x, dt, b, c)? {
            return Ok(y);
        }
        let rows = SsmRows { x, dt, b, c };
        let m = ssm_inputs(OP, dims, state, &[1], p, &rows)?;
        let mut o = self.run_op(
            OP,
            self.versions().ssu,
            &m,
            &[("dt_softplus", "true".into())],
        )?;
        let st = out_f32(&mut o, OP, "state")?;
        if st.len() != state.len() {
            return Err(GpuError::Driver(format!(
                "{OP}: state has {} values",
                st.len()
            )));
        }
        state.copy_from_slice(&st);
        out_f32(&mut o, OP, "out")
    }

    /// MTP verification in one multi-token launch: `t` steps from `state` (f32, chained from
    /// the unrounded state, `state` itself kept), returning (out, every intermediate state) as
    /// [`reference::model::kernels::ssu_verify`] does.
    fn ssu_verify_mt(
        &self,
        version: &str,
        dims: SsmDims,
        state: &[f32],
        t: usize,
        p: &SsmParams<'_>,
        r: &SsmRows<'_>,
    ) -> Result<(Vec<f32>, Vec<f32>), GpuError> {
        const OP: &str = "selective_state_update_multi_token";
        let SsmDims {
            nheads: h,
            headdim: hd,
            ..
        } = dims;
        let m = ssm_inputs(OP, dims, state, &[1, t], p, r)?;
        let mut o = self.run_op(
            OP,
            version,
            &m,
            &[
                ("dt_softplus", "true".into()),
                ("disable_state_update", "true".into()),
                ("chain_from", "unrounded_state".into()),
            ],
        )?;
        let out = out_f32(&mut o, OP, "out")?;
        let inter = out_f32(&mut o, OP, "intermediate_states")?;
        if out.len() != t * h * hd || inter.len() != t * state.len() {
            return Err(GpuError::Driver(format!(
                "{OP}: out has {} values (want {}), intermediate_states {} (want {})",
                out.len(),
                t * h * hd,
                inter.len(),
                t * state.len()
            )));
        }
        Ok((out, inter))
    }

    fn ssu_steps(
        &self,
        dims: SsmDims,
        state: &[f32],
        t: usize,
        p: &SsmParams<'_>,
        r: &SsmRows<'_>,
    ) -> Result<SsuRun, GpuError> {
        const OP: &str = "selective_state_update";
        let (xh, gn, h) = (
            dims.nheads * dims.headdim,
            dims.ngroups * dims.dstate,
            dims.nheads,
        );
        if r.x.len() != t * xh || r.dt.len() != t * h || r.b.len() != t * gn || r.c.len() != t * gn
        {
            return Err(bad(
                OP,
                format!(
                    "rows of {t} tokens: x {} (want {}), dt {} (want {}), B {} / C {} (want {})",
                    r.x.len(),
                    t * xh,
                    r.dt.len(),
                    t * h,
                    r.b.len(),
                    r.c.len(),
                    t * gn
                ),
            ));
        }
        let mut s = state.to_vec();
        let mut out = Vec::with_capacity(t * xh);
        let mut inter = Vec::with_capacity(t * s.len());
        for i in 0..t {
            let y = self.ssu_one(
                dims,
                &mut s,
                p,
                &r.x[i * xh..(i + 1) * xh],
                &r.dt[i * h..(i + 1) * h],
                &r.b[i * gn..(i + 1) * gn],
                &r.c[i * gn..(i + 1) * gn],
            )?;
            out.extend(y);
            inter.extend_from_slice(&s);
        }
        Ok(SsuRun { out, states: inter })
    }

    fn router(
        &self,
        logits: &[f32],
        bias: &[f32],
        tokens: usize,
        c: &RouterConfig,
    ) -> Result<Vec<Route>, GpuError> {
        const OP: &str = "noaux_tc_router";
        let e = bias.len();
        let mut m = TensorMap::new();
        m.insert("logits".into(), tensor(OP, "logits", &[tokens, e], logits)?);
        m.insert("bias".into(), tensor(OP, "bias", &[e], bias)?);
        let norm = match c.norm_mode {
            NormMode::Fp64 => "fp64",
            NormMode::Fp32DivideThenMultiply => "fp32_divide_then_multiply",
            NormMode::Fp32NoEps => "fp32_no_eps",
        };
        let sig = match c.sigmoid {
            SigmoidMode::Tanh => "tanh",
            SigmoidMode::Exp => "exp",
            SigmoidMode::TanhF32 => "tanh_f32",
        };
        let mask = match c.group_mask {
            GroupMask::NegInf => "neg_inf",
            GroupMask::Zero => "zero",
        };
        let mut o = self.run_op(
            OP,
            self.versions().router,
            &m,
            &[
                ("top_k", c.top_k.to_string()),
                ("n_group", c.n_group.to_string()),
                ("topk_group", c.topk_group.to_string()),
                ("routed_scaling_factor", c.routed_scaling_factor.to_string()),
                ("norm_topk_prob", c.norm_topk_prob.to_string()),
                ("norm_mode", norm.into()),
                ("sigmoid", sig.into()),
                ("group_mask", mask.into()),
            ],
        )?;
        let idx = o
            .get("topk_indices")
            .and_then(|t| t.to_i64_vec())
            .ok_or_else(|| GpuError::Driver(format!("{OP}: no integer 'topk_indices'")))?;
        let w = out_f32(&mut o, OP, "topk_weights")?;
        let k = c.top_k;
        if idx.len() != tokens * k || w.len() != tokens * k {
            return Err(GpuError::Driver(format!(
                "{OP}: {} indices / {} weights for {tokens} tokens x top_k {k}",
                idx.len(),
                w.len()
            )));
        }
        let mut routes = Vec::with_capacity(tokens);
        for t in 0..tokens {
            let mut ids = Vec::with_capacity(k);
            for &i in &idx[t * k..(t + 1) * k] {
                ids.push(
                    usize::try_from(i).map_err(|_| {
                        GpuError::Driver(format!("{OP}: token {t} got expert id {i}"))
                    })?,
                );
            }
            routes.push((ids, w[t * k..(t + 1) * k].to_vec()));
        }
        Ok(routes)
    }
}

impl ModelKernels for GpuKernels {
    fn name(&self) -> &str {
        "gpu"
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
        let (n, k) = (w.rows(), w.cols());
        let run = || {
            if x.len() != t * k {
                return Err(bad(
                    "linear",
                    format!("x has {} values, expected t * in = {t} * {k}", x.len()),
                ));
            }
            if t == 0 || n == 0 {
                return Ok(vec![0.0; t * n]);
            }
            let wd = self.weight_mat(w)?;
            let bd = bias.map(|b| self.weight_vec(b)).transpose()?;
            self.gemm_dev(x, t, &wd, n, k, bd.as_deref())
        };
        run().map_err(merr("linear"))
    }
    fn rmsnorm(&self, x: &[f32], w: &[f32], eps: f32) -> Result<Vec<f32>, ModelError> {
        let run = || {
            if w.is_empty() {
                return Err(bad("model_rmsnorm", "the weight is empty".into()));
            }
            let wd = self.weight_vec(w)?;
            self.rmsnorm_dev(x, &wd, w.len(), eps)
        };
        run().map_err(merr("rmsnorm"))
    }
    fn gated_rmsnorm(
        &self,
        x: &[f32],
        z: &[f32],
        w: &[f32],
        group: usize,
        eps: f32,
    ) -> Result<Vec<f32>, ModelError> {
        let run = || {
            if w.is_empty() {
                return Err(bad("model_gated_rmsnorm", "the weight is empty".into()));
            }
            let wd = self.weight_vec(w)?;
            self.gated_rmsnorm_dev(x, z, &wd, w.len(), group, eps)
        };
        run().map_err(merr("gated_rmsnorm"))
    }
    fn relu2(&self, x: &[f32]) -> Result<Vec<f32>, ModelError> {
        self.relu2_vec(x).map_err(merr("relu2"))
    }
    /// Routed experts on the device: `moe_permute` on the host, then per expert the gathered
    /// rows uploaded once and up GEMM -> ReLU² -> down GEMM queued back to back on the device,
    /// each down GEMM writing its rows of one expert-ordered buffer; one download, then
    /// `moe_finalize` on the host. The numbers of [`routed_experts_with`] over this backend's
    /// `linear` / `relu2` (the same kernels, in the same order), without a host round trip per
    /// expert and op.
    fn routed_experts(
        &self,
        lat: &[f32],
        t: usize,
        topk_indices: &[i64],
        topk_weights: &[f32],
        k: usize,
        experts: &[(Mat, Mat)],
    ) -> Result<Vec<f32>, ModelError> {
        use reference::ops::moe_finalize::finalize;
        use reference::ops::moe_permute::permute;
        let lw = check_routed_experts(lat, t, topk_indices, topk_weights, k, experts)?;
        if t == 0 || lw == 0 {
            return routed_experts_with(self, lat, t, topk_indices, topk_weights, k, experts);
        }
        let perm = permute(topk_indices, k, experts.len()).map_err(|e| op_err("moe_permute", e))?;
        let rows_total = perm.token.len();
        // One upload of every routed row in expert order, one hidden buffer pair for all the
        // experts (each expert's slice at its offset), then per expert only its three
        // launches (up GEMM, ReLU², down GEMM) queued back to back: session 6 measured
        // 0.93 ms per layer at T = 1 with an upload and two allocations per expert.
        let run = || -> Result<Vec<f32>, GpuError> {
            let mut xs = Vec::with_capacity(rows_total * lw);
            for &tok in &perm.token {
                xs.extend_from_slice(&lat[tok * lw..(tok + 1) * lw]);
            }
            let mut h_off = Vec::with_capacity(experts.len() + 1);
            h_off.push(0usize);
            for (e, (up, _)) in experts.iter().enumerate() {
                let m = perm.offsets[e + 1] - perm.offsets[e];
                h_off.push(h_off[e] + m * up.rows());
            }
            let h_total = h_off[experts.len()];
            let st = &self.g.stream;
            let xd = self.up_owned(xs)?;
            let h = self.out(h_total)?;
            let h2 = self.out(h_total)?;
            let out = self.out(rows_total * lw)?;
            let (px, ph, ph2, po) = (xd.ptr(st), h.ptr(st), h2.ptr(st), out.ptr(st));
            // Every weight a queued kernel reads stays alive until the download.
            let mut keep_w: Vec<Arc<DevTensor>> = Vec::new();
            for (e, (up, down)) in experts.iter().enumerate() {
                let rows = perm.offsets[e]..perm.offsets[e + 1];
                if rows.is_empty() {
                    continue;
                }
                let m = rows.len();
                let inter = up.rows();
                let (wu, wd) = (self.weight_mat(up)?, self.weight_mat(down)?);
                let xe = px + (rows.start * lw * 4) as u64;
                let (he, h2e) = (ph + (h_off[e] * 4) as u64, ph2 + (h_off[e] * 4) as u64);
                self.launch_gemm(xe, m, &wu, inter, lw, None, he)?;
                self.launch_relu2(he, h2e, m * inter)?;
                let dst = po + (rows.start * lw * 4) as u64;
                self.launch_gemm(h2e, m, &wd, lw, inter, None, dst)?;
                keep_w.extend([wu, wd]);
            }
            let v = self.down(&out, rows_total * lw, "routed experts out")?;
            drop((xd, h, h2, keep_w));
            Ok(v)
        };
        let expert_out = run().map_err(merr("routed experts"))?;
        Ok(finalize(&expert_out, lw, topk_weights, &perm.inverse, k))
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
        self.conv_prefill(x, t, dim, weight, bias, k, init)
            .map_err(merr("causal_conv1d_fn"))
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
        self.conv_update(x, t, dim, state, weight, bias, k)
            .map_err(merr("causal_conv1d_update"))
    }
    fn mamba_decode(
        &self,
        st: &mut LayerState,
        m: &MambaStep<'_>,
        xbc: &[f32],
        dt: &[f32],
    ) -> Result<Vec<f32>, ModelError> {
        if let Some(y) = self.mamba_decode_resident(st, m, xbc, dt)? {
            return Ok(y);
        }
        mamba_decode_default(self, st, m, xbc, dt)
    }
    fn ssd_chunk_scan(&self, args: &SsdArgs<'_>, chunk: usize) -> Result<SsdOutput, ModelError> {
        self.ssd(args, chunk).map_err(merr("ssd_chunk_scan"))
    }
    fn ssu_step(
        &self,
        dims: SsmDims,
        state: &mut [f32],
        p: &SsmParams<'_>,
        r: &SsmRows<'_>,
    ) -> Result<Vec<f32>, ModelError> {
        // One token: the state is updated in place (ssu_one writes it only after the op
        // succeeded), with no copy of it before and after as a run of steps makes.
        self.ssu_one(dims, state, p, r.x, r.dt, r.b, r.c)
            .map_err(merr("selective_state_update"))
    }
    fn ssu_verify(
        &self,
        dims: SsmDims,
        state: &mut [f32],
        t: usize,
        p: &SsmParams<'_>,
        r: &SsmRows<'_>,
    ) -> Result<(Vec<f32>, Vec<f32>), ModelError> {
        // disable_state_update: `state` is left untouched.
        if let Some(v) = self.ssu_verify_kernel {
            return self
                .ssu_verify_mt(v, dims, state, t, p, r)
                .map_err(merr("selective_state_update_multi_token (verify)"));
        }
        let run = self
            .ssu_steps(dims, state, t, p, r)
            .map_err(merr("selective_state_update (multi-token verify)"))?;
        Ok((run.out, run.states))
    }
    fn route(
        &self,
        logits: &[f32],
        bias: &[f32],
        tokens: usize,
        cfg: &RouterConfig,
    ) -> Result<Vec<Route>, ModelError> {
        self.router(logits, bias, tokens, cfg)
            .map_err(merr("noaux_tc_router"))
    }
    fn attention(
        &self,
        q: &[f32],
        keys: &[f32],
        vals: &[f32],
        p0: usize,
        g: AttnGeometry,
    ) -> Result<Vec<f32>, ModelError> {
        self.attention_f32(q, keys, vals, p0, g)
            .map_err(merr("attention"))
    }
}

#[cfg(test)]
mod tests {
    //! The TensorMaps built for the reused ops, run through the CPU reference's op table
    //! (same input names, shapes and params as the GPU ops validate): the bridge must give
    //! what the model's CPU adapters give. Needs no GPU.
    use super::*;
    use reference::model::kernels::{router_config, CpuKernels};
    use reference::ops::ssd_chunk_scan::{DtConfig, SsdDims};

    /// The environment knobs: a known value is taken, an unknown one and an unset variable
    /// give the default; the defaults are among the known values; xs4r2 kernels compute two
    /// columns a warp, the relu form included.
    #[test]
    fn env_choices_and_defaults() {
        const KNOWN: &[&str] = &["a", "b"];
        let var = "DUET_TEST_CHOICE_FROM_ENV_7f3a";
        std::env::remove_var(var);
        assert_eq!(choice_from_env(var, KNOWN, "a"), "a");
        std::env::set_var(var, "b");
        assert_eq!(choice_from_env(var, KNOWN, "a"), "b");
        std::env::set_var(var, "c");
        assert_eq!(choice_from_env(var, KNOWN, "a"), "a");
        std::env::remove_var(var);
        assert!(SLOT_KERNELS.contains(&DEFAULT_SLOT_KERNEL));
        assert!(SLOT_MMA_UPS.contains(&SLOT_MMA_UP) && SLOT_MMA_DOWNS.contains(&SLOT_MMA_DOWN));
        // Every mma kernel the engine may pick is a bench variant (its unfused down form too);
        // the up GEMVs take one warp a column group.
        for op in SLOT_MMA_UPS.iter().chain(SLOT_MMA_DOWNS) {
            assert!(SLOT_VARIANTS.iter().any(|v| v.0 == *op), "{op}");
        }
        for op in SLOT_MMA_UPS {
            assert_eq!(slots_mma_split(op), 1, "{op}");
        }
        for op in SLOT_MMA_DOWNS {
            let plain = slot_mma_plain(op);
            assert_eq!(format!("{plain}_relu"), *op);
        }
        assert_eq!(
            slots_mma_warps("model_gemv1_slots_nvfp4w_mma2w8_relu_mix"),
            8
        );
        assert_eq!(
            slots_mma_split("model_gemv1_slots_nvfp4w_mma2w8_relu_mix"),
            2
        );
        assert_eq!(slots_mma_warps("model_gemv1_slots_nvfp4w_mma1d4_relu"), 4);
        assert_eq!(slots_mma_split("model_gemv1_slots_nvfp4w_mma4_relu"), 4);
        assert_eq!(SLOT_MMA_MIXES.len(), SLOT_MMA_DOWNS.len());
        for (d, m) in SLOT_MMA_DOWNS.iter().zip(SLOT_MMA_MIXES) {
            assert_eq!(format!("{d}_mix"), *m);
        }
        assert_eq!(slotm_smem(2688), 22 * 768 + 512);
        assert!(DECODE_SSUS.contains(&DECODE_SSU));
        // v12 where dstate is 128 and the heads fit one wave; v10 elsewhere; others as asked.
        assert_eq!(decode_ssu_kernel("v12", 128, 128, 132), ("v12", 512));
        assert_eq!(decode_ssu_kernel("v12", 132, 128, 132), ("v12", 512));
        assert_eq!(decode_ssu_kernel("v12", 133, 128, 132), ("v10", 128));
        assert_eq!(decode_ssu_kernel("v12", 8, 16, 132), ("v10", 128));
        assert_eq!(decode_ssu_kernel("v12", 8, 64, 132), ("v10", 128));
        assert_eq!(decode_ssu_kernel("v10", 128, 128, 132), ("v10", 128));
        assert_eq!(decode_ssu_kernel("v6", 128, 128, 132), ("v6", 128));
        assert_eq!(slots_xs_columns("model_gemv1_slots_nvfp4w_xs4r2"), 2);
        assert_eq!(slots_xs_columns("model_gemv1_slots_nvfp4w_xs4r2_relu"), 2);
        assert_eq!(
            slots_xs_columns("model_gemv1_slots_nvfp4w_xs3_relu"),
            GEMV1_R_NV
        );
    }

    /// `__byte_perm(x, y, s)` (selector bit 3 of each nibble unused here).
    fn byte_perm(x: u32, y: u32, s: u32) -> u32 {
        let b = (x as u64) | ((y as u64) << 32);
        (0..4).fold(0u32, |r, n| {
            let sel = (s >> (4 * n)) & 7;
            r | ((((b >> (8 * sel)) & 0xFF) as u32) << (8 * n))
        })
    }

    /// model_ops.cu's slotm_decode8: the eight E2M1 codes of q as four f16x2 of value *
    /// 2^-14, pairs (0, 4), (1, 5), (2, 6), (3, 7).
    fn slotm_decode8(q: u32) -> [u32; 4] {
        let sel = |a: u32, b: u32| (a & 0x0E0E_0E0E) | (b & !0x0E0E_0E0E);
        let sg = q & 0x8888_8888;
        let (ev, od) = (sel(q << 1, sg << 4), sel(q >> 3, sg));
        [
            byte_perm(ev, 0, 0x2404),
            byte_perm(od, 0, 0x2404),
            byte_perm(ev, 0, 0x3414),
            byte_perm(od, 0, 0x3414),
        ]
    }

    fn e2m1(code: u32) -> f64 {
        let v = reference::num::e2m1::E2M1_VALUES[(code & 7) as usize] as f64;
        if code & 8 != 0 {
            -v
        } else {
            v
        }
    }

    fn f16v(bits: u32) -> f64 {
        reference::num::f16::f16_bits_to_f32(bits as u16) as f64
    }

    /// The tensor-core slot GEMV's arithmetic (model_gemv1_slots_nvfp4w_mma*), emulated: every
    /// pair of E2M1 codes decodes to the f16 of value * 2^-14 in the lanes the mma fragments
    /// expect; value * 2^-14 times every finite E4M3 scale is an f16 exactly (the kernel's
    /// f16x2 multiply rounds nothing); and x * 2^ex split into three f16 terms (max |x * 2^ex|
    /// < 2^14) carries x to within 2^-30 of max |x|, so the products and sums are those of x.
    #[test]
    fn slot_mma_decode_scale_and_split_are_exact() {
        let mut st = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = || {
            st ^= st << 13;
            st ^= st >> 7;
            st ^= st << 17;
            st
        };
        let mut words: Vec<u32> = (0..4096).map(|_| next() as u32).collect();
        // Every code in every nibble.
        words.extend((0..16u32).map(|c| c * 0x1111_1111));
        for &q in &words {
            let d = slotm_decode8(q);
            for (k, &h) in d.iter().enumerate() {
                for (half, nib) in [(h & 0xFFFF, k), (h >> 16, k + 4)] {
                    let code = (q >> (4 * nib)) & 0xF;
                    let want = e2m1(code) * 2f64.powi(-14);
                    assert_eq!(f16v(half), want, "q {q:#010x} pair {k} nibble {nib}");
                    // -0 for code 8: the sign survives (the product is -0 or 0 alike).
                    if code == 8 {
                        assert_eq!(half, 0x8000);
                    }
                }
            }
        }
        for b in 0u8..=255 {
            if b & 0x7F == 0x7F {
                continue; // NaN
            }
            let sf = reference::num::e4m3::e4m3_bits_to_f32(b) as f64;
            let sf16 = reference::num::f16::f32_to_f16_bits(sf as f32);
            assert_eq!(f16v(sf16 as u32), sf, "scale byte {b:#04x} as an f16");
            for code in 0..16u32 {
                let p = e2m1(code) * 2f64.powi(-14) * sf;
                let r = f16v(reference::num::f16::f32_to_f16_bits(p as f32) as u32);
                assert_eq!(r, p, "code {code} scale {b:#04x}: {p:e} is not an f16");
            }
        }
        // The x split (staging): three f16 terms of x * 2^ex.
        let xs: Vec<f32> = (0..2000)
            .map(|i| {
                let u = (next() >> 11) as f64 / (1u64 << 53) as f64;
                let mag = 10f64.powf(-8.0 + 12.0 * u);
                (if i % 2 == 0 { mag } else { -mag } * (1.0 + u)) as f32
            })
            .collect();
        let m = xs.iter().fold(0f32, |a, v| a.max(v.abs()));
        let e = ((m.to_bits() >> 23) & 0xFF) as i32 - 126;
        let ex = (14 - e).clamp(-100, 100);
        let up = f32::from_bits(((127 + ex) as u32) << 23);
        for &x in &xs {
            let a = x * up;
            let hi = reference::num::f16::f32_to_f16_bits(a);
            let r1 = a - f16v(hi as u32) as f32;
            let mid = reference::num::f16::f32_to_f16_bits(r1);
            let r2 = r1 - f16v(mid as u32) as f32;
            let lo = reference::num::f16::f32_to_f16_bits(r2);
            assert!(f16v(hi as u32).abs() < 65504.0);
            let sum = f16v(hi as u32) + f16v(mid as u32) + f16v(lo as u32);
            let err = (sum - a as f64).abs() / (m as f64 * up as f64);
            assert!(err < 2f64.powi(-30), "x {x:e}: split off by {err:e} of max");
        }
    }

    /// The pipe slot GEMV's shared memory (model_ops.cu: S stages of a 32 x 64-chunk slice
    /// of codes plus a group's scale bytes padded to 16), its kernel names' stages, and which
    /// K the default takes.
    #[test]
    fn slot_pipe_shapes() {
        // A stage: 16 KB of codes and 4 KB of x; a group: its scale bytes (K = 1024: 64 a
        // row, 2048 a group; 2688: 168 a row, 5376 a group) and 2 KB of pairs.
        assert_eq!(slotp_smem(3, 1024), 3 * (16384 + 4096 + 2048 + 2048));
        assert_eq!(slotp_smem(3, 2688), 3 * (16384 + 4096 + 5376 + 2048));
        // K = 32: 32 x 2 = 64 scale bytes a group (a multiple of 16 already).
        assert_eq!(slotp_smem(2, 32), 2 * (16384 + 4096 + 64 + 2048));
        assert!(slotp_fits(1024) && slotp_fits(2688) && slotp_fits(32));
        assert!(!slotp_fits(0) && !slotp_fits(48) && !slotp_fits(2680));
        // The scale ring outgrows the block's shared memory past K ~ 25k at 3 stages.
        assert!(slotp_fits(24 * 1024) && !slotp_fits(28 * 1024));
        // x of the _xs kernels: 2 KB per 32 chunks (K = 2688: 168 chunks, 6 x 2 KB).
        assert_eq!(slots_xs_smem(1024), 2 * 2048 + 2048);
        assert_eq!(slots_xs_smem(2688), 6 * 2048 + 2048);
        assert_eq!(slots_xs_smem(32), 2048 + 2048);
        assert_eq!(
            slotp_stages("model_gemv1_slots_nvfp4w_pipe"),
            Some(SLOTP_STAGES)
        );
        assert_eq!(
            slotp_stages("model_gemv1_slots_nvfp4w_pipe_relu"),
            Some(SLOTP_STAGES)
        );
        assert_eq!(slotp_stages("model_gemv1_slots_nvfp4w_pipe2"), Some(2));
        assert_eq!(slotp_stages("model_gemv1_slots_nvfp4w_pipe4"), Some(4));
        assert_eq!(slotp_stages("model_gemv1_slots_nvfp4w"), None);
        assert_eq!(slotp_stages("model_gemv1_slots_nvfp4w_pipe9"), None);
        // Every pipe variant the bench times is one.
        let pipes = SLOT_VARIANTS
            .iter()
            .filter(|v| v.0.contains("_pipe"))
            .count();
        assert_eq!(pipes, 4);
        assert!(SLOT_VARIANTS
            .iter()
            .filter(|v| v.0.contains("_pipe"))
            .all(|v| slotp_stages(v.0).is_some()));
        // The _xs forms' columns a warp match the table's.
        for v in SLOT_VARIANTS.iter().filter(|v| slots_xs_op(v.0)) {
            assert_eq!(slots_xs_columns(v.0), v.1, "{}", v.0);
        }
    }

    struct RefExec;
    impl OpExec for RefExec {
        fn exec(
            &self,
            op: &str,
            _version: &str,
            inputs: &TensorMap,
            sets: &[(String, String)],
        ) -> Result<TensorMap, GpuError> {
            Ok(reference::ops::find(op)?.call(inputs, sets)?)
        }
    }
    impl Reused for RefExec {
        fn versions(&self) -> Versions {
            Versions {
                conv_fn: "v1",
                ssd: "v1",
                ssu: "auto",
                router: "auto",
            }
        }
    }

    fn vals(seed: u64, n: usize, scale: f32) -> Vec<f32> {
        let mut s = seed | 1;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                let u = ((s >> 40) as f32) / (1u64 << 24) as f32;
                let m = 0.05 + 0.95 * u;
                scale * if s & 2 == 0 { m } else { -m }
            })
            .collect()
    }

    /// max |a - b|; a NaN on either side (not bit-equal) counts as infinite (f32::max would
    /// drop it).
    fn max_diff(a: &[f32], b: &[f32]) -> f32 {
        assert_eq!(a.len(), b.len());
        a.iter().zip(b).fold(0f32, |m, (x, y)| {
            let d = (x - y).abs();
            if x.to_bits() == y.to_bits() {
                m
            } else if d.is_nan() {
                f32::INFINITY
            } else {
                m.max(d)
            }
        })
    }

    /// The NVFP4 device buffer of a lazy matrix, packed by row blocks on every core, is the
    /// whole matrix's `pack`, and its weights rebuild exactly what `Mat::LazyAs` in NVFP4 gives
    /// (the values the f32 storage holds).
    #[test]
    fn nvfp4_packing_by_row_blocks_is_the_whole_matrix() {
        use crate::nvfp4_store::{pack, value_at};
        use reference::ops::nvfp4_quantize::{quantize, Nvfp4Mode, SfLayout};
        for (rows, cols, seed) in [(37usize, 64usize, 3u64), (1, 16, 4), (300, 48, 5)] {
            let raw = Mat::Lazy {
                rows,
                cols,
                seed,
                init: Init::Linear,
            };
            let stored = raw.lazy_as(ExpertFormat::Nvfp4).expect("lazy_as");
            let Mat::LazyAs { global_scale, .. } = stored else {
                panic!("not LazyAs");
            };
            let got = pack_nvfp4_rows(&raw, global_scale).expect("exact");
            let q = quantize(
                &raw.values(),
                rows,
                cols,
                Some(global_scale),
                Nvfp4Mode::Kernel,
                SfLayout::Linear,
            )
            .expect("quantize");
            assert_eq!(Some(&got), pack(&q).as_ref(), "{rows} x {cols}");
            let want = stored.values();
            for (i, w) in want.iter().enumerate() {
                assert_eq!(
                    value_at(&got, rows, cols, i).to_bits(),
                    w.to_bits(),
                    "element {i}"
                );
            }
        }
        // Columns not a multiple of 16: no NVFP4 storage.
        let odd = Mat::Lazy {
            rows: 4,
            cols: 20,
            seed: 1,
            init: Init::Linear,
        };
        assert!(pack_nvfp4_rows(&odd, 100.0).is_none());
    }

    #[test]
    fn lazy_generation_and_fingerprints() {
        // Parallel generation = the sequential values (plain lazy and NVFP4-stored).
        let lazy = Mat::Lazy {
            rows: 301,
            cols: 256,
            seed: 4,
            init: Init::Linear,
        };
        assert_eq!(generate(&lazy), lazy.values().into_owned());
        let q = lazy.lazy_as(ExpertFormat::Nvfp4).unwrap();
        assert_eq!(generate(&q), q.values().into_owned());
        // The fingerprint sees the length, the first and last elements and changes between
        // sampled positions.
        let v = vals(9, 1000, 1.0);
        let h = sample_hash(&v);
        for i in [0usize, 999, 999 * 10 / 63] {
            let mut w = v.clone();
            w[i] += 0.25;
            assert_ne!(sample_hash(&w), h, "element {i}");
        }
        assert_ne!(sample_hash(&v[..999]), h);
        assert_eq!(sample_hash(&v.clone()), h);
        assert_ne!(sample_hash(&[]), sample_hash(&[0.0]));
        // Lazy keys tell formats apart.
        assert_ne!(
            format_key(ExpertFormat::Bf16, 1.0),
            format_key(ExpertFormat::Nvfp4, 1.0)
        );
    }

    #[test]
    fn conv_bridge_equals_the_cpu_adapters() {
        let (t, dim, k) = (7usize, 5usize, 4usize);
        let (x, w, b, init) = (
            vals(1, t * dim, 1.0),
            vals(2, dim * k, 0.5),
            vals(3, dim, 0.1),
            vals(4, dim * (k - 1), 1.0),
        );
        for i in [None, Some(&init[..])] {
            let want = CpuKernels
                .causal_conv1d(&x, t, dim, &w, Some(&b), k, i)
                .unwrap();
            let got = RefExec
                .conv_prefill(&x, t, dim, &w, Some(&b), k, i)
                .unwrap();
            assert_eq!(want, got);
        }
        let mut s0 = init.clone();
        let want = CpuKernels
            .causal_conv1d_step(&x[..3 * dim], 3, dim, &mut s0, &w, Some(&b), k)
            .unwrap();
        let mut s1 = init.clone();
        let got = RefExec
            .conv_update(&x[..3 * dim], 3, dim, &mut s1, &w, Some(&b), k)
            .unwrap();
        assert_eq!(want, got);
        assert_eq!(s0, s1);
        assert_ne!(s0, init, "the state moved");
        // A wrong size is an error, not a panic.
        assert!(RefExec
            .conv_prefill(&x[1..], t, dim, &w, None, k, None)
            .is_err());
    }

    #[test]
    fn gemv1_blocks_spread_small_products_and_keep_large_ones() {
        // The router gate (512 columns, 2 per warp): 256 warps, one per block.
        assert_eq!(gemv1_warps_per_block(512, GEMV1_R_F32), 1);
        assert_eq!(gemv1_warps_per_block(1024, GEMV1_R_BF16), 2);
        // Large products keep GEMV_WARPS warps per block.
        assert_eq!(gemv1_warps_per_block(4096, GEMV1_R_BF16), GEMV_WARPS);
        assert_eq!(gemv1_warps_per_block(131072, GEMV1_R_BF16), GEMV_WARPS);
        assert_eq!(gemv1_warps_per_block(1, GEMV1_R_NV), 1);
        // Every column is covered by the grid that follows.
        for n in [1usize, 7, 255, 256, 512, 1000, 5376, 18560] {
            let wb = gemv1_warps_per_block(n, GEMV1_R_BF16);
            let blocks = n.div_ceil((wb * GEMV1_R_BF16) as usize);
            assert!(blocks * (wb * GEMV1_R_BF16) as usize >= n, "n {n}");
            assert!((1..=GEMV_WARPS).contains(&wb));
        }
        assert!(add_rmsnorm_fits(4096) && !add_rmsnorm_fits(4097));
        // The split form: the router gate and the latent down projection, not the big ones
        // nor rows of under 2048.
        assert_eq!(gemv1_split(512, 4096), Some(4));
        assert_eq!(gemv1_split(1024, 4096), Some(4));
        // The Super experts stay in the one-warp form (the engine's slot GEMVs have no split).
        assert_eq!(gemv1_split(1024, 2688), None);
        assert_eq!(gemv1_split(2688, 1024), None);
        assert_eq!(gemv1_split(2000, 8192), Some(8));
        assert_eq!(gemv1_split(4096, 1024), None);
        assert_eq!(gemv1_split(18560, 4096), None);
        assert_eq!(gemv1_split(131072, 4096), None);
        assert_eq!(gemv1_split(64, 65536), Some(GEMV_WARPS));
    }

    #[test]
    fn direct_decode_params_equal_the_ops_own() {
        // The TensorMap the op path builds for a decode step, through the op's own validation
        // and parameter derivation, against the direct path's parameters.
        for (h, hd, n, ng) in [(4usize, 8usize, 16usize, 2usize), (128, 64, 128, 8)] {
            let dims = SsmDims {
                nheads: h,
                headdim: hd,
                ngroups: ng,
                dstate: n,
            };
            let state = vals(1, h * hd * n, 1.0);
            let (a, d, bias) = (vals(2, h, 1.0), vals(3, h, 1.0), vals(4, h, 0.1));
            let p = SsmParams {
                a: &a,
                d: &d,
                dt_bias: &bias,
            };
            let (x, dt, b, c) = (
                vals(5, h * hd, 1.0),
                vals(6, h, 1.0),
                vals(7, ng * n, 1.0),
                vals(8, ng * n, 1.0),
            );
            let rows = SsmRows {
                x: &x,
                dt: &dt,
                b: &b,
                c: &c,
            };
            let m = ssm_inputs("selective_state_update", dims, &state, &[1], &p, &rows).unwrap();
            let def = reference::ops::find("selective_state_update").unwrap();
            let prm = reference::op::Params::resolve(
                &def,
                &[("dt_softplus".to_string(), "true".to_string())],
            )
            .unwrap();
            let (_, own) = crate::ops::selective_state_update::prepare(&m, &prm).unwrap();
            let direct = crate::ops::selective_state_update::decode_params(h, hd, n, ng).unwrap();
            assert_eq!(own, direct, "h {h} hd {hd} n {n} ng {ng}");
        }
    }

    #[test]
    fn ssd_ssu_and_router_bridges_equal_the_cpu_adapters() {
        let (l, nh, hd, ng, ds) = (11usize, 4usize, 3usize, 2usize, 5usize);
        let x = vals(10, l * nh * hd, 1.0);
        let dt = vals(11, l * nh, 1.0);
        let a: Vec<f32> = vals(12, nh, 1.0).iter().map(|v| -v.abs() - 0.5).collect();
        let (bb, cc) = (vals(13, l * ng * ds, 1.0), vals(14, l * ng * ds, 1.0));
        let d = vals(15, nh * hd, 1.0);
        let dtb = vals(16, nh, 1.0);
        let init = vals(17, nh * hd * ds, 1.0);
        let args = SsdArgs {
            dims: SsdDims {
                batch: 1,
                seqlen: l,
                nheads: nh,
                headdim: hd,
                ngroups: ng,
                dstate: ds,
            },
            x: &x,
            dt: &dt,
            a: &a,
            b: &bb,
            c: &cc,
            d: Some(&d),
            z: None,
            dt_bias: Some(&dtb),
            initial_states: Some(&init),
            seq_idx: None,
            dt_cfg: DtConfig {
                transform: DtTransform::Softplus,
                dt_min: 0.0,
                dt_max: f32::INFINITY,
            },
        };
        let want = CpuKernels.ssd_chunk_scan(&args, 4).unwrap();
        let got = RefExec.ssd(&args, 4).unwrap();
        assert_eq!(want, got);

        let dims = SsmDims {
            nheads: nh,
            headdim: hd,
            ngroups: ng,
            dstate: ds,
        };
        let dh = vals(18, nh, 1.0);
        let p = SsmParams {
            a: &a,
            d: &dh,
            dt_bias: &dtb,
        };
        let t = 3;
        let rows = SsmRows {
            x: &x[..t * nh * hd],
            dt: &dt[..t * nh],
            b: &bb[..t * ng * ds],
            c: &cc[..t * ng * ds],
        };
        // One step.
        let one = SsmRows {
            x: &x[..nh * hd],
            dt: &dt[..nh],
            b: &bb[..ng * ds],
            c: &cc[..ng * ds],
        };
        let mut s0 = init.clone();
        let y0 = CpuKernels.ssu_step(dims, &mut s0, &p, &one).unwrap();
        // GpuKernels::ssu_step: ssu_one on the state in place.
        let mut s1 = init.clone();
        let y1 = RefExec
            .ssu_one(dims, &mut s1, &p, one.x, one.dt, one.b, one.c)
            .unwrap();
        assert_eq!(y0, y1);
        assert_eq!(s0, s1);
        assert_ne!(s1, init, "the state moved");
        // A wrong size is an error and leaves the state as it was.
        let mut s2 = init.clone();
        assert!(RefExec
            .ssu_one(dims, &mut s2, &p, &one.x[1..], one.dt, one.b, one.c)
            .is_err());
        assert_eq!(s2, init);
        // Verification: t single-token updates = the multi-token op (f32 state, chained from
        // the unrounded state), main state untouched.
        let mut sv = init.clone();
        let (yv, iv) = CpuKernels.ssu_verify(dims, &mut sv, t, &p, &rows).unwrap();
        assert_eq!(sv, init);
        let run = RefExec.ssu_steps(dims, &init, t, &p, &rows).unwrap();
        assert!(max_diff(&yv, &run.out) == 0.0, "verify out");
        assert!(max_diff(&iv, &run.states) == 0.0, "verify states");
        assert_eq!(run.states.len(), t * init.len());
        // The one-launch bridge (GpuKernels::ssu_verify_kernel): the multi-token op's TensorMap
        // gives the model's verification bit for bit.
        let (ym, im) = RefExec
            .ssu_verify_mt("v1", dims, &init, t, &p, &rows)
            .unwrap();
        assert!(max_diff(&yv, &ym) == 0.0, "multi-token bridge out");
        assert!(max_diff(&iv, &im) == 0.0, "multi-token bridge states");
        assert!(RefExec
            .ssu_verify_mt("v1", dims, &init[1..], t, &p, &rows)
            .is_err());

        let (tokens, e) = (6usize, 16usize);
        let logits = vals(20, tokens * e, 3.0);
        let bias = vals(21, e, 0.1);
        let rc = router_config(4, 1, 1, true, 2.5);
        let want = CpuKernels.route(&logits, &bias, tokens, &rc).unwrap();
        let got = RefExec.router(&logits, &bias, tokens, &rc).unwrap();
        assert_eq!(want, got);
    }
}
