//! The LatentMoE expert layer on the GPU (gpu/kernels/moe.cu): `moe_permute` (bit-exact),
//! `moe_expert_gemm1_relu2_nvfp4` and `moe_expert_gemm2` (grouped tensor-core GEMMs over the
//! expert offsets, NVFP4 or bf16 operands, fused dequant -> relu^2 -> NVFP4 epilogue), and
//! `moe_finalize` (bit-exact). CPU spec: reference/src/ops/moe_*.rs.
//!
//! GEMM versions: `v1` picks the tile shape from the average rows per expert (`M / E <= 32`:
//! `v1_m16`, else `v1_m64`); `v1_m16` (16 x 64 tiles, K step 256: decode, bandwidth) and
//! `v1_m64` (64 x 128 tiles, K step 64: prefill) force one. The m-tiles of all experts are laid
//! out on the device (`moe_tile_schedule`), so a launch needs no host copy of the offsets.
//! `v2` is `v1` except that NVFP4 x NVFP4 with <= 8 rows per expert on average runs the `V8`
//! kernels (tokens as the mma's N dimension, weights streamed straight into registers: decode);
//! `v2_v8` forces them. `v1_w64` forces the `w64` kernels: m64's tile with the products on
//! `wgmma` (one warpgroup, m64n128k16, operands from shared memory in wgmma's core-matrix
//! layout; HGMMA in the SASS). Session 11, written after its last device call: not yet run.
//! `v3` (session 14) is `v2` with the `R` forms in place of `V8`: tiles of R <= 8 rows, both
//! NVFP4 operands decoded in registers to f16 (exact) for `mma.sync` f16 -> f32 (the decode
//! engine's slot GEMV design), x staged once a block in shared memory, the weights through
//! registers or (`p` forms) a per-warp cp.async ring; `v3_<form>` forces one form of
//! [`R_FORMS`] (`v3_r8`, `v3_r4d4`, `v3_r8p4`, ...).

use super::{grid_for, GpuOp, RunOpts};
use crate::runtime::{cfg, Gpu};
use crate::GpuError;
use cudarc::driver::{CudaSlice, DevicePtr, LaunchConfig, PushKernelArg};
use reference::op::{Inputs, OpError, Params};
use reference::ops::moe_permute::MAX_EXPERTS;
use reference::ops::nvfp4_quantize::Nvfp4Mode;
use reference::{DType, Tensor, TensorMap};

/// Every version: the fixed ones, then `v3_<tag>` for each of [`R_FORMS`] (built once).
fn gemm_versions() -> &'static [&'static str] {
    static V: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
    V.get_or_init(|| {
        let mut v = vec![
            "v1", "v1_m16", "v1_m64", "v1_w64", "v2", "v2_v8", "v3", "v4",
        ];
        v.extend(
            R_FORMS
                .iter()
                .map(|f| &*Box::leak(format!("v3_{}", f.tag).into_boxed_str())),
        );
        v.extend(
            X_FORMS
                .iter()
                .map(|f| &*Box::leak(format!("v4_{}", f.tag).into_boxed_str())),
        );
        v
    })
}

/// One form of moe.cu's register-decoded grouped GEMM (MOE_R8_FORM, same names).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RForm {
    /// Kernel tag: `moe_gemm_<tag>_ff_{q,o}`.
    pub tag: &'static str,
    /// Rows an m-tile (the schedule's BM).
    pub rows: usize,
    /// Warps sharing a column group's K steps.
    pub sk: usize,
    /// Warps a block.
    pub warps: usize,
    /// Any K % 16 == 0 and alignment (else K % 128 == 0 and 16-byte aligned operands).
    pub general: bool,
    /// Stages of the warp's cp.async weight ring (0: the weights go through registers).
    pub stages: usize,
    /// Column groups of 16 a warp (MOE_R8_FORMC, session 22: one weight stream through the
    /// ring for all of them); 1 elsewhere.
    pub cg: usize,
}

const fn rf(tag: &'static str, rows: usize, sk: usize, warps: usize, general: bool) -> RForm {
    RForm {
        tag,
        rows,
        sk,
        warps,
        general,
        stages: 0,
        cg: 1,
    }
}

const fn rp(tag: &'static str, rows: usize, sk: usize, warps: usize, stages: usize) -> RForm {
    RForm {
        tag,
        rows,
        sk,
        warps,
        general: false,
        stages,
        cg: 1,
    }
}

const fn rc(tag: &'static str, rows: usize, stages: usize, cg: usize) -> RForm {
    RForm {
        tag,
        rows,
        sk: 1,
        warps: 4,
        general: false,
        stages,
        cg,
    }
}

/// moe.cu's MOE_R8_FORM / MOE_R8_FORMP list, in its order.
pub const R_FORMS: &[RForm] = &[
    rf("r8", 8, 1, 4, false),
    rf("r8s2", 8, 2, 8, false),
    rf("r8s4", 8, 4, 8, false),
    rf("r8g", 8, 1, 4, true),
    rf("r8d4", 8, 1, 4, false),
    rf("r8s2d4", 8, 2, 8, false),
    rf("r4d4", 4, 1, 4, false),
    rf("r4s2d4", 4, 2, 8, false),
    rf("r2d4", 2, 1, 4, false),
    rf("r2s2d4", 2, 2, 8, false),
    rf("r1d4", 1, 1, 4, false),
    rf("r1s2d4", 1, 2, 8, false),
    rf("r1s2", 1, 2, 8, false),
    rf("r4g", 4, 1, 4, true),
    rf("r2g", 2, 1, 4, true),
    rf("r1g", 1, 1, 4, true),
    rp("r8p4", 8, 1, 4, 4),
    rp("r4p6", 4, 1, 4, 6),
    rp("r2p6", 2, 1, 4, 6),
    rp("r1p6", 1, 1, 4, 6),
    rp("r4s2p6", 4, 2, 8, 6),
    rp("r2s2p6", 2, 2, 8, 6),
    rp("r1s2p6", 1, 2, 8, 6),
    rp("r4p8", 4, 1, 4, 8),
    rp("r2p8", 2, 1, 4, 8),
    rp("r8p4u", 8, 1, 4, 4),
    rp("r2p4u", 2, 1, 4, 4),
    rp("r2p8u", 2, 1, 4, 8),
    rc("r2p8c2", 2, 8, 2),
    rc("r2p8c4", 2, 8, 4),
    rc("r8p4c2", 8, 4, 2),
    rc("r8p4c4", 8, 4, 4),
    rp("r8w8p4", 8, 1, 8, 4),
];

/// One form of moe.cu's wgmma grouped GEMMs for prefill: 256 threads, 128 weight rows a block,
/// m-tiles of up to `tokens` rows as wgmma's N; NVFP4 x NVFP4, K % 128 == 0, 16-byte aligned
/// operands. X forms (MOE_X_FORM, session 20): the weights decoded in registers as wgmma's A.
/// S forms (MOE_S_FORM, session 21, `shared_a`): both operands decoded into shared memory once
/// a block, wgmma N = 64 x the tile's 64-token quarters, a flat grid (weight-row block fastest);
/// s256h takes the tokens f16 from a decode pass first (`f16_tokens`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct XForm {
    /// Kernel tag: `moe_gemm_<tag>_ff_{q,o}`.
    pub tag: &'static str,
    /// Tokens an m-tile (wgmma's N, the schedule's BM).
    pub tokens: usize,
    /// Stages of the cp.async ring of raw weights and x.
    pub stages: usize,
    /// k16 steps a wgmma commit group.
    pub group: usize,
    /// An S form: A (the weights) from shared memory too.
    pub shared_a: bool,
    /// An S form whose tokens come f16 from global memory (`moe_x_f16_v1`'s decode of the
    /// NVFP4 x, run first into [`DevOperand::f16`]): only the weights are decoded in the GEMM.
    pub f16_tokens: bool,
    /// An xw form (MOE_XW_FORM, session 34): 512 threads, two producer warpgroups decode the
    /// tokens into this many f16 tiles while two consumer warpgroups decode their weights and
    /// run the wgmma's (0: not an xw form).
    pub x_tiles: usize,
    /// Threads that store the epilogue tile: 256 (the consumers), or 512 for the xw forms
    /// whose producers store half of it too (session 35's `e` forms).
    pub store_threads: usize,
}

/// An X form (MOE_X_FORM): tag, tokens, stages, k16 steps a group.
const fn xf(tag: &'static str, tokens: usize, stages: usize, group: usize) -> XForm {
    XForm {
        tag,
        tokens,
        stages,
        group,
        shared_a: false,
        f16_tokens: false,
        x_tiles: 0,
        store_threads: 256,
    }
}
/// An S form (MOE_S_FORM): tag, tokens, stages, f16 tokens.
const fn sf(tag: &'static str, tokens: usize, stages: usize, f16_tokens: bool) -> XForm {
    XForm {
        shared_a: true,
        f16_tokens,
        ..xf(tag, tokens, stages, 4)
    }
}
/// An xw form (MOE_XW_FORM): tag, tokens, stages, x tiles, epilogue store threads.
const fn xw(
    tag: &'static str,
    tokens: usize,
    stages: usize,
    x_tiles: usize,
    store: usize,
) -> XForm {
    XForm {
        x_tiles,
        store_threads: store,
        ..xf(tag, tokens, stages, 4)
    }
}

/// moe.cu's MOE_X_FORM list, then its MOE_S_FORM and MOE_XW_FORM lists, in their order.
pub const X_FORMS: &[XForm] = &[
    xf("x64", 64, 4, 4),
    xf("x128", 128, 4, 4),
    sf("s256", 256, 4, false),
    sf("s128", 128, 3, false),
    sf("s256h", 256, 4, true),
    xw("xw128", 128, 4, 3, 256),
    xw("xw192", 192, 4, 2, 256),
    xw("xw192t3", 192, 3, 3, 256),
    xw("xw192e", 192, 4, 2, 512),
    xw("xw192t3e", 192, 3, 3, 512),
];

impl XForm {
    /// Dynamic shared memory. X: two f16 x tiles of one 128-k step (256 bytes a token), then
    /// the ring (a stage: 80 bytes a token of raw x, 10240 bytes of raw weights). S: two f16
    /// tiles of one 64-k step (128 bytes a row of 128 weight rows and the tokens), then the
    /// ring (48 bytes a row). S with f16 tokens: the two tiles and the ring hold the 128 weight
    /// rows only, then a ring of f16 token steps (128 bytes a token a stage).
    pub fn smem(self) -> u32 {
        if self.f16_tokens {
            (128 * (2 * 128 + self.stages * 48) + self.stages * self.tokens * 128) as u32
        } else if self.shared_a {
            ((128 + self.tokens) * (2 * 128 + self.stages * 48)) as u32
        } else {
            let tiles = if self.x_tiles > 0 { self.x_tiles } else { 2 };
            (tiles * self.tokens * 256 + self.stages * (self.tokens * 80 + 10240)) as u32
        }
    }
    /// Threads a block: 512 for the xw forms (two producer and two consumer warpgroups), else
    /// 256.
    pub fn threads(self) -> u32 {
        if self.x_tiles > 0 {
            512
        } else {
            256
        }
    }
    fn by_tag(tag: &str) -> Option<XForm> {
        X_FORMS.iter().copied().find(|f| f.tag == tag)
    }
}

impl RForm {
    /// Columns a block.
    pub fn bn(self) -> usize {
        16 * self.warps / self.sk * self.cg
    }
    /// Dynamic shared memory at K = `k`: x (256 bytes a row and 128-k step), 64 bytes of
    /// zeros, the split-K partial fragments, the warps' cp.async rings (1152 bytes a stage).
    pub fn smem(self, k: usize) -> u32 {
        let part = if self.sk > 1 { self.warps * 512 } else { 0 };
        let ring = self.warps * self.stages * 1152;
        (k.div_ceil(128) * 256 * self.rows + 64 + part + ring) as u32
    }
    /// The general form with this form's rows.
    fn general_form(self) -> RForm {
        R_FORMS
            .iter()
            .copied()
            .find(|f| f.general && f.rows == self.rows)
            .unwrap_or(R_FORMS[0])
    }
    fn by_tag(tag: &str) -> Option<RForm> {
        R_FORMS.iter().copied().find(|f| f.tag == tag)
    }
}

pub fn ops() -> Vec<GpuOp> {
    vec![
        GpuOp {
            name: "moe_permute",
            versions: &["v1"],
            run: run_permute,
            applicable: always,
        },
        GpuOp {
            name: "moe_expert_gemm1_relu2_nvfp4",
            versions: gemm_versions(),
            run: run_gemm1,
            applicable: gemm1_applicable,
        },
        GpuOp {
            name: "moe_expert_gemm2",
            versions: gemm_versions(),
            run: run_gemm2,
            applicable: gemm2_applicable,
        },
        GpuOp {
            name: "moe_finalize",
            versions: &["v1"],
            run: run_finalize,
            applicable: finalize_applicable,
        },
    ]
}

fn always(_: &str, _: &TensorMap, _: &Params) -> Option<String> {
    None
}

fn drv(what: &'static str) -> impl Fn(cudarc::driver::DriverError) -> GpuError {
    move |e| GpuError::Driver(format!("{what}: {e}"))
}

fn ptr<T>(g: &Gpu, s: &CudaSlice<T>) -> u64 {
    let (p, _sync) = s.device_ptr(&g.stream);
    p
}

// ---------------------------------------------------------------------------------------------
// moe_permute

/// Device outputs of [`launch_permute`] (pointers; `off32`/`counts32` may be 0 to skip them).
#[derive(Clone, Copy, Debug)]
pub struct PermuteOut {
    pub ptoken: u64,
    pub pslot: u64,
    pub counts32: u64,
    pub off32: u64,
    /// `[E+1]` i64 offsets (what the grouped GEMMs read).
    pub off64: u64,
    pub inverse: u64,
    /// With `off64`: also fill this m-tile schedule (one launch fewer before the GEMMs).
    pub tiles: Option<TilesOut>,
}

/// Where [`launch_permute`] writes an m-tile schedule ([`Schedule::out`]).
#[derive(Clone, Copy, Debug)]
pub struct TilesOut {
    pub bm: i64,
    pub max_tiles: i64,
    pub t_exp: u64,
    pub t_row: u64,
}

/// Scratch of the permutation: per-(range, expert) counts and per-expert totals.
pub struct PermuteScratch {
    pub ranges: usize,
    pub chunk: usize,
    blk: CudaSlice<u32>,
    totals: CudaSlice<u32>,
}

impl PermuteScratch {
    /// For `n = T*k` assignments and `e` experts: ranges of >= 256 assignments (one warp each),
    /// at most 2^22 / E of them (the count table stays <= 16 MB).
    pub fn new(g: &Gpu, n: usize, e: usize) -> Result<Self, GpuError> {
        let max_w = ((1usize << 22) / e.max(1)).max(1);
        let chunk = n.div_ceil(max_w).max(256);
        let ranges = n.div_ceil(chunk).max(1);
        Ok(PermuteScratch {
            ranges,
            chunk,
            blk: g.alloc_raw::<u32>(ranges * e)?,
            totals: g.alloc_raw::<u32>(e)?,
        })
    }
}

/// Launches the permutation of `idx` (`[t, k]`, i32 or i64, values validated in `0..e`).
#[allow(clippy::too_many_arguments)]
pub fn launch_permute(
    g: &Gpu,
    idx: u64,
    is64: bool,
    t: usize,
    k: usize,
    e: usize,
    s: &mut PermuteScratch,
    o: &PermuteOut,
) -> Result<(), GpuError> {
    let n = t * k;
    g.stream
        .memset_zeros(&mut s.blk)
        .map_err(drv("moe_permute: zero the count table"))?;
    let (blk, tot) = (ptr(g, &s.blk), ptr(g, &s.totals));
    let (n64, k64, e64) = (n as i64, k as i64, e as i64);
    let (chunk, w) = (s.chunk as i64, s.ranges as i64);
    let is64 = is64 as i32;
    if n > 0 {
        let f = g.function("moe", "moe_perm_count")?;
        let mut a = g.stream.launch_builder(&f);
        a.arg(&idx)
            .arg(&is64)
            .arg(&n64)
            .arg(&chunk)
            .arg(&e64)
            .arg(&blk);
        // SAFETY: idx holds n indices of the given width; blk holds ranges * e u32.
        unsafe { a.launch(cfg(grid_for(g, n as u64, 256), 256, 0)) }
            .map_err(drv("launch moe_perm_count"))?;
    }
    {
        let f = g.function("moe", "moe_perm_colscan")?;
        let mut a = g.stream.launch_builder(&f);
        a.arg(&blk).arg(&w).arg(&e64).arg(&tot);
        // SAFETY: blk holds ranges * e u32, tot e u32.
        unsafe { a.launch(cfg(e.div_ceil(256) as u32, 256, 0)) }
            .map_err(drv("launch moe_perm_colscan"))?;
    }
    {
        let f = g.function("moe", "moe_perm_offsets")?;
        let mut a = g.stream.launch_builder(&f);
        let t = o.tiles.filter(|_| o.off64 != 0).unwrap_or(TilesOut {
            bm: 1,
            max_tiles: 0,
            t_exp: 0,
            t_row: 0,
        });
        a.arg(&tot)
            .arg(&e64)
            .arg(&o.counts32)
            .arg(&o.off32)
            .arg(&o.off64);
        a.arg(&t.bm).arg(&t.max_tiles).arg(&t.t_exp).arg(&t.t_row);
        // SAFETY: tot holds e u32; counts32 e i32 (or 0), off32 e+1 i32 (or 0), off64 e+1 i64;
        // the tile tables (or 0) max_tiles entries each.
        unsafe { a.launch(cfg(1, 1024, 0)) }.map_err(drv("launch moe_perm_offsets"))?;
    }
    if n > 0 {
        let f = g.function("moe", "moe_perm_scatter")?;
        let mut a = g.stream.launch_builder(&f);
        a.arg(&idx)
            .arg(&is64)
            .arg(&n64)
            .arg(&k64)
            .arg(&chunk)
            .arg(&w);
        a.arg(&e64).arg(&blk).arg(&o.off64);
        a.arg(&o.ptoken).arg(&o.pslot).arg(&o.inverse);
        let blocks = (s.ranges * 32).div_ceil(256) as u32;
        // SAFETY: one warp per range; outputs hold n i32 each; off64 e+1 i64.
        unsafe { a.launch(cfg(blocks, 256, 0)) }.map_err(drv("launch moe_perm_scatter"))?;
    }
    Ok(())
}

fn run_permute(
    g: &Gpu,
    _version: &str,
    inputs: &TensorMap,
    p: &Params,
    opts: &RunOpts,
) -> Result<TensorMap, GpuError> {
    const OP: &str = "moe_permute";
    let inp = Inputs::new(OP, inputs);
    let (t_, idx) = inp.int("topk_indices")?;
    inp.rank("topk_indices", t_, 2)?;
    inp.dtype("topk_indices", t_, &[DType::I32, DType::I64])?;
    let e = p.usize("num_experts")?;
    if e == 0 || e > MAX_EXPERTS {
        return Err(OpError::Param {
            op: OP.into(),
            name: "num_experts".into(),
            msg: format!("{e} is outside 1..={MAX_EXPERTS} (the router's packed keys hold 16-bit expert ids)"),
        }
        .into());
    }
    let (t, k) = (t_.shape[0], t_.shape[1]);
    if k == 0 {
        return Err(inp
            .err("topk_indices", "k = 0: each token needs at least one slot")
            .into());
    }
    let n = t * k;
    if n > i32::MAX as usize {
        return Err(inp
            .err(
                "topk_indices",
                "more than 2^31 routed rows do not fit the i32 outputs",
            )
            .into());
    }
    if let Some((i, &v)) = idx
        .iter()
        .enumerate()
        .find(|(_, &v)| v < 0 || v as usize >= e)
    {
        return Err(inp
            .err(
                "topk_indices",
                format!("topk_indices[{}, {}] = {v} is outside 0..{e}", i / k, i % k),
            )
            .into());
    }
    let d_idx = g.upload(t_)?;
    let is64 = t_.dtype() == DType::I64;
    let ptoken = g.alloc_poisoned(&[n], DType::I32, opts.poison)?;
    let pslot = g.alloc_poisoned(&[n], DType::I32, opts.poison)?;
    let counts = g.alloc_poisoned(&[e], DType::I32, opts.poison)?;
    let off32 = g.alloc_poisoned(&[e + 1], DType::I32, opts.poison)?;
    let off64 = g.alloc_poisoned(&[e + 1], DType::I64, opts.poison)?;
    let inverse = g.alloc_poisoned(&[t, k], DType::I32, opts.poison)?;
    let mut s = PermuteScratch::new(g, n, e)?;
    let st = &g.stream;
    let o = PermuteOut {
        ptoken: ptoken.ptr(st),
        pslot: pslot.ptr(st),
        counts32: counts.ptr(st),
        off32: off32.ptr(st),
        off64: off64.ptr(st),
        inverse: inverse.ptr(st),
        tiles: None,
    };
    launch_permute(g, d_idx.ptr(st), is64, t, k, e, &mut s, &o)?;
    g.sync()?;
    let off32_h = g.download(&off32, "expert_offsets")?;
    let off64_h = g.download(&off64, "expert_offsets (i64)")?;
    let same = off32_h
        .to_i64_vec()
        .zip(off64_h.to_i64_vec())
        .is_some_and(|(a, b)| a == b);
    if !same {
        return Err(GpuError::Driver(
            "moe_permute: the i32 and i64 expert offsets disagree (kernel bug)".into(),
        ));
    }
    Ok(reference::op::outputs([
        ("permuted_token", g.download(&ptoken, "permuted_token")?),
        ("permuted_slot", g.download(&pslot, "permuted_slot")?),
        ("expert_counts", g.download(&counts, "expert_counts")?),
        ("expert_offsets", off32_h),
        ("inverse", g.download(&inverse, "inverse")?),
    ]))
}

// ---------------------------------------------------------------------------------------------
// grouped GEMMs

/// Tile shape of the grouped GEMM kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TileCfg {
    /// 16 x 64 tiles, K step 256 (few rows per expert: decode).
    M16,
    /// 64 x 128 tiles, K step 64 (prefill).
    M64,
    /// <= 8 token rows x 64 columns, tokens as the mma's N, no shared-memory staging
    /// (decode; NVFP4 x NVFP4 only).
    V8,
    /// M64's tiles on wgmma (one warpgroup, m64n128k16; prefill).
    W64,
    /// V8's design (<= 8 token rows, 16 columns a warp) with both operands decoded in
    /// registers to f16 (exact) for `mma.sync` f16 -> f32, x staged once a block in shared
    /// memory: one of [`R_FORMS`]. NVFP4 x NVFP4 only (session 14).
    R(RForm),
    /// Prefill on wgmma: the weights decoded in registers as A (128 rows a block), the m-tile's
    /// tokens as N from shared memory: one of [`X_FORMS`] (session 20). NVFP4 x NVFP4 with
    /// K % 128 == 0 only.
    X(XForm),
}

impl TileCfg {
    pub fn bm(self) -> usize {
        match self {
            TileCfg::M16 => 16,
            TileCfg::M64 | TileCfg::W64 => 64,
            TileCfg::V8 => 8,
            TileCfg::R(f) => f.rows,
            TileCfg::X(f) => f.tokens,
        }
    }
    pub fn bn(self) -> usize {
        match self {
            TileCfg::M16 => 64,
            TileCfg::M64 | TileCfg::W64 | TileCfg::X(_) => 128,
            TileCfg::V8 => 64,
            TileCfg::R(f) => f.bn(),
        }
    }
    fn bk(self) -> usize {
        match self {
            TileCfg::M16 => 256,
            TileCfg::M64 | TileCfg::W64 => 64,
            TileCfg::V8 | TileCfg::R(_) | TileCfg::X(_) => 128,
        }
    }
    fn tag(self) -> &'static str {
        match self {
            TileCfg::M16 => "m16",
            TileCfg::M64 => "m64",
            TileCfg::V8 => "v8",
            TileCfg::W64 => "w64",
            TileCfg::R(f) => f.tag,
            TileCfg::X(f) => f.tag,
        }
    }
    /// Dynamic shared memory of a launch with K = `k`.
    fn smem(self, k: usize) -> u32 {
        match self {
            TileCfg::V8 => 0, // registers + a static 1 KB table
            TileCfg::R(f) => f.smem(k),
            TileCfg::X(f) => f.smem(),
            // wgmma's core-matrix layout (no row padding), two buffers, then the NVFP4 ring
            // (moe.cu WG_RING x WG_RING_STAGE: 4 stages of one k-tile's raw bytes)
            TileCfg::W64 => (2 * (self.bm() + self.bn()) * self.bk() * 2 + 4 * 7168) as u32,
            _ => ((self.bm() + self.bn()) * (self.bk() + 8) * 2) as u32,
        }
    }
    /// `v1`: by the average rows per expert; `v1_m16` / `v1_m64` force one. `v2`: as `v1`, but
    /// NVFP4 x NVFP4 with at most 8 rows per expert on average takes `V8`; `v2_v8` forces `V8`
    /// (`ff`: both operands NVFP4, which `V8` requires).
    /// `v3`: NVFP4 x NVFP4 with at most 8 rows per expert on average takes an `R` form
    /// (`r8w8p4` at more than 1 row per expert, `r2p8` at more than 0.1, else `r8w8p4` at
    /// K <= 1024 and `r8p4` past it: sessions 14 and 33's measurements), else as `v1`;
    /// `v3_<form>` forces one of [`R_FORMS`].
    /// `v4`: NVFP4 x NVFP4 with K % 128 == 0 and more than 8 rows per expert on average takes
    /// [`V4_FORM`] of [`X_FORMS`] (or [`V4_LONG_FORM`] at K >= [`V4_LONG_K`]), else as `v3`; `v4_<form>` forces one of [`X_FORMS`] where it
    /// applies (NVFP4 x NVFP4, K % 128 == 0) and runs `v1`'s tiles elsewhere.
    pub fn pick(
        version: &str,
        m: usize,
        e: usize,
        k: usize,
        ff: bool,
    ) -> Result<TileCfg, GpuError> {
        // The one error for a version no table knows.
        let unknown = || GpuError::NoVersion {
            op: "moe grouped GEMM".into(),
            version: version.into(),
            known: gemm_versions().join(", "),
        };
        let r = |tag: &str| match RForm::by_tag(tag) {
            Some(f) if ff => Ok(TileCfg::R(f)),
            Some(_) => Err(GpuError::Unsupported(format!(
                "moe grouped GEMM {version}: needs NVFP4 activations and weights"
            ))),
            None => Err(unknown()),
        };
        let x_fits = ff && k.is_multiple_of(128);
        match version {
            "v4" if x_fits && m > 8 * e.max(1) => {
                // Session 21 call 3 (Super shapes): s256 takes GEMM2 (K = 2688: 1592.9 vs x64
                // 1697.4 us), x64 GEMM1 (K = 1024: 1964.8 vs 2141.9; with one block an SM the
                // S form's prologue and epilogue weigh more on a short K).
                let tag = if k >= V4_LONG_K {
                    V4_LONG_FORM
                } else {
                    V4_FORM
                };
                Ok(TileCfg::X(XForm::by_tag(tag).unwrap_or(X_FORMS[0])))
            }
            "v4" => TileCfg::pick("v3", m, e, k, ff),
            v if v.starts_with("v4_") => match XForm::by_tag(&v[3..]) {
                Some(f) if x_fits => Ok(TileCfg::X(f)),
                Some(_) => TileCfg::pick("v1", m, e, k, ff),
                None => Err(unknown()),
            },
            "v3" if ff && m <= 8 * e.max(1) => {
                // Session 14 call 3 (Super shapes, both GEMMs on one form): r8p4 fastest at
                // T = 1 (39.5 us) and T = 64 (627.0), r2p8 at T = 8 (190.8): 2-row tiles
                // where most experts hold one or two rows, else 8. Session 33 call 2: the
                // 8-warp form r8w8p4 (x staged once for 128 columns) takes both GEMMs past one
                // row per expert (T = 64, K = 2688: 261.8 vs 285.3 us; K = 1024: 288.6 vs
                // 289.7) and GEMM1's short K at T = 1 (K = 1024: 17.5 vs 18.1; same 8-row
                // tiles as r8p4, so one schedule serves both GEMMs). At T = 8 r2p8 keeps
                // both: GEMM1 on r8w8p4 (95.0 vs 97.2) would need a second schedule.
                let avg = m as f64 / e.max(1) as f64;
                r(if avg > 1.0 {
                    "r8w8p4"
                } else if avg > 0.1 {
                    "r2p8"
                } else if k <= 1024 {
                    "r8w8p4"
                } else {
                    "r8p4"
                })
            }
            "v3" => TileCfg::pick("v1", m, e, k, ff),
            v if v.starts_with("v3_") => r(&v[3..]),
            "v1" => Ok(if m <= 32 * e.max(1) {
                TileCfg::M16
            } else {
                TileCfg::M64
            }),
            "v2" if ff && m <= 8 * e.max(1) => Ok(TileCfg::V8),
            "v2" => TileCfg::pick("v1", m, e, k, ff),
            "v2_v8" if ff => Ok(TileCfg::V8),
            "v2_v8" => Err(GpuError::Unsupported(format!(
                "moe grouped GEMM {version}: needs NVFP4 activations and weights"
            ))),
            "v1_m16" => Ok(TileCfg::M16),
            "v1_m64" => Ok(TileCfg::M64),
            "v1_w64" => Ok(TileCfg::W64),
            _ => Err(unknown()),
        }
    }
    /// Upper bound of the m-tiles of `m` rows over `e` experts: `ceil(m/BM) + min(e, m)`.
    pub fn max_tiles(self, m: usize, e: usize) -> usize {
        m.div_ceil(self.bm()) + e.min(m)
    }
}

/// The form `v4` takes for prefill-sized m-tiles with K < [`V4_LONG_K`]. Session 34's xw192
/// measured faster (GEMM1 at T = 4096 1863-1871 us vs x64's 1953-1968) but racecheck reported
/// hazards on the xw forms (gpu/NOTES.md "Session 34"): they stay opt-in (`v4_xw192`) until a
/// clean racecheck.
pub const V4_FORM: &str = "x64";
/// The form `v4` takes for prefill-sized m-tiles with K >= [`V4_LONG_K`] (xw192t3, opt-in:
/// GEMM2 1424-1434 us vs s256's 1522-1544 in session 34).
pub const V4_LONG_FORM: &str = "s256";
/// The K from which `v4` takes [`V4_LONG_FORM`].
pub const V4_LONG_K: usize = 2048;

/// Largest dynamic shared memory a block may opt into on sm_90 (227 KB).
const MAX_DYN_SMEM: u32 = 227 * 1024;

/// The m-tile schedule on the device.
pub struct Schedule {
    pub cfg: TileCfg,
    pub tiles: usize,
    t_exp: CudaSlice<i32>,
    t_row: CudaSlice<i64>,
}

impl Schedule {
    pub fn new(g: &Gpu, cfg: TileCfg, m: usize, e: usize) -> Result<Self, GpuError> {
        let tiles = cfg.max_tiles(m, e);
        Ok(Schedule {
            cfg,
            tiles,
            t_exp: g.alloc_raw::<i32>(tiles)?,
            t_row: g.alloc_raw::<i64>(tiles)?,
        })
    }

    /// Where [`launch_permute`] fills this schedule along with the offsets.
    pub fn out(&self, g: &Gpu) -> TilesOut {
        TilesOut {
            bm: self.cfg.bm() as i64,
            max_tiles: self.tiles as i64,
            t_exp: ptr(g, &self.t_exp),
            t_row: ptr(g, &self.t_row),
        }
    }

    /// The schedule's tables on the host (tests): (expert or -1, first row) per m-tile.
    pub fn download(&self, g: &Gpu) -> Result<(Vec<i32>, Vec<i64>), GpuError> {
        let e = g
            .stream
            .clone_dtoh(&self.t_exp)
            .map_err(drv("schedule download"))?;
        let r = g
            .stream
            .clone_dtoh(&self.t_row)
            .map_err(drv("schedule download"))?;
        Ok((e, r))
    }

    /// Random bytes over both tables (tests: nothing may survive a fill).
    pub fn poison(&self, g: &Gpu, seed: u64) -> Result<(), GpuError> {
        fill(g, ptr(g, &self.t_exp), self.tiles * 4, seed, 0)?;
        fill(g, ptr(g, &self.t_row), self.tiles * 8, seed + 1, 0)
    }

    /// Fills the schedule from `off64` (`[e+1]` i64 on the device).
    pub fn launch(&self, g: &Gpu, off64: u64, e: usize) -> Result<(), GpuError> {
        if self.tiles == 0 {
            return Ok(());
        }
        let f = g.function("moe", "moe_tile_schedule")?;
        let (e64, bm, mt) = (e as i64, self.cfg.bm() as i64, self.tiles as i64);
        let (te, tr) = (ptr(g, &self.t_exp), ptr(g, &self.t_row));
        let mut a = g.stream.launch_builder(&f);
        a.arg(&off64).arg(&e64).arg(&bm).arg(&mt).arg(&te).arg(&tr);
        // SAFETY: off64 holds e+1 i64; the tables hold `tiles` entries.
        unsafe { a.launch(cfg(1, 1024, 0)) }
            .map(|_| ())
            .map_err(drv("launch moe_tile_schedule"))
    }
}

/// One operand on the device: NVFP4 (`data` codes, `sf` scales, `global` f32 pointer) or bf16.
#[derive(Clone, Copy, Debug)]
pub struct DevOperand {
    pub data: u64,
    pub sf: u64,
    pub global: u64,
    pub nvfp4: bool,
    /// Rows of the operand (x: M).
    pub rows: usize,
    /// x of an f16-token S form ([`XForm::f16_tokens`]): a workspace of `rows` x K f16
    /// ([`token_workspace`]) the launch fills with the decoded tokens; 0 for every other form.
    pub f16: u64,
}

/// The f16 token workspace tile config `c` needs for an x of `rows` x `k` ([`DevOperand::f16`]),
/// or None.
pub fn token_workspace(
    g: &Gpu,
    c: TileCfg,
    rows: usize,
    k: usize,
) -> Result<Option<CudaSlice<u8>>, GpuError> {
    match c {
        TileCfg::X(f) if f.f16_tokens => Ok(Some(g.alloc_raw::<u8>(rows * k * 2)?)),
        _ => Ok(None),
    }
}

/// What the grouped GEMM writes.
#[derive(Clone, Copy, Debug)]
pub enum Epilogue {
    /// GEMM1: relu^2 then NVFP4 codes `[M, N/2]` + scales `[M, N/16]` with the global scale at
    /// `out_global`; optional bf16 `h`; with `amax` set, only amax(relu^2) is computed.
    Quant {
        codes: u64,
        sf: u64,
        out_global: u64,
        mode: Nvfp4Mode,
        round_bf16: bool,
        h: u64,
        amax: u64,
    },
    /// GEMM2: `out` `[M, N]` f32 or bf16.
    Store { out: u64, dtype: DType },
}

/// An epilogue as the kernels' GemmArgs fields (moe.cu `struct GemmArgs`).
struct EpiFields {
    tag: &'static str,
    codes: u64,
    sf: u64,
    global: u64,
    mode: i32,
    round: i32,
    h: u64,
    amax: u64,
    out_dt: i32,
}

fn epi_fields(epi: &Epilogue) -> Result<EpiFields, GpuError> {
    Ok(match *epi {
        Epilogue::Quant {
            codes,
            sf,
            out_global,
            mode,
            round_bf16,
            h,
            amax,
        } => EpiFields {
            tag: "q",
            codes,
            sf,
            global: out_global,
            mode: super::nvfp4::mode_code(mode),
            round: round_bf16 as i32,
            h,
            amax,
            out_dt: 0,
        },
        Epilogue::Store { out, dtype } => {
            let dt = match dtype {
                DType::F32 => 0i32,
                DType::BF16 => 1,
                other => {
                    return Err(GpuError::Unsupported(format!(
                        "moe_expert_gemm2 writes f32 or bf16, not {other}"
                    )))
                }
            };
            EpiFields {
                tag: "o",
                codes: out,
                sf: 0,
                global: 0,
                mode: 0,
                round: 0,
                h: 0,
                amax: 0,
                out_dt: dt,
            }
        }
    })
}

/// moe.cu's `struct GemmArgs` (144 bytes, little-endian, no padding) for one GEMM.
#[allow(clippy::too_many_arguments)]
fn gemm_args_bytes(
    x: &DevOperand,
    w: &DevOperand,
    off64: u64,
    t_exp: u64,
    t_row: u64,
    n: usize,
    k: usize,
    epi: &EpiFields,
) -> Vec<u8> {
    let mut b = Vec::with_capacity(144);
    for p in [
        x.data, x.sf, x.global, w.data, w.sf, w.global, off64, t_exp, t_row,
    ] {
        b.extend_from_slice(&p.to_le_bytes());
    }
    b.extend_from_slice(&(n as i64).to_le_bytes());
    b.extend_from_slice(&(k as i64).to_le_bytes());
    for p in [epi.codes, epi.sf, epi.global] {
        b.extend_from_slice(&p.to_le_bytes());
    }
    b.extend_from_slice(&epi.mode.to_le_bytes());
    b.extend_from_slice(&epi.round.to_le_bytes());
    b.extend_from_slice(&epi.h.to_le_bytes());
    b.extend_from_slice(&epi.amax.to_le_bytes());
    b.extend_from_slice(&epi.out_dt.to_le_bytes());
    b.extend_from_slice(&0i32.to_le_bytes()); // early: the kernel waits first
    b
}

/// The tile form of the fused layer (moe.cu `moe_layer_r8w8p4_ff`).
pub const FUSED_FORM: &str = "r8w8p4";
fn fused_form() -> RForm {
    RForm::by_tag(FUSED_FORM).unwrap_or(R_FORMS[0])
}
/// GEMM1 rounds the fused layer runs ahead of GEMM2 (moe.cu: round q holds GEMM1's blocks of
/// m-tile q and GEMM2's of m-tile q - lag).
pub const FUSED_LAG: i64 = 10;

/// The expert layer's two GEMMs as one launch (moe.cu `moe_layer_r8w8p4_ff`): GEMM1 with the
/// NVFP4 epilogue into `y`, GEMM2 from `y`, both on r8w8p4 tiles of one 8-row schedule;
/// NVFP4 operands, K % 128 == 0 for both GEMMs, 16-byte aligned codes and scales.
pub struct FusedLayer {
    args: CudaSlice<u8>,
    sync: CudaSlice<u32>,
    tiles: usize,
    blocks: usize,
    smem: u32,
}

impl FusedLayer {
    /// GEMM1: `x` [M, k1] x `w1` [E, n1, k1] -> `epi1` (NVFP4, the codes and scales of `y`);
    /// GEMM2: `y` [M, n1] x `w2` [E, n2, n1] -> `epi2` (f32 / bf16).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        g: &Gpu,
        sched: &Schedule,
        x: &DevOperand,
        w1: &DevOperand,
        epi1: &Epilogue,
        y: &DevOperand,
        w2: &DevOperand,
        epi2: &Epilogue,
        off64: u64,
        (n1, k1, n2): (usize, usize, usize),
    ) -> Result<Self, GpuError> {
        let form = fused_form();
        let why = if sched.cfg != TileCfg::R(form) {
            Some(format!(
                "the schedule is for {} tiles, not {FUSED_FORM}",
                sched.cfg.tag()
            ))
        } else if !(x.nvfp4 && w1.nvfp4 && y.nvfp4 && w2.nvfp4) {
            Some("every operand must be NVFP4".into())
        } else if k1 % 128 != 0 || n1 % 128 != 0 {
            Some(format!(
                "K must be a multiple of 128 for both GEMMs (GEMM1 {k1}, GEMM2 {n1})"
            ))
        } else if [x.data, x.sf, w1.data, w1.sf, y.data, y.sf, w2.data, w2.sf]
            .iter()
            .any(|p| p % 16 != 0)
        {
            Some("codes and scales must be 16-byte aligned".into())
        } else if !matches!(epi1, Epilogue::Quant { amax: 0, .. })
            || !matches!(epi2, Epilogue::Store { .. })
        {
            Some("GEMM1 takes the NVFP4 epilogue (no amax pass), GEMM2 the store".into())
        } else {
            None
        };
        if let Some(why) = why {
            return Err(GpuError::Unsupported(format!(
                "moe fused layer: {why}; launch the two GEMMs instead (launch_gemm)"
            )));
        }
        let (te, tr) = (ptr(g, &sched.t_exp), ptr(g, &sched.t_row));
        let e1 = epi_fields(epi1)?;
        let e2 = epi_fields(epi2)?;
        let mut bytes = gemm_args_bytes(x, w1, off64, te, tr, n1, k1, &e1);
        bytes.extend(gemm_args_bytes(y, w2, off64, te, tr, n2, n1, &e2));
        let args = g
            .stream
            .clone_htod(&bytes)
            .map_err(drv("moe fused layer arguments"))?;
        let smem = form.smem(k1).max(form.smem(n1));
        if smem > MAX_DYN_SMEM {
            return Err(GpuError::Unsupported(format!(
                "moe fused layer: K = {n1} needs {smem} bytes of shared memory (limit \
                 {MAX_DYN_SMEM}); launch the two GEMMs instead"
            )));
        }
        let blocks = sched.tiles * (n1.div_ceil(form.bn()) + n2.div_ceil(form.bn()));
        Ok(FusedLayer {
            args,
            sync: g.alloc_raw::<u32>(sched.tiles + 1)?,
            tiles: sched.tiles,
            blocks,
            smem,
        })
    }

    /// Zeroes the tickets and counters, then launches the grid (one block a ticket).
    pub fn launch(&self, g: &Gpu) -> Result<(), GpuError> {
        if self.tiles == 0 {
            return Ok(());
        }
        let sp = ptr(g, &self.sync);
        // SAFETY: sync holds tiles + 1 u32 on this stream's context.
        unsafe {
            cudarc::driver::result::memset_d8_async(
                sp,
                0,
                4 * (self.tiles + 1),
                g.stream.cu_stream(),
            )
        }
        .map_err(|e| GpuError::Driver(format!("moe fused layer: memset: {e}")))?;
        let name = "moe_layer_r8w8p4_ff";
        let f = g.function("moe", name)?;
        f.set_attribute(
            cudarc::driver::sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            self.smem as i32,
        )
        .map_err(|e| GpuError::Driver(format!("{name} shared memory attribute: {e}")))?;
        if self.blocks > i32::MAX as usize {
            return Err(GpuError::Unsupported(format!(
                "{name}: {} blocks exceed the launch grid",
                self.blocks
            )));
        }
        let ap = ptr(g, &self.args);
        let (tiles, lag) = (self.tiles as i64, FUSED_LAG);
        let mut a = g.stream.launch_builder(&f);
        a.arg(&ap).arg(&sp).arg(&tiles).arg(&lag);
        let lc = LaunchConfig {
            grid_dim: (self.blocks as u32, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: self.smem,
        };
        // SAFETY: args holds the two GemmArgs (checked shapes, formats and alignment in new),
        // sync tiles + 1 zeroed counters; one block a ticket (tiles x (nb1 + nb2)).
        unsafe { a.launch(lc) }.map_err(|e| GpuError::Driver(format!("launch {name}: {e}")))?;
        Ok(())
    }
}

/// One grouped GEMM launch: `x` `[M, K]`, `w` `[E, N, K]`, rows of expert `e` at
/// `off64[e]..off64[e+1]`, tiles from `sched` (filled from the same offsets).
#[allow(clippy::too_many_arguments)]
pub fn launch_gemm(
    g: &Gpu,
    sched: &Schedule,
    x: &DevOperand,
    w: &DevOperand,
    off64: u64,
    n: usize,
    k: usize,
    epi: &Epilogue,
) -> Result<(), GpuError> {
    launch_gemm_as(g, sched, sched.cfg, x, w, off64, n, k, epi, false)
}

/// [`launch_gemm`] with tile config `c` over `sched`'s m-tiles (`c.bm()` must be the
/// schedule's: e.g. another `R` form with the same rows and another K split).
/// `early`: the schedule (`sched`'s tables, `off64`) was complete before the kernel this
/// launch follows began (GEMM2 after GEMM1 on the same or an earlier schedule), so the r8 p
/// forms may read it and issue their first weight stages before their PDL wait (moe.cu
/// `GemmArgs::early`; without a programmatic edge the wait is a no-op and `early` changes
/// nothing). False when the kernel before may write the schedule (the permutation, the
/// schedule kernel).
#[allow(clippy::too_many_arguments)]
pub fn launch_gemm_as(
    g: &Gpu,
    sched: &Schedule,
    c: TileCfg,
    x: &DevOperand,
    w: &DevOperand,
    off64: u64,
    n: usize,
    k: usize,
    epi: &Epilogue,
    early: bool,
) -> Result<(), GpuError> {
    if c.bm() != sched.cfg.bm() {
        return Err(GpuError::Unsupported(format!(
            "moe grouped GEMM: tile {} ({} rows) on a schedule of {}-row m-tiles",
            c.tag(),
            c.bm(),
            sched.cfg.bm()
        )));
    }
    if sched.tiles == 0 || n == 0 {
        return Ok(());
    }
    let fmt = match (x.nvfp4, w.nvfp4) {
        (true, true) => "ff",
        (false, false) => "bb",
        (false, true) => "bf",
        (true, false) => "fb",
    };
    let EpiFields {
        tag: epi_tag,
        codes,
        sf: sfp,
        global: og,
        mode,
        round,
        h,
        amax,
        out_dt,
    } = epi_fields(epi)?;
    // An R form on K % 128 != 0 or operands not 16-byte aligned runs the general form of its
    // rows (K over one warp); K too long for its x staging, v8 (8-row schedules) or an error.
    let (tag, bn, threads, smem) = match c {
        TileCfg::R(f) => {
            let al =
                k.is_multiple_of(128) && [x.data, x.sf, w.data, w.sf].iter().all(|p| p % 16 == 0);
            let f1 = if al || f.general { f } else { f.general_form() };
            if f1.smem(k) <= MAX_DYN_SMEM {
                (f1.tag, f1.bn(), 32 * f1.warps as u32, f1.smem(k))
            } else if f1.rows == 8 {
                let v = TileCfg::V8;
                (v.tag(), v.bn(), 128u32, v.smem(k))
            } else {
                return Err(GpuError::Unsupported(format!(
                    "moe grouped GEMM tile {}: K = {k} needs {} bytes of shared memory for x \
                     (the limit is {MAX_DYN_SMEM}); use v3_r8 or v2",
                    f1.tag,
                    f1.smem(k)
                )));
            }
        }
        TileCfg::X(f) => {
            let al = k.is_multiple_of(128)
                && [x.data, x.sf, w.data, w.sf].iter().all(|p| p % 16 == 0)
                && x.nvfp4
                && w.nvfp4;
            if !al {
                return Err(GpuError::Unsupported(format!(
                    "moe grouped GEMM tile {}: needs NVFP4 activations and weights, K % 128 == 0 \
                     (K = {k}) and 16-byte aligned codes and scales; use v3 or v1",
                    f.tag
                )));
            }
            if f.f16_tokens {
                if x.f16 == 0 {
                    return Err(GpuError::Unsupported(format!(
                        "moe grouped GEMM tile {}: the tokens' f16 workspace is missing \
                         (DevOperand::f16, {} x {k} f16: token_workspace)",
                        f.tag, x.rows
                    )));
                }
                launch_x_f16(g, x, k)?;
            }
            (f.tag, 128, f.threads(), f.smem())
        }
        _ => (c.tag(), c.bn(), 128u32, c.smem(k)),
    };
    let name = format!("moe_gemm_{tag}_{fmt}_{epi_tag}");
    let f = g.function("moe", &name)?;
    let grid_y = n.div_ceil(bn);
    // S forms: one flat grid dimension over the items (m-tile x n-tile, the n-tile fastest;
    // moe.cu moe_s_body).
    let items = (sched.tiles * grid_y) as i64;
    let flat = matches!(c, TileCfg::X(f) if f.shared_a);
    let grid = if flat {
        (items as usize, 1)
    } else {
        (sched.tiles, grid_y)
    };
    if grid.1 > 65535 || grid.0 > i32::MAX as usize {
        return Err(GpuError::Unsupported(format!(
            "{name}: {} m-tiles x {grid_y} n-tiles exceed the launch grid (N = {n})",
            sched.tiles
        )));
    }
    let (te, tr) = (ptr(g, &sched.t_exp), ptr(g, &sched.t_row));
    let (n64, k64) = (n as i64, k as i64);
    let mut a = g.stream.launch_builder(&f);
    let x_data = match c {
        TileCfg::X(f) if f.f16_tokens => x.f16,
        _ => x.data,
    };
    a.arg(&x_data).arg(&x.sf).arg(&x.global);
    a.arg(&w.data).arg(&w.sf).arg(&w.global);
    a.arg(&off64).arg(&te).arg(&tr).arg(&n64).arg(&k64);
    a.arg(&codes).arg(&sfp).arg(&og).arg(&mode).arg(&round);
    let early = early as i32;
    a.arg(&h).arg(&amax).arg(&out_dt).arg(&early);
    if flat {
        a.arg(&items);
    }
    // W64's two buffers (48 KB) and the static 1 KB table, R8's x at K > 2816 pass the
    // default 48 KB.
    if smem > 46 * 1024 {
        f.set_attribute(
            cudarc::driver::sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            smem as i32,
        )
        .map_err(|e| GpuError::Driver(format!("{name} shared memory attribute: {e}")))?;
    }
    let lc = LaunchConfig {
        grid_dim: (grid.0 as u32, grid.1 as u32, 1),
        block_dim: (threads, 1, 1),
        shared_mem_bytes: smem,
    };
    // SAFETY: matches the MOE_GEMM_KERNEL signature; x holds M rows of K (codes + scales or
    // bf16), w E x N x K, off64 E+1 rows with off64[E] = M, outputs M x N (codes M x N/2 and
    // scales M x N/16); the schedule covers exactly the rows of the offsets.
    unsafe { a.launch(lc) }.map_err(|e| GpuError::Driver(format!("launch {name}: {e}")))?;
    Ok(())
}

/// `moe_x_f16_v1`: x's NVFP4 rows (`x.rows` x `k`) decoded to f16 (code x block scale, the
/// S forms' k order) into `x.f16`.
fn launch_x_f16(g: &Gpu, x: &DevOperand, k: usize) -> Result<(), GpuError> {
    let blocks = (x.rows * k / 16) as i64;
    if blocks == 0 {
        return Ok(());
    }
    let f = g.function("moe", "moe_x_f16_v1")?;
    let grid = (blocks as usize)
        .div_ceil(256)
        .min(g.sm_count.max(1) as usize * 16);
    let mut a = g.stream.launch_builder(&f);
    a.arg(&x.data).arg(&x.sf).arg(&blocks).arg(&x.f16);
    let lc = LaunchConfig {
        grid_dim: (grid as u32, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: x.data holds rows x k / 2 code bytes, x.sf rows x k / 16 scale bytes (16-byte
    // aligned: checked by the caller), x.f16 rows x k f16 (token_workspace).
    unsafe { a.launch(lc) }.map_err(|e| GpuError::Driver(format!("launch moe_x_f16_v1: {e}")))?;
    Ok(())
}

/// Host-side view of one operand of a GEMM op's inputs.
enum HostOperand<'a> {
    Bf16(&'a Tensor),
    Fp4 {
        codes: &'a Tensor,
        sf: &'a Tensor,
        global: Vec<f32>,
    },
}

impl HostOperand<'_> {
    fn is_nvfp4(&self) -> bool {
        matches!(self, HostOperand::Fp4 { .. })
    }
}

struct GemmInputs<'a> {
    x: HostOperand<'a>,
    w: HostOperand<'a>,
    m: usize,
    n: usize,
    k: usize,
    e: usize,
    offsets: Vec<i64>,
}

fn float_not_bf16(inputs: &TensorMap, names: &[&str]) -> Option<String> {
    for &nm in names {
        if let Some(t) = inputs.get(nm) {
            if t.dtype() != DType::BF16 {
                return Some(format!(
                    "v1 multiplies bf16 on tensor cores: '{nm}' is {} (it would be rounded); cast \
                     it to bf16 or pass the NVFP4 form (codes + block scales + global scale)",
                    t.dtype()
                ));
            }
        }
    }
    None
}

/// `v2_v8` multiplies NVFP4 by NVFP4 only.
fn v8_needs_fp4(version: &str, inputs: &TensorMap, w: &str) -> Option<String> {
    if (version.starts_with("v2_v8") || version.starts_with("v3_"))
        && !(inputs.contains_key("x_fp4") && inputs.contains_key(&format!("{w}_fp4")))
    {
        return Some(format!(
            "{version} takes NVFP4 activations and weights ('x_fp4', '{w}_fp4'); bf16 operands run on v1 / v2 / v3"
        ));
    }
    None
}

fn gemm1_applicable(version: &str, inputs: &TensorMap, _: &Params) -> Option<String> {
    float_not_bf16(inputs, &["x", "w1"]).or_else(|| v8_needs_fp4(version, inputs, "w1"))
}

fn gemm2_applicable(version: &str, inputs: &TensorMap, _: &Params) -> Option<String> {
    float_not_bf16(inputs, &["x", "w2"]).or_else(|| v8_needs_fp4(version, inputs, "w2"))
}

fn activation<'a>(inp: &Inputs<'a>) -> Result<(HostOperand<'a>, usize, usize), GpuError> {
    if let Some(x) = inp.get("x") {
        if inp.get("x_fp4").is_some() {
            return Err(inp
                .invalid("give either 'x' or 'x_fp4' + 'sf' + 'global_scale', not both")
                .into());
        }
        inp.rank("x", x, 2)?;
        inp.dtype("x", x, &[DType::BF16])?;
        return Ok((HostOperand::Bf16(x), x.shape[0], x.shape[1]));
    }
    let q = inp.req("x_fp4")?;
    inp.dtype("x_fp4", q, &[DType::U8])?;
    inp.rank("x_fp4", q, 2)?;
    let (m, k) = (q.shape[0], q.shape[1] * 2);
    if k % 16 != 0 || k == 0 {
        return Err(inp
            .err(
                "x_fp4",
                format!(
                    "K = 2 * {} = {k} must be a positive multiple of 16 (the NVFP4 block)",
                    q.shape[1]
                ),
            )
            .into());
    }
    let sf = inp.req("sf")?;
    inp.dtype("sf", sf, &[DType::U8])?;
    inp.shape("sf", sf, &[m, k / 16], "(M, K/16) linear layout")?;
    let (_, gl) = inp.float("global_scale", 1)?;
    if gl.len() != 1 || !(gl[0].is_finite() && gl[0] > 0.0) {
        return Err(inp
            .err("global_scale", "must hold one finite value > 0")
            .into());
    }
    Ok((
        HostOperand::Fp4 {
            codes: q,
            sf,
            global: gl,
        },
        m,
        k,
    ))
}

fn weights<'a>(
    inp: &Inputs<'a>,
    p: &str,
) -> Result<(HostOperand<'a>, usize, usize, usize), GpuError> {
    if let Some(w) = inp.get(p) {
        inp.rank(p, w, 3)?;
        inp.dtype(p, w, &[DType::BF16])?;
        if w.shape[0] == 0 {
            return Err(inp.err(p, "needs E > 0 experts").into());
        }
        return Ok((HostOperand::Bf16(w), w.shape[0], w.shape[1], w.shape[2]));
    }
    let qn = format!("{p}_fp4");
    let sn = format!("{p}_sf");
    let gn = format!("{p}_global_scale");
    let q = inp.get(&qn).ok_or_else(|| {
        inp.invalid(format!(
            "missing weights: give '{p}' (bf16 [E, N, K]) or '{qn}' + '{sn}' + '{gn}'"
        ))
    })?;
    inp.dtype(&qn, q, &[DType::U8])?;
    inp.rank(&qn, q, 3)?;
    let (e, n, k) = (q.shape[0], q.shape[1], q.shape[2] * 2);
    if k % 16 != 0 || k == 0 || e == 0 {
        return Err(inp
            .err(
                &qn,
                format!(
                    "needs E > 0 and K = 2 * {} = {k} a positive multiple of 16 (the NVFP4 block)",
                    q.shape[2]
                ),
            )
            .into());
    }
    let sf = inp.req(&sn)?;
    inp.dtype(&sn, sf, &[DType::U8])?;
    inp.shape(&sn, sf, &[e, n, k / 16], "(E, N, K/16)")?;
    let (_, gl) = inp.float(&gn, 1)?;
    if gl.len() != e || gl.iter().any(|v| !(v.is_finite() && *v > 0.0)) {
        return Err(inp
            .err(&gn, format!("must hold {e} finite values > 0"))
            .into());
    }
    Ok((
        HostOperand::Fp4 {
            codes: q,
            sf,
            global: gl,
        },
        e,
        n,
        k,
    ))
}

fn offsets(inp: &Inputs, e: usize, m: usize) -> Result<Vec<i64>, GpuError> {
    let (t, v) = inp.int("expert_offsets")?;
    inp.shape(
        "expert_offsets",
        t,
        &[e + 1],
        "(E+1,) with E from the weights",
    )?;
    for (i, &o) in v.iter().enumerate() {
        if o < 0 {
            return Err(inp
                .err("expert_offsets", format!("entry {i} = {o} is negative"))
                .into());
        }
        if i > 0 && o < v[i - 1] {
            return Err(inp
                .err("expert_offsets", format!("not non-decreasing at entry {i}"))
                .into());
        }
    }
    if v[0] != 0 || v[e] != m as i64 {
        return Err(inp
            .err(
                "expert_offsets",
                format!(
                    "must start at 0 and end at M = {m} (the activation rows); got {} .. {}",
                    v[0], v[e]
                ),
            )
            .into());
    }
    Ok(v)
}

fn gemm_inputs<'a>(inp: &Inputs<'a>, wname: &str) -> Result<GemmInputs<'a>, GpuError> {
    let (x, m, kx) = activation(inp)?;
    let (w, e, n, k) = weights(inp, wname)?;
    if kx != k {
        return Err(inp
            .invalid(format!("activation K = {kx} but {wname} K = {k}"))
            .into());
    }
    let offsets = offsets(inp, e, m)?;
    Ok(GemmInputs {
        x,
        w,
        m,
        n,
        k,
        e,
        offsets,
    })
}

/// Uploaded operand (keeps the device buffers alive).
struct Uploaded {
    _bufs: Vec<crate::runtime::DevTensor>,
    op: DevOperand,
}

fn upload_operand(g: &Gpu, h: &HostOperand) -> Result<Uploaded, GpuError> {
    let st = &g.stream;
    match h {
        HostOperand::Bf16(t) => {
            let d = g.upload(t)?;
            let op = DevOperand {
                data: d.ptr(st),
                sf: 0,
                global: 0,
                nvfp4: false,
                rows: t.shape.first().copied().unwrap_or(0),
                f16: 0,
            };
            Ok(Uploaded { _bufs: vec![d], op })
        }
        HostOperand::Fp4 { codes, sf, global } => {
            let c = g.upload(codes)?;
            let s = g.upload(sf)?;
            let gl = g.upload(&Tensor::from_f32(&[global.len()], global.clone()))?;
            let op = DevOperand {
                data: c.ptr(st),
                sf: s.ptr(st),
                global: gl.ptr(st),
                nvfp4: true,
                rows: codes.shape.first().copied().unwrap_or(0),
                f16: 0,
            };
            Ok(Uploaded {
                _bufs: vec![c, s, gl],
                op,
            })
        }
    }
}

struct Prepared {
    _x: Uploaded,
    _w: Uploaded,
    _xh: Option<CudaSlice<u8>>,
    x: DevOperand,
    w: DevOperand,
    _off: crate::runtime::DevTensor,
    off64: u64,
    sched: Schedule,
}

fn prepare(g: &Gpu, version: &str, gi: &GemmInputs) -> Result<Prepared, GpuError> {
    let c = TileCfg::pick(
        version,
        gi.m,
        gi.e,
        gi.k,
        gi.x.is_nvfp4() && gi.w.is_nvfp4(),
    )?;
    let mut x = upload_operand(g, &gi.x)?;
    let w = upload_operand(g, &gi.w)?;
    let xh = token_workspace(g, c, gi.m, gi.k)?;
    if let Some(b) = &xh {
        x.op.f16 = ptr(g, b);
    }
    let off = g.upload(&Tensor::from_i64(&[gi.e + 1], gi.offsets.clone()))?;
    let off64 = off.ptr(&g.stream);
    let sched = Schedule::new(g, c, gi.m, gi.e)?;
    sched.launch(g, off64, gi.e)?;
    Ok(Prepared {
        x: x.op,
        w: w.op,
        _x: x,
        _w: w,
        _xh: xh,
        _off: off,
        off64,
        sched,
    })
}

fn param_err(op: &str, name: &str, msg: String) -> GpuError {
    OpError::Param {
        op: op.into(),
        name: name.into(),
        msg,
    }
    .into()
}

fn run_gemm1(
    g: &Gpu,
    version: &str,
    inputs: &TensorMap,
    p: &Params,
    opts: &RunOpts,
) -> Result<TensorMap, GpuError> {
    const OP: &str = "moe_expert_gemm1_relu2_nvfp4";
    let inp = Inputs::new(OP, inputs);
    let gi = gemm_inputs(&inp, "w1")?;
    if gi.n % 16 != 0 {
        return Err(inp
            .invalid(format!(
                "N = {} must be a multiple of 16 to quantize h",
                gi.n
            ))
            .into());
    }
    let out_g = match inp.opt_float("out_global_scale", 1)? {
        Some((_, v)) if v.len() == 1 => {
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
        Some(_) => return Err(inp.err("out_global_scale", "must hold one value").into()),
        None => None,
    };
    let ms = p.str("mode")?;
    let mode = Nvfp4Mode::parse(ms)
        .ok_or_else(|| param_err(OP, "mode", format!("'{ms}' is not kernel or exact")))?;
    let round_bf16 = match p.str("round_before_quant")? {
        "bf16" => true,
        "none" => false,
        other => {
            return Err(param_err(
                OP,
                "round_before_quant",
                format!("'{other}' is not none or bf16"),
            ))
        }
    };
    let emit_h = p.bool("emit_h")?;
    let (m, n) = (gi.m, gi.n);
    let pr = prepare(g, version, &gi)?;
    let st = &g.stream;
    let codes = g.alloc_poisoned(&[m, n / 2], DType::U8, opts.poison)?;
    let sf = g.alloc_poisoned(&[m, n / 16], DType::U8, opts.poison)?;
    let h = if emit_h {
        Some(g.alloc_poisoned(&[m, n], DType::BF16, opts.poison)?)
    } else {
        None
    };
    let gs = match out_g {
        Some(v) => v,
        None => {
            if m == 0 {
                return Err(inp
                    .invalid(
                        "cannot derive the output global_scale from an empty h (M = 0); pass \
                         out_global_scale",
                    )
                    .into());
            }
            let amax = g.alloc_raw::<u32>(1)?;
            let epi = Epilogue::Quant {
                codes: 0,
                sf: 0,
                out_global: 0,
                mode,
                round_bf16,
                h: 0,
                amax: ptr(g, &amax),
            };
            launch_gemm(g, &pr.sched, &pr.x, &pr.w, pr.off64, n, gi.k, &epi)?;
            let host = g.stream.clone_dtoh(&amax).map_err(drv("amax download"))?;
            let a = f32::from_bits(host.first().copied().unwrap_or(0));
            if !(a.is_finite() && a > 0.0) {
                return Err(inp
                    .invalid(format!(
                        "cannot derive global_scale = 448*6/amax from amax = {a} (the input is \
                         all zeros or holds inf/NaN); pass global_scale explicitly"
                    ))
                    .into());
            }
            let v = (448.0f32 * 6.0f32) / a;
            if !v.is_finite() {
                return Err(inp
                    .invalid(format!(
                        "global_scale = 448*6/amax overflows f32 for amax = {a:e}; pass \
                         global_scale explicitly"
                    ))
                    .into());
            }
            v
        }
    };
    let gd = g.upload(&Tensor::from_f32(&[1], vec![gs]))?;
    let epi = Epilogue::Quant {
        codes: codes.ptr(st),
        sf: sf.ptr(st),
        out_global: gd.ptr(st),
        mode,
        round_bf16,
        h: h.as_ref().map_or(0, |t| t.ptr(st)),
        amax: 0,
    };
    launch_gemm(g, &pr.sched, &pr.x, &pr.w, pr.off64, n, gi.k, &epi)?;
    g.sync()?;
    let mut out = reference::op::outputs([
        ("x_fp4", g.download(&codes, "x_fp4")?),
        ("sf", g.download(&sf, "sf")?),
        ("global_scale", Tensor::from_f32(&[1], vec![gs])),
    ]);
    if let Some(h) = h {
        out.insert("h".into(), g.download(&h, "h")?);
    }
    Ok(out)
}

fn run_gemm2(
    g: &Gpu,
    version: &str,
    inputs: &TensorMap,
    p: &Params,
    opts: &RunOpts,
) -> Result<TensorMap, GpuError> {
    const OP: &str = "moe_expert_gemm2";
    let inp = Inputs::new(OP, inputs);
    let gi = gemm_inputs(&inp, "w2")?;
    let dt = match p.str("out_dtype")? {
        "bf16" => DType::BF16,
        "f32" => DType::F32,
        other => {
            return Err(param_err(
                OP,
                "out_dtype",
                format!("'{other}' is not f32 or bf16"),
            ))
        }
    };
    let pr = prepare(g, version, &gi)?;
    let out = g.alloc_poisoned(&[gi.m, gi.n], dt, opts.poison)?;
    let epi = Epilogue::Store {
        out: out.ptr(&g.stream),
        dtype: dt,
    };
    launch_gemm(g, &pr.sched, &pr.x, &pr.w, pr.off64, gi.n, gi.k, &epi)?;
    g.sync()?;
    Ok(reference::op::outputs([("out", g.download(&out, "out")?)]))
}

// ---------------------------------------------------------------------------------------------
// moe_finalize

fn finalize_applicable(_: &str, inputs: &TensorMap, _: &Params) -> Option<String> {
    match inputs.get("expert_out").map(|t| t.dtype()) {
        Some(DType::F32) | Some(DType::BF16) | None => None,
        Some(d) => Some(format!(
            "'expert_out' is {d}; the kernel reads f32 or bf16 (the GEMM2 output dtypes)"
        )),
    }
}

/// `out` `[t, h]` f32 from `eo` `[M, h]` (dtype code 0 f32 / 1 bf16), weights and inverse
/// `[t, k]` (f32 / i32).
#[allow(clippy::too_many_arguments)]
pub fn launch_finalize(
    g: &Gpu,
    eo: u64,
    eo_dt: i32,
    wts: u64,
    inverse: u64,
    t: usize,
    k: usize,
    h: usize,
    out: u64,
) -> Result<(), GpuError> {
    if t * h == 0 {
        return Ok(());
    }
    let f = g.function("moe", "moe_finalize_v1")?;
    let (t64, k64, h64) = (t as i64, k as i64, h as i64);
    let mut a = g.stream.launch_builder(&f);
    a.arg(&eo)
        .arg(&eo_dt)
        .arg(&wts)
        .arg(&inverse)
        .arg(&t64)
        .arg(&k64)
        .arg(&h64)
        .arg(&out);
    // SAFETY: eo holds M x h elements with every inverse entry < M (checked by the caller),
    // wts/inverse t x k, out t x h f32.
    unsafe { a.launch(cfg(grid_for(g, (t * h) as u64, 256), 256, 0)) }
        .map_err(drv("launch moe_finalize_v1"))?;
    Ok(())
}

fn run_finalize(
    g: &Gpu,
    _version: &str,
    inputs: &TensorMap,
    _p: &Params,
    opts: &RunOpts,
) -> Result<TensorMap, GpuError> {
    const OP: &str = "moe_finalize";
    let inp = Inputs::new(OP, inputs);
    let eo = inp.req("expert_out")?;
    inp.rank("expert_out", eo, 2)?;
    inp.dtype("expert_out", eo, &[DType::F32, DType::BF16])?;
    let wt = inp.req("topk_weights")?;
    inp.rank("topk_weights", wt, 2)?;
    inp.dtype("topk_weights", wt, &[DType::F32])?;
    let (it, iv) = inp.int("inverse")?;
    inp.shape("inverse", it, &wt.shape, "topk_weights' shape (T, k)")?;
    let (m, h) = (eo.shape[0], eo.shape[1]);
    if m > i32::MAX as usize {
        return Err(inp
            .err(
                "expert_out",
                format!(
                    "{m} rows do not fit the kernel's i32 'inverse' indices (at most 2^31 - 1)"
                ),
            )
            .into());
    }
    if let Some((i, &r)) = iv
        .iter()
        .enumerate()
        .find(|(_, &r)| r < 0 || r as usize >= m)
    {
        return Err(inp
            .err(
                "inverse",
                format!("entry {i} = {r} is outside 0..{m} (expert_out rows)"),
            )
            .into());
    }
    let (t, k) = (wt.shape[0], wt.shape[1]);
    let inv32 = Tensor::from_i32(&it.shape, iv.iter().map(|&r| r as i32).collect());
    let d_eo = g.upload(eo)?;
    let d_w = g.upload(wt)?;
    let d_i = g.upload(&inv32)?;
    let out = g.alloc_poisoned(&[t, h], DType::F32, opts.poison)?;
    let st = &g.stream;
    let dt = if eo.dtype() == DType::BF16 { 1 } else { 0 };
    launch_finalize(
        g,
        d_eo.ptr(st),
        dt,
        d_w.ptr(st),
        d_i.ptr(st),
        t,
        k,
        h,
        out.ptr(st),
    )?;
    g.sync()?;
    Ok(reference::op::outputs([("out", g.download(&out, "out")?)]))
}

// ---------------------------------------------------------------------------------------------
// bench at the Super shapes

/// Random device bytes: kind 0 codes, 1 E4M3 scales in [1/8, 8), 2 bf16 in (-1, 1).
pub fn fill(g: &Gpu, p: u64, bytes: usize, seed: u64, kind: i32) -> Result<(), GpuError> {
    if bytes == 0 {
        return Ok(());
    }
    let f = g.function("moe", "moe_fill")?;
    let n = bytes as i64;
    let mut a = g.stream.launch_builder(&f);
    a.arg(&p).arg(&n).arg(&seed).arg(&kind);
    // SAFETY: p holds `bytes` bytes.
    unsafe { a.launch(cfg(grid_for(g, bytes as u64, 256), 256, 0)) }
        .map(|_| ())
        .map_err(drv("launch moe_fill"))
}

fn timing_json(t: &crate::runtime::Timing) -> serde_json::Value {
    serde_json::json!({"median_us": t.median_us, "p10_us": t.p10_us, "p90_us": t.p90_us,
                       "samples": t.samples})
}

/// The routed expert layer at T tokens with the Super shapes (512 experts, top-22, latent 1024,
/// expert width 2688, NVFP4 weights and activations): GEMM1 + relu^2 + NVFP4 epilogue, then
/// GEMM2 (bf16 out) on the permuted rows; weights generated on the device. `floor_us` is the
/// issue's floor for this T. Returns timings per launch and % of the floor.
pub fn bench_expert_layer(g: &Gpu, t: usize, floor_us: f64) -> Result<serde_json::Value, GpuError> {
    // DUET_MOE_VERSIONS=a,b,...: only these (the first of the list, the reference of
    // `max_rel_vs_first`, v3 and v4 always run).
    let keep = std::env::var("DUET_MOE_VERSIONS").ok();
    let keep: Option<Vec<&str>> = keep
        .as_deref()
        .map(|k| k.split(',').map(str::trim).collect());
    bench_expert_layer_versions(g, t, floor_us, keep.as_deref())
}

/// [`bench_expert_layer`] over the GEMM versions in `keep` (plus the list's first, v3 and v4;
/// `None`: every version). Each version's layer also runs as a graph with programmatic edges
/// (`graph_pdl`) on poisoned outputs, and `pdl_out_matches_eager` says whether GEMM2's output
/// then has the eager launches' bits.
pub fn bench_expert_layer_versions(
    g: &Gpu,
    t: usize,
    floor_us: f64,
    keep: Option<&[&str]>,
) -> Result<serde_json::Value, GpuError> {
    let (e, k, l, i) = (512usize, 22usize, 1024usize, 2688usize);
    let m = t * k;
    // Routing: k distinct experts per token (seeded LCG, uniform).
    let mut s: u64 = 0x5eed_0000 + t as u64;
    let mut idx = Vec::with_capacity(m);
    for _ in 0..t {
        let mut chosen: Vec<i32> = Vec::with_capacity(k);
        while chosen.len() < k {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let c = ((s >> 33) % e as u64) as i32;
            if !chosen.contains(&c) {
                chosen.push(c);
            }
        }
        idx.extend(chosen);
    }
    let d_idx = g.upload(&Tensor::from_i32(&[t, k], idx))?;
    let st = &g.stream;
    let raw = |n: usize| g.alloc_raw::<u8>(n);
    // Weights: w1 [E, I, L], w2 [E, L, I], NVFP4.
    let w1 = raw(e * i * l / 2)?;
    let w1s = raw(e * i * l / 16)?;
    let w2 = raw(e * l * i / 2)?;
    let w2s = raw(e * l * i / 16)?;
    let x = raw(m * l / 2)?;
    let xs = raw(m * l / 16)?;
    fill(g, ptr(g, &w1), e * i * l / 2, 1, 0)?;
    fill(g, ptr(g, &w1s), e * i * l / 16, 2, 1)?;
    fill(g, ptr(g, &w2), e * l * i / 2, 3, 0)?;
    fill(g, ptr(g, &w2s), e * l * i / 16, 4, 1)?;
    fill(g, ptr(g, &x), m * l / 2, 5, 0)?;
    fill(g, ptr(g, &xs), m * l / 16, 6, 1)?;
    let wg = g.upload(&Tensor::from_f32(&[e], vec![1.0; e]))?;
    let one = g.upload(&Tensor::from_f32(&[1], vec![1.0]))?;
    // Permutation outputs.
    let ptoken = g.alloc_raw::<i32>(m)?;
    let pslot = g.alloc_raw::<i32>(m)?;
    let inverse = g.alloc_raw::<i32>(m)?;
    let off64 = g.alloc_raw::<i64>(e + 1)?;
    let mut scratch = PermuteScratch::new(g, m, e)?;
    let po = PermuteOut {
        ptoken: ptr(g, &ptoken),
        pslot: ptr(g, &pslot),
        counts32: 0,
        off32: 0,
        off64: ptr(g, &off64),
        inverse: ptr(g, &inverse),
        tiles: None,
    };
    let idx_p = d_idx.ptr(st);
    launch_permute(g, idx_p, false, t, k, e, &mut scratch, &po)?;
    let offp = ptr(g, &off64);
    // GEMM1 out (NVFP4 [M, I]) -> GEMM2 in; GEMM2 out bf16 [M, L].
    let y = raw(m * i / 2)?;
    let ys = raw(m * i / 16)?;
    let out = raw(m * l * 2)?;
    let fp4 = |data: &CudaSlice<u8>, sf: &CudaSlice<u8>, global: u64| DevOperand {
        data: ptr(g, data),
        sf: ptr(g, sf),
        global,
        nvfp4: true,
        rows: m,
        f16: 0,
    };
    let xo = fp4(&x, &xs, one.ptr(st));
    let w1o = fp4(&w1, &w1s, wg.ptr(st));
    let yo = fp4(&y, &ys, one.ptr(st));
    let w2o = fp4(&w2, &w2s, wg.ptr(st));
    let epi1 = Epilogue::Quant {
        codes: yo.data,
        sf: yo.sf,
        out_global: one.ptr(st),
        mode: Nvfp4Mode::Kernel,
        round_bf16: false,
        h: 0,
        amax: 0,
    };
    let epi2 = Epilogue::Store {
        out: ptr(g, &out),
        dtype: DType::BF16,
    };
    g.sync()?;
    let small = t <= 64;
    let flops = 2.0 * 2.0 * (m * l * i) as f64;
    let experts_hit = {
        let offs = g
            .stream
            .clone_dtoh(&off64)
            .map_err(drv("offsets download"))?;
        offs.windows(2).filter(|w| w[1] > w[0]).count()
    };
    let weight_bytes = experts_hit as f64 * 2.0 * (l * i) as f64 * (0.5 + 1.0 / 16.0);
    let best = |a: &crate::runtime::Timing, b: &Option<crate::runtime::Timing>| {
        b.as_ref().map_or(a.median_us, |x| x.median_us)
    };
    // Every GEMM version's tile choice for this shape (v2 differs from v1 where it takes V8),
    // and the wgmma tiles (v1_w64, session 11: not yet run).
    // Each version's GEMM2 output is compared with the first's (max |a - b| / max |a| over
    // the bf16 values; GEMM1's NVFP4 codes may flip where accumulation orders differ), and
    // only versions that agree within BENCH_AGREE count for `fastest_version`.
    const BENCH_AGREE: f64 = 0.05;
    let mut versions = vec![];
    let mut tiles_seen = vec![];
    let mut first_out: Option<Vec<f32>> = None;
    // Decode-sized T (<= 8 rows per expert on average): v8, m16, every R form, v3's pick; else
    // m64 (v1), w64, every X form, v3's pick (= v1) and v4's (an X form).
    let forced: Vec<String> = R_FORMS
        .iter()
        .filter(|f| !f.general)
        .map(|f| format!("v3_{}", f.tag))
        .collect();
    let forced_x: Vec<String> = X_FORMS.iter().map(|f| format!("v4_{}", f.tag)).collect();
    let mut list: Vec<&str> = if m <= 8 * e {
        let mut l = vec!["v2", "v1"];
        l.extend(forced.iter().map(|s| s.as_str()));
        l
    } else {
        let mut l = vec!["v1", "v1_w64"];
        l.extend(forced_x.iter().map(|s| s.as_str()));
        l
    };
    list.push("v3");
    list.push("v4");
    if let Some(keep) = keep {
        let first = list.first().copied();
        list.retain(|v| Some(*v) == first || *v == "v3" || *v == "v4" || keep.contains(v));
        // "A/B": GEMM1 on version A, GEMM2 on version B (same m-tile rows; session 32).
        list.extend(keep.iter().filter(|v| v.contains('/')));
    }
    // GEMM1's and GEMM2's outputs poisoned (a replay must write every byte again), and
    // GEMM2's output bits after the stream's work.
    let poison_outs = |seed: u64| -> Result<(), GpuError> {
        fill(g, ptr(g, &y), m * i / 2, seed, 0)?;
        fill(g, ptr(g, &ys), m * i / 16, seed + 1, 0)?;
        fill(g, ptr(g, &out), m * l * 2, seed + 2, 0)
    };
    let out_bits = || -> Result<Vec<u8>, GpuError> {
        g.sync()?;
        g.stream
            .clone_dtoh(&out)
            .map_err(drv("moe bench output download"))
    };
    for ver in list {
        // GEMM1 has K = latent, GEMM2 K = width: `v3` may split them differently; "A/B"
        // names the two GEMMs' versions.
        let (ver1, ver2) = ver.split_once('/').unwrap_or((ver, ver));
        let cfgc = TileCfg::pick(ver1, m, e, l, true)?;
        let cfg2 = TileCfg::pick(ver2, m, e, i, true)?;
        if tiles_seen.contains(&(cfgc.tag(), cfg2.tag())) {
            continue;
        }
        tiles_seen.push((cfgc.tag(), cfg2.tag()));
        let sched = Schedule::new(g, cfgc, m, e)?;
        sched.launch(g, offp, e)?;
        // GEMM2 on m-tiles of its own height (v4: x64 for GEMM1, s256 for GEMM2) needs a
        // schedule of its own, launched in the layer too.
        let sched2 = if cfg2.bm() != cfgc.bm() {
            let s2 = Schedule::new(g, cfg2, m, e)?;
            s2.launch(g, offp, e)?;
            Some(s2)
        } else {
            None
        };
        let s2 = sched2.as_ref().unwrap_or(&sched);
        let launch_sched2 = || match &sched2 {
            Some(s2) => s2.launch(g, offp, e),
            None => Ok(()),
        };
        // f16-token forms: the decoded tokens' workspaces (filled in each launch).
        let xh1 = token_workspace(g, cfgc, m, l)?;
        let xh2 = token_workspace(g, cfg2, m, i)?;
        let xo = DevOperand {
            f16: xh1.as_ref().map_or(0, |b| ptr(g, b)),
            ..xo
        };
        let yo = DevOperand {
            f16: xh2.as_ref().map_or(0, |b| ptr(g, b)),
            ..yo
        };
        g.sync()?;
        let gemm1 = || launch_gemm(g, &sched, &xo, &w1o, offp, i, l, &epi1);
        // GEMM2 follows GEMM1, which follows the schedule(s): `early` (its weights start
        // streaming during GEMM1's tail under a programmatic edge).
        let gemm2 = || launch_gemm_as(g, s2, cfg2, &yo, &w2o, offp, l, i, &epi2, true);
        gemm1()?;
        gemm2()?;
        g.sync()?;
        let got: Vec<f32> = g
            .stream
            .clone_dtoh(&out)
            .map_err(drv("moe bench output download"))?
            .chunks_exact(2)
            .map(|b| f32::from_bits((u16::from_le_bytes([b[0], b[1]]) as u32) << 16))
            .collect();
        let max_rel = match &first_out {
            None => 0.0,
            Some(w) => {
                let (mut d, mut mx) = (0f64, 0f64);
                for (a, b) in w.iter().zip(&got) {
                    let (a, b) = (*a as f64, *b as f64);
                    d = d.max(if a.is_finite() && b.is_finite() {
                        (a - b).abs()
                    } else {
                        f64::INFINITY
                    });
                    mx = mx.max(a.abs());
                }
                if mx > 0.0 {
                    d / mx
                } else {
                    d
                }
            }
        };
        if first_out.is_none() {
            first_out = Some(got);
        }
        let (t1, t1g) = crate::bench::time_launch(g, small, gemm1)?;
        let (t2, t2g) = crate::bench::time_launch(g, small, gemm2)?;
        let (tl, tlg) = crate::bench::time_launch(g, small, || {
            sched.launch(g, offp, e)?;
            launch_sched2()?;
            gemm1()?;
            gemm2()
        })?;
        let layer_us = best(&tl, &tlg);
        // The same layer as a graph with programmatic edges (each kernel may launch while the
        // one before it finishes; GEMM2's r8 p forms issue their first weight stages before
        // their wait: `early`).
        // GEMM1's and GEMM2's outputs poisoned first: the replays must write every byte again.
        let eager_bits = out_bits()?;
        poison_outs(91)?;
        let tl_pdl = crate::bench::time_graph_pdl(g, || {
            sched.launch(g, offp, e)?;
            launch_sched2()?;
            gemm1()?;
            gemm2()
        })?;
        let tl_pdl_ok = tl_pdl.is_none() || out_bits()? == eager_bits;
        // The same GEMMs on a schedule the permutation fills (moe_perm_offsets): the layer
        // without the schedule launch, and the permutation's time with it. The tables are
        // checked against moe_tile_schedule's first.
        let sched_p = Schedule::new(g, cfgc, m, e)?;
        sched_p.poison(g, 77)?;
        let po_t = PermuteOut {
            tiles: Some(sched_p.out(g)),
            ..po
        };
        launch_permute(g, idx_p, false, t, k, e, &mut scratch, &po_t)?;
        g.sync()?;
        let tiles_match = sched_p.download(g)? == sched.download(g)?;
        let gemm1p = || launch_gemm(g, &sched_p, &xo, &w1o, offp, i, l, &epi1);
        let s2p = sched2.as_ref().unwrap_or(&sched_p);
        let gemm2p = || launch_gemm_as(g, s2p, cfg2, &yo, &w2o, offp, l, i, &epi2, true);
        let (tf, tfg) = crate::bench::time_launch(g, small, || {
            launch_sched2()?;
            gemm1p()?;
            gemm2p()
        })?;
        poison_outs(94)?;
        let tf_pdl = crate::bench::time_graph_pdl(g, || {
            launch_sched2()?;
            gemm1p()?;
            gemm2p()
        })?;
        let tf_pdl_ok = tf_pdl.is_none() || out_bits()? == eager_bits;
        let pdl_json = |t: &Option<(crate::runtime::Timing, usize)>, ok: bool| {
            t.as_ref().map(|(t, edges)| {
                serde_json::json!({"per_launch": timing_json(t), "us": t.median_us,
                                   "programmatic_edges": edges, "pdl_out_matches_eager": ok})
            })
        };
        let (tpt, tptg) = crate::bench::time_launch(g, small, || {
            launch_permute(g, idx_p, false, t, k, e, &mut scratch, &po_t)
        })?;
        versions.push(serde_json::json!({
            "version": ver, "tile": cfgc.tag(), "tile_gemm2": cfg2.tag(), "us": layer_us,
            "max_rel_vs_first": max_rel, "agrees": max_rel <= BENCH_AGREE,
            "layer": {"event": timing_json(&tl), "graph_per_launch": tlg.as_ref().map(timing_json),
                      "us": layer_us, "pct_of_floor": 100.0 * floor_us / layer_us,
                      "tflops": flops / (layer_us * 1e-6) / 1e12,
                      "weight_gb_per_s": weight_bytes / (layer_us * 1e-6) / 1e9,
                      "graph_pdl": pdl_json(&tl_pdl, tl_pdl_ok),
                      "note": "tile schedule + GEMM1 (relu^2 + NVFP4 epilogue) + GEMM2"},
            "gemm1": {"event": timing_json(&t1), "graph_per_launch": t1g.as_ref().map(timing_json)},
            "gemm2": {"event": timing_json(&t2), "graph_per_launch": t2g.as_ref().map(timing_json)},
            "layer_tiles_from_permute": {
                "us": best(&tf, &tfg), "pct_of_floor": 100.0 * floor_us / best(&tf, &tfg),
                "event": timing_json(&tf), "graph_per_launch": tfg.as_ref().map(timing_json),
                "tiles_match": tiles_match,
                "graph_pdl": pdl_json(&tf_pdl, tf_pdl_ok),
                "permute_with_tiles": {"event": timing_json(&tpt),
                                        "graph_per_launch": tptg.as_ref().map(timing_json)},
                "note": "GEMM1 + GEMM2 on the m-tile schedule moe_perm_offsets fills"},
        }));
    }
    // The fused layer (one launch for both GEMMs on r8w8p4 tiles): its GEMM2 output against
    // the two r8w8p4 launches' bits on outputs poisoned in between (decode-sized T only).
    let fused = if m > 8 * e {
        serde_json::Value::Null
    } else {
        let form = TileCfg::R(fused_form());
        let sched = Schedule::new(g, form, m, e)?;
        sched.launch(g, offp, e)?;
        launch_gemm_as(g, &sched, form, &xo, &w1o, offp, i, l, &epi1, false)?;
        launch_gemm_as(g, &sched, form, &yo, &w2o, offp, l, i, &epi2, false)?;
        let two = out_bits()?;
        poison_outs(95)?;
        let fl = FusedLayer::new(
            g,
            &sched,
            &xo,
            &w1o,
            &epi1,
            &yo,
            &w2o,
            &epi2,
            offp,
            (i, l, l),
        )?;
        fl.launch(g)?;
        let got = out_bits()?;
        let (tfl, tflg) = crate::bench::time_launch(g, small, || {
            sched.launch(g, offp, e)?;
            fl.launch(g)
        })?;
        let again = out_bits()?;
        serde_json::json!({
            "tile": FUSED_FORM, "lag": FUSED_LAG, "us": best(&tfl, &tflg),
            "event": timing_json(&tfl), "graph_per_launch": tflg.as_ref().map(timing_json),
            "matches_two_launches": got == two, "replays_match": again == two,
            "pct_of_floor": 100.0 * floor_us / best(&tfl, &tflg),
            "note": "tile schedule + one launch of GEMM1 and GEMM2 (moe_layer_r8w8p4_ff)"})
    };
    let (tp, _) = crate::bench::time_launch(g, false, || {
        launch_permute(g, idx_p, false, t, k, e, &mut scratch, &po)
    })?;
    let fastest = versions
        .iter()
        .filter(|v| v["agrees"] == true)
        .min_by(|a, b| {
            let f = |v: &serde_json::Value| v["us"].as_f64().unwrap_or(f64::MAX);
            f(a).total_cmp(&f(b))
        })
        .cloned()
        .unwrap_or(serde_json::Value::Null);
    Ok(serde_json::json!({
        "op": "moe_expert_layer",
        "shape": {"T": t, "E": e, "top_k": k, "latent": l, "width": i, "rows": m,
                  "weights": "nvfp4", "activations": "nvfp4", "gemm2_out": "bf16",
                  "tile": fastest["tile"], "experts_hit": experts_hit},
        "floor_us": floor_us,
        "fastest_version": fastest["version"],
        "layer": fastest["layer"],
        "gemm1": fastest["gemm1"],
        "gemm2": fastest["gemm2"],
        "versions": versions,
        "fused_layer": fused,
        "permute": {"event": timing_json(&tp), "note": "not part of the layer time"},
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// R_FORMS is moe.cu's MOE_R8_FORM list: same tags, rows, K split, warps and alignment.
    #[test]
    fn r_forms_match_the_kernel_file() {
        let src = include_str!("../../kernels/moe.cu");
        let lines: Vec<&str> = src
            .lines()
            .filter(|l| {
                [
                    "MOE_R8_FORM(",
                    "MOE_R8_FORMP(",
                    "MOE_R8_FORMU(",
                    "MOE_R8_FORMC(",
                ]
                .iter()
                .any(|p| l.starts_with(p))
            })
            .collect();
        assert_eq!(lines.len(), R_FORMS.len(), "{lines:?}");
        for (f, l) in R_FORMS.iter().zip(&lines) {
            let head = format!(
                "{}, {}, {}, {}, {},",
                f.tag, f.sk, f.warps, !f.general, f.rows
            );
            let ok = if f.cg > 1 {
                assert!(f.sk == 1 && f.warps == 4 && !f.general, "{f:?}");
                l.starts_with(&format!(
                    "MOE_R8_FORMC({}, {}, {}, {},",
                    f.tag, f.rows, f.stages, f.cg
                ))
            } else if f.stages == 0 {
                l.starts_with(&format!("MOE_R8_FORM({head}"))
            } else {
                l.starts_with(&format!("MOE_R8_FORMP({head} 1, {},", f.stages))
                    || l.starts_with(&format!("MOE_R8_FORMU({head} 1, {},", f.stages))
            };
            assert!(ok, "{f:?} does not match moe.cu's line {l}");
            assert!(
                gemm_versions().contains(&format!("v3_{}", f.tag).as_str()),
                "v3_{} missing from the GEMM versions",
                f.tag
            );
        }
        assert_eq!(gemm_versions().len(), 8 + R_FORMS.len() + X_FORMS.len());
    }

    /// X_FORMS is moe.cu's MOE_X_FORM list (tag, tokens, stages, group), then its MOE_S_FORM
    /// list (tag, tokens, stages), each a `v4_` version, and fits the shared memory of one SM.
    #[test]
    fn x_forms_match_the_kernel_file() {
        let src = include_str!("../../kernels/moe.cu");
        let lines: Vec<&str> = src
            .lines()
            .filter(|l| {
                l.starts_with("MOE_X_FORM(")
                    || l.starts_with("MOE_S_FORM(")
                    || l.starts_with("MOE_XW_FORM(")
            })
            .collect();
        assert_eq!(lines.len(), X_FORMS.len(), "{lines:?}");
        for (f, l) in X_FORMS.iter().zip(&lines) {
            assert!(
                f.store_threads == 256 || (f.x_tiles > 0 && f.store_threads == 512),
                "{f:?}: only an xw form stores its epilogue with 512 threads"
            );
            let head = if f.x_tiles > 0 {
                assert_eq!(f.group, 4, "{f:?}: the xw forms commit 4 k16 steps a group");
                assert!(!f.shared_a && !f.f16_tokens, "{f:?}");
                format!(
                    "MOE_XW_FORM({}, {}, {}, {}, {})",
                    f.tag, f.tokens, f.stages, f.x_tiles, f.store_threads
                )
            } else if f.shared_a {
                assert_eq!(f.group, 4, "{f:?}: an S form commits one 64-k step (4 k16)");
                assert!(
                    l.ends_with(&format!(", {})", f.f16_tokens as u8)),
                    "{f:?}: f16 tokens differ from moe.cu's line {l}"
                );
                format!("MOE_S_FORM({}, {}, {},", f.tag, f.tokens, f.stages)
            } else {
                format!(
                    "MOE_X_FORM({}, {}, {}, {},",
                    f.tag, f.tokens, f.stages, f.group
                )
            };
            assert!(
                l.starts_with(&head),
                "{f:?} does not match moe.cu's line {l}"
            );
            assert!(gemm_versions().contains(&format!("v4_{}", f.tag).as_str()));
            assert!(f.smem() <= MAX_DYN_SMEM, "{f:?}: {} bytes", f.smem());
        }
        assert!(XForm::by_tag(V4_FORM).is_some());
        assert!(XForm::by_tag(V4_LONG_FORM).is_some_and(|f| f.shared_a));
    }

    /// v4 takes an X form for prefill-sized NVFP4 GEMMs with K % 128 == 0 and v3's pick
    /// elsewhere; forced X forms fall back to v1's tiles where they cannot run.
    #[test]
    fn v4_picks() {
        let tag = |v: &str, m, k, ff| TileCfg::pick(v, m, 512, k, ff).map(|c| c.tag()).ok();
        assert_eq!(tag("v4", 90112, 1024, true), Some(V4_FORM));
        assert_eq!(tag("v4", 90112, 2688, true), Some(V4_LONG_FORM));
        assert_eq!(tag("v4", 90112, 2048, true), Some(V4_LONG_FORM));
        assert_eq!(tag("v4", 90112, 1920, true), Some(V4_FORM));
        assert_eq!(tag("v4", 90112, 1040, true), Some("m64"));
        assert_eq!(tag("v4", 90112, 1024, false), Some("m64"));
        assert_eq!(tag("v4", 1408, 2688, true), Some("r8w8p4"));
        assert_eq!(tag("v4", 22, 1024, true), Some("r8w8p4"));
        for f in X_FORMS {
            let v = format!("v4_{}", f.tag);
            assert_eq!(
                TileCfg::pick(&v, 10, 4, 256, true).ok(),
                Some(TileCfg::X(*f))
            );
            assert_eq!(tag(&v, 90112, 1024, false), Some("m64"));
            assert_eq!(tag(&v, 90112, 48, true), Some("m64"));
            assert_eq!(TileCfg::X(*f).bm(), f.tokens);
        }
        assert!(TileCfg::pick("v4_x96", 10, 4, 256, true).is_err());
    }

    /// Every forced R version parses to its form; v3 follows the average rows per expert and
    /// splits K past 1536; bf16 operands get a reason, not a kernel.
    #[test]
    fn v3_picks() {
        for f in R_FORMS {
            let v = format!("v3_{}", f.tag);
            assert_eq!(
                TileCfg::pick(&v, 10, 4, 256, true).ok(),
                Some(TileCfg::R(*f))
            );
            assert!(matches!(
                TileCfg::pick(&v, 10, 4, 256, false),
                Err(GpuError::Unsupported(_))
            ));
        }
        let tag = |m, k| TileCfg::pick("v3", m, 512, k, true).map(|c| c.tag()).ok();
        assert_eq!(tag(22, 1024), Some("r8w8p4"));
        assert_eq!(tag(22, 2688), Some("r8p4"));
        assert_eq!(tag(176, 1024), Some("r2p8"));
        assert_eq!(tag(176, 2688), Some("r2p8"));
        assert_eq!(tag(1408, 2688), Some("r8w8p4"));
        assert_eq!(tag(1408, 1024), Some("r8w8p4"));
        assert_eq!(tag(4000, 1024), Some("r8w8p4"));
        assert_eq!(tag(4000, 2688), Some("r8w8p4"));
        assert_eq!(tag(90112, 1024), Some("m64"));
        assert_eq!(
            TileCfg::pick("v3", 176, 512, 1024, false)
                .map(|c| c.tag())
                .ok(),
            Some("m16")
        );
        assert!(TileCfg::pick("v3_r9", 10, 4, 256, true).is_err());
        for f in R_FORMS {
            assert_eq!(f.bn() % 16, 0);
            assert!(f.general_form().general && f.general_form().rows == f.rows);
        }
    }
}
