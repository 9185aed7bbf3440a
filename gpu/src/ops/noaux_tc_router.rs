//! `noaux_tc_router` on the GPU (gpu/kernels/noaux_tc_router.cu): v1 block per token (any
//! shape, grouped), v2 warp per token (E = 32*N, one group, k <= 32), v3 block per token with a
//! bitonic sort (E <= 1024, one group), v4 warp per token with 16-byte loads and exact sigmoids
//! only for the candidates of an approximate-sigmoid filter (E = 256 or 512, one group,
//! k <= 32, 16-byte aligned logits); v5-v18 variants of v4 (v9: persistent warps, rows staged
//! in shared memory; v11: v9 with a compact hot path and a cheaper exact sigmoid; v12: v11
//! with a guessed and checked threshold; v18: v12 with fewer instructions a token, guessing
//! each token's threshold from its own row, probing on f16 pairs, its shared memory addressed
//! through two pinned 32-bit shared addresses (sessions 16-17; v15 and v17, its steps there,
//! were removed in session 17); `auto` picks by T
//! ([`auto_version`]). Every version
//! accepts every sigmoid mode (`tanh`, `exp`, `tanh_f32`) and is bit-exact with the reference.

use super::RunOpts;
use crate::runtime::{cfg, dtype_code, Gpu};
use crate::GpuError;
use cudarc::driver::PushKernelArg;
use reference::op::{Inputs, Params};
use reference::ops::noaux_tc_router::{GroupMask, NormMode, RouterConfig, SigmoidMode};
use reference::{DType, TensorMap};

const OP: &str = "noaux_tc_router";
/// E/32 values with a compiled v2 kernel.
const V2_N: &[usize] = &[1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 16, 20, 24, 32];
const V1_MAX_E: usize = 4096;
const V3_MAX_E: usize = 1024;
/// E/32 values with a compiled v4 kernel (`router_v4_n<N>`).
const V4_N: &[usize] = &[8, 16];

/// Every version `run` knows (the op registry in gpu/src/ops/mod.rs lists the ones
/// `duet check --backend gpu` runs).
pub const VERSIONS: &[&str] = &[
    "auto", "v1", "v2", "v3", "v4", "v5", "v6", "v7", "v8", "v9", "v10", "v11", "v12", "v18",
];

fn v4_ok(experts: usize, c: &RouterConfig) -> Option<String> {
    if c.n_group != 1 {
        return Some(format!("v4 is single-group (n_group = {})", c.n_group));
    }
    if c.top_k > 32 {
        return Some(format!("v4 needs top_k <= 32 (top_k = {})", c.top_k));
    }
    if !experts.is_multiple_of(32) || !V4_N.contains(&(experts / 32)) {
        return Some(format!(
            "v4 needs E = 32*N with N in {V4_N:?}, i.e. E = 256 or 512 (E = {experts})"
        ));
    }
    None
}

fn v3_ok(experts: usize, c: &RouterConfig) -> Option<String> {
    if c.n_group != 1 {
        return Some(format!("v3 is single-group (n_group = {})", c.n_group));
    }
    if experts > V3_MAX_E {
        return Some(format!("v3 needs E <= {V3_MAX_E} (E = {experts})"));
    }
    None
}

fn config(p: &Params) -> Result<RouterConfig, GpuError> {
    let perr = |name: &str, msg: String| reference::op::OpError::Param {
        op: OP.into(),
        name: name.into(),
        msg,
    };
    let norm_s = p.str("norm_mode")?;
    let sig_s = p.str("sigmoid")?;
    Ok(RouterConfig {
        top_k: p.usize("top_k")?,
        n_group: p.usize("n_group")?,
        topk_group: p.usize("topk_group")?,
        routed_scaling_factor: p.float("routed_scaling_factor")?,
        norm_topk_prob: p.bool("norm_topk_prob")?,
        norm_mode: NormMode::parse(norm_s)
            .ok_or_else(|| perr("norm_mode", format!("'{norm_s}' is not a norm mode")))?,
        sigmoid: SigmoidMode::parse(sig_s)
            .ok_or_else(|| perr("sigmoid", format!("'{sig_s}' is not tanh, exp or tanh_f32")))?,
        group_mask: GroupMask::parse(p.str("group_mask")?)
            .ok_or_else(|| perr("group_mask", "must be neg_inf or zero".into()))?,
    })
}

fn v2_ok(experts: usize, c: &RouterConfig) -> Option<String> {
    if c.n_group != 1 {
        return Some(format!("v2 is single-group (n_group = {})", c.n_group));
    }
    if c.top_k > 32 {
        return Some(format!("v2 needs top_k <= 32 (top_k = {})", c.top_k));
    }
    if !experts.is_multiple_of(32) || !V2_N.contains(&(experts / 32)) {
        return Some(format!(
            "v2 needs E = 32*N with N in {V2_N:?} (E = {experts})"
        ));
    }
    None
}

/// The version `auto` runs. Where v4 applies: v9 up to 64 tokens, v11 below 16384, v18 from
/// there (session 17, below). Before session 15 (E = 512, k = 22, graph replay, session 6
/// call 8): v9 wherever v4 applies, at every T (3.65 / 4.05 / 7.23 / 43.7 us at T = 1 / 64 / 4096 / 32768;
/// v4 3.88 / 4.84 / 10.66 / 63.2, v7 3.54 / 4.02 / 8.67 / 52.1, same run; bit-exact in every
/// gpu_router test). Otherwise v3 (block per token) at small T
/// (6 us at T = 64 vs 17 us for v2), v2 (warp per token) at large T (45 us at T = 4096 vs 108 us
/// for v3); the crossover is taken at T = 512. v1 where none applies. (`Launch::run` skips v4
/// for logits that are not 16-byte aligned: [`auto_version_aligned`].)
pub fn auto_version(tokens: usize, experts: usize, c: &RouterConfig) -> &'static str {
    auto_version_aligned(tokens, experts, c, true)
}

/// [`auto_version`] for logits whose address is (or is not) 16-byte aligned.
pub fn auto_version_aligned(
    tokens: usize,
    experts: usize,
    c: &RouterConfig,
    aligned: bool,
) -> &'static str {
    if aligned && v4_ok(experts, c).is_none() {
        // H200, session 17 call 2 (E = 512, k = 22, graph replay, two runs): v9 3.66-3.69 /
        // 4.11-4.14 us at T = 1 / 64 (v18 3.24-3.26 / 5.02-5.06: at T = 64 one token in ~60
        // takes the fallback and sets the time), v11 6.69-6.73 us at 4096 (v18 7.08-7.12, v9
        // 7.29-7.34), v18 29.32-29.34 us at 32768 (v17 30.44-30.48, v11 38.8, v9 43.9).
        // (Session 15: v12 from 16384; session 16: v17.) The decode engine takes auto at T = 1,
        // so v9 stays there.
        return match tokens {
            0..=64 => "v9",
            65..=16383 => "v11",
            _ => "v18",
        };
    }
    let (v2, v3) = (v2_ok(experts, c).is_none(), v3_ok(experts, c).is_none());
    match (tokens <= 512, v2, v3) {
        (true, _, true) => "v3",
        (_, true, _) => "v2",
        (_, _, true) => "v3",
        _ => "v1",
    }
}

/// Which versions can run these inputs.
pub fn applicable(version: &str, inputs: &TensorMap, p: &Params) -> Option<String> {
    let experts = inputs.get("logits").and_then(|t| t.shape.get(1).copied())?;
    let c = config(p).ok()?;
    if c.n_group > 1 && c.group_mask == GroupMask::Zero {
        return Some("group_mask = zero (DeepseekV3-style masking) has no GPU kernel; the kernels implement neg_inf (TRT-LLM, transformers' NemotronH)".into());
    }
    match version {
        "v2" => v2_ok(experts, &c),
        "v3" => v3_ok(experts, &c),
        "v4" | "v5" | "v6" | "v7" | "v8" | "v9" | "v10" | "v11" | "v12" | "v18" => {
            v4_ok(experts, &c)
        }
        "v1" if experts > V1_MAX_E => Some(format!("v1 needs E <= {V1_MAX_E} (E = {experts})")),
        _ => None,
    }
}

pub fn run(
    g: &Gpu,
    version: &str,
    inputs: &TensorMap,
    p: &Params,
    opts: &RunOpts,
) -> Result<TensorMap, GpuError> {
    let inp = Inputs::new(OP, inputs);
    let (lt, _) = inp.float("logits", 2)?;
    inp.dtype("logits", lt, &[DType::F32, DType::BF16, DType::F16])?;
    let (bt, _) = inp.float("bias", 1)?;
    inp.dtype("bias", bt, &[DType::F32, DType::BF16, DType::F16])?;
    let (tokens, experts) = (lt.shape[0], lt.shape[1]);
    if bt.shape[0] != experts {
        return Err(inp
            .invalid(format!(
                "'bias' has {} entries but 'logits' has {experts} experts",
                bt.shape[0]
            ))
            .into());
    }
    let c = config(p)?;
    c.validate(experts).map_err(|e| inp.invalid(e))?;
    let version = match version {
        "auto" => auto_version(tokens, experts, &c), // fresh uploads are 16-byte aligned
        v => v,
    };
    let logits = g.upload(lt)?;
    let bias = g.upload(bt)?;
    let k = c.top_k;
    let mut idx = g.alloc_poisoned(&[tokens, k], DType::I32, opts.poison)?;
    let mut w = g.alloc_poisoned(&[tokens, k], DType::F32, opts.poison)?;
    if tokens > 0 {
        let launch = Launch {
            logits: logits.ptr(&g.stream),
            logits_dt: dtype_code(lt.dtype())?,
            bias: bias.ptr(&g.stream),
            bias_dt: dtype_code(bt.dtype())?,
            tokens,
            experts,
            cfg: c,
            out_idx: idx.ptr(&g.stream),
            out_w: w.ptr(&g.stream),
            f32_sigmoid_bench: false,
        };
        launch.run(g, version)?;
    }
    g.sync()?;
    let _ = (&mut idx, &mut w);
    Ok(reference::op::outputs([
        ("topk_indices", g.download(&idx, "topk_indices")?),
        ("topk_weights", g.download(&w, "topk_weights")?),
    ]))
}

/// One router launch on device pointers (shared by `run` and the bench).
#[derive(Clone, Copy, Debug)]
pub struct Launch {
    pub logits: u64,
    pub logits_dt: i32,
    pub bias: u64,
    pub bias_dt: i32,
    pub tokens: usize,
    pub experts: usize,
    pub cfg: RouterConfig,
    pub out_idx: u64,
    pub out_w: u64,
    /// Bench only: use CUDA's f32 tanhf (not bit-exact) to measure the f64 sigmoid's cost.
    pub f32_sigmoid_bench: bool,
}

/// Diagnostics (bench only): DUET_ROUTER_BLOCKS_PER_SM=n caps a persistent version's grid at
/// n blocks per SM (0: one token per warp, not persistent). Read once per process, not per
/// launch.
fn blocks_per_sm_cap() -> Option<usize> {
    static CAP: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    *CAP.get_or_init(|| {
        std::env::var("DUET_ROUTER_BLOCKS_PER_SM")
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
    })
}

impl Launch {
    /// Launches `<prefix>_n<E/32>` (v2, v4: one warp per token, `per_block` tokens per block
    /// of `threads`, static shared memory) with the common argument list.
    /// `persistent` (v5, v6): at most as many blocks as can be resident at once (the kernel's
    /// warps walk the tokens).
    #[allow(clippy::too_many_arguments)]
    fn launch_warp_per_token(
        &self,
        g: &Gpu,
        prefix: &str,
        per_block: usize,
        threads: u32,
        args: (i32, f64, i32, i32, i32),
        persistent: bool,
    ) -> Result<(), GpuError> {
        let (k, r, norm, norm_mode, sig_mode) = args;
        // `router_v9_k22` names `router_v9_n<N>_k22` (v10 likewise); v11 kernels are per
        // sigmoid mode: `router_v11_n<N>[_k22]_s<mode>`.
        let mut name = match prefix.strip_suffix("_k22") {
            Some(p) => format!("{p}_n{}_k22", self.experts / 32),
            None => format!("{prefix}_n{}", self.experts / 32),
        };
        if ["router_v11", "router_v12", "router_v18"]
            .iter()
            .any(|v| prefix.starts_with(v))
        {
            if sig_mode == 2 {
                return Err(GpuError::Unsupported(format!(
                    "{prefix}: the bench-only f32 tanhf sigmoid has no v11 / v12 / v18 kernel"
                )));
            }
            name.push_str(&format!("_s{sig_mode}"));
        }
        let f = g.function("noaux_tc_router", &name)?;
        let mut blocks = self.tokens.div_ceil(per_block);
        let cap = blocks_per_sm_cap();
        if persistent && cap != Some(0) {
            let resident = f
                .occupancy_max_active_blocks_per_multiprocessor(threads, 0, None)
                .map_err(|e| GpuError::Driver(format!("{name} occupancy: {e}")))?
                .max(1) as usize;
            let resident = cap.map_or(resident, |c| c.min(resident));
            blocks = blocks.min(g.sm_count as usize * resident).max(1);
        }
        if blocks > i32::MAX as usize {
            return Err(GpuError::Unsupported(format!(
                "{name}: {} tokens need more than 2^31-1 blocks",
                self.tokens
            )));
        }
        let t = self.tokens as i64;
        let mut a = g.stream.launch_builder(&f);
        a.arg(&self.logits)
            .arg(&self.logits_dt)
            .arg(&self.bias)
            .arg(&self.bias_dt);
        a.arg(&t)
            .arg(&k)
            .arg(&r)
            .arg(&norm)
            .arg(&norm_mode)
            .arg(&sig_mode);
        a.arg(&self.out_idx).arg(&self.out_w);
        // SAFETY: matches the router_v2_n<N> / router_v4_n<N> signature (logits, dtype, bias,
        // dtype, T, k, scale, norm, norm mode, sigmoid, outputs); buffers hold T*E logits, E
        // biases and T*k outputs; `per_block` warps per block cover T tokens; no dynamic smem.
        unsafe { a.launch(cfg(blocks as u32, threads, 0)) }
            .map_err(|e| GpuError::Driver(format!("launch {name}: {e}")))?;
        Ok(())
    }

    pub fn run(&self, g: &Gpu, version: &str) -> Result<(), GpuError> {
        let c = &self.cfg;
        let (e, k) = (self.experts as i32, c.top_k as i32);
        let r = c.routed_scaling_factor;
        let norm = c.norm_topk_prob as i32;
        let norm_mode: i32 = match c.norm_mode {
            NormMode::Fp64 => 0,
            NormMode::Fp32DivideThenMultiply => 1,
            NormMode::Fp32NoEps => 2,
        };
        let sig: i32 = match c.sigmoid {
            _ if self.f32_sigmoid_bench => 2,
            SigmoidMode::Tanh => 0,
            SigmoidMode::Exp => 1,
            SigmoidMode::TanhF32 => 3,
        };
        match version {
            "v1" => {
                if self.experts > V1_MAX_E {
                    return Err(GpuError::Unsupported(format!(
                        "router v1 needs E <= {V1_MAX_E}"
                    )));
                }
                if self.tokens > i32::MAX as usize {
                    return Err(GpuError::Unsupported(
                        "router v1: more than 2^31-1 tokens".into(),
                    ));
                }
                let (ng, tg) = (c.n_group as i32, c.topk_group as i32);
                let smem = 8 * self.experts
                    + 8 * 32
                    + 8 * c.n_group
                    + 8 * self.experts
                    + 4 * c.top_k
                    + 4 * c.n_group;
                let f = g.function("noaux_tc_router", "router_v1")?;
                if smem > 48 * 1024 {
                    f.set_attribute(
                        cudarc::driver::sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                        smem as i32,
                    )
                    .map_err(|e| GpuError::Driver(format!("router_v1 smem attribute: {e}")))?;
                }
                let mut a = g.stream.launch_builder(&f);
                a.arg(&self.logits)
                    .arg(&self.logits_dt)
                    .arg(&self.bias)
                    .arg(&self.bias_dt);
                a.arg(&e)
                    .arg(&k)
                    .arg(&ng)
                    .arg(&tg)
                    .arg(&r)
                    .arg(&norm)
                    .arg(&norm_mode)
                    .arg(&sig);
                a.arg(&self.out_idx).arg(&self.out_w);
                // SAFETY: argument types and order match router_v1's signature; buffers hold
                // T*E logits, E biases and T*k outputs; smem is sized as the kernel documents.
                unsafe { a.launch(cfg(self.tokens as u32, 256, smem as u32)) }
                    .map_err(|e| GpuError::Driver(format!("launch router_v1: {e}")))?;
            }
            "v2" => {
                if let Some(why) = v2_ok(self.experts, c) {
                    return Err(GpuError::Unsupported(why));
                }
                // 4 tokens per 128-thread block.
                self.launch_warp_per_token(
                    g,
                    "router_v2",
                    4,
                    128,
                    (k, r, norm, norm_mode, sig),
                    false,
                )?;
            }
            "v3" => {
                if let Some(why) = v3_ok(self.experts, c) {
                    return Err(GpuError::Unsupported(why));
                }
                if self.tokens > i32::MAX as usize {
                    return Err(GpuError::Unsupported(
                        "router v3: more than 2^31-1 tokens".into(),
                    ));
                }
                let p = self.experts.next_power_of_two().max(32);
                let smem = 8 * p + 4 * self.experts + 4 * c.top_k;
                let f = g.function("noaux_tc_router", "router_v3")?;
                let mut a = g.stream.launch_builder(&f);
                a.arg(&self.logits)
                    .arg(&self.logits_dt)
                    .arg(&self.bias)
                    .arg(&self.bias_dt);
                a.arg(&e)
                    .arg(&k)
                    .arg(&r)
                    .arg(&norm)
                    .arg(&norm_mode)
                    .arg(&sig);
                a.arg(&self.out_idx).arg(&self.out_w);
                // SAFETY: matches router_v3; block = P threads (power of two >= E), smem as
                // documented in the kernel.
                unsafe { a.launch(cfg(self.tokens as u32, p as u32, smem as u32)) }
                    .map_err(|e| GpuError::Driver(format!("launch router_v3: {e}")))?;
            }
            "v4" | "v5" | "v6" | "v7" | "v8" | "v9" | "v10" | "v11" | "v12" | "v18" | "v9n"
            | "v7p" => {
                if let Some(why) = v4_ok(self.experts, c) {
                    return Err(GpuError::Unsupported(why));
                }
                if !self.logits.is_multiple_of(16) {
                    return Err(GpuError::Unsupported(format!(
                        "router {version} reads the logits with 16-byte loads: the pointer {:#x} \
                         is not 16-byte aligned",
                        self.logits
                    )));
                }
                // 8 warps (tokens at a time) per 256-thread block; logits 16-byte aligned
                // (checked above); v5 / v6 / v9 persistent; v7 / v8 one token per warp like
                // v4. v9 has kernels for k = 22 (`router_v9_n<N>_k22`).
                // v9n / v7p: bench-only diagnostic variants (E = 512, k = 22 / E = 512), not
                // in VERSIONS.
                if (version == "v9n" && (self.experts != 512 || k != 22))
                    || (version == "v7p" && self.experts != 512)
                {
                    return Err(GpuError::Unsupported(format!(
                        "router {version} is a diagnostic variant compiled for E = 512{} only \
                         (E = {}, top_k = {k})",
                        if version == "v9n" { ", top_k = 22" } else { "" },
                        self.experts
                    )));
                }
                let prefix =
                    if matches!(version, "v9" | "v10" | "v11" | "v12" | "v18" | "v9n") && k == 22 {
                        format!("router_{version}_k22")
                    } else {
                        format!("router_{version}")
                    };
                self.launch_warp_per_token(
                    g,
                    &prefix,
                    8,
                    256,
                    (k, r, norm, norm_mode, sig),
                    matches!(
                        version,
                        "v5" | "v6" | "v9" | "v10" | "v11" | "v12" | "v18" | "v9n"
                    ),
                )?;
            }
            "auto" => {
                let aligned = self.logits.is_multiple_of(16);
                let v = auto_version_aligned(self.tokens, self.experts, c, aligned);
                return self.run(g, v);
            }
            other => {
                return Err(GpuError::NoVersion {
                    op: OP.into(),
                    version: other.into(),
                    known: VERSIONS.join(", "),
                })
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod filter_bound_tests {
    //! CPU model of the router filters' bounds (gpu/kernels/noaux_tc_router.cu, "v8" and
    //! "EXPF" for v10): for an approximate sigmoid anywhere within the bound the H200 measured
    //! over all 2^32 inputs (gpu_router.rs), and any bias |b| <= 256 (the kernels' premise),
    //! the lower bound L is <= the exact key, and every key >= tau has L >= fl(tau - W): no
    //! winner is ever filtered out. The arithmetic is the kernels' f32 arithmetic.
    use proptest::prelude::*;
    use reference::ops::noaux_tc_router::{sigmoid, SigmoidMode};

    const MODES: [SigmoidMode; 3] = [SigmoidMode::Tanh, SigmoidMode::Exp, SigmoidMode::TanhF32];

    /// A bias: 0, +-256, or sign x 2^e x m with e in [-40, 7], m in [1, 2) (every binade the
    /// premise allows, so the rounding terms of the proof are exercised at their largest).
    fn bias() -> impl Strategy<Value = f32> {
        prop_oneof![
            Just(0.0f32),
            Just(256.0f32),
            Just(-256.0f32),
            (any::<bool>(), -40i32..8, 1.0f32..2.0).prop_map(|(neg, e, m)| {
                let v = m * 2f32.powi(e);
                if neg {
                    -v
                } else {
                    v
                }
            }),
        ]
    }

    fn logit() -> impl Strategy<Value = f32> {
        prop_oneof![
            -30.0f32..30.0,
            -1.0f32..1.0,
            Just(0.0f32),
            Just(f32::INFINITY),
            Just(f32::NEG_INFINITY),
            Just(88.0f32),
            Just(-88.0f32),
        ]
    }

    /// v8: L = fma(0.5, t, c_lo), c_lo = fl(fl(0.5 + b) - 2^-10), t an f32 with
    /// |0.5 t + 0.5 - s| <= 2^-11; window W = 2^-9.
    fn v8_case(x: f32, b: f32, frac: f64, mode: SigmoidMode) -> Result<(), TestCaseError> {
        let s = sigmoid(x, mode);
        let key = s + b;
        let t = (2.0 * s as f64 - 1.0 + frac * 2f64.powi(-10)) as f32;
        if ((0.5 * t as f64 + 0.5) - s as f64).abs() > 2f64.powi(-11) {
            return Ok(()); // outside the measured premise
        }
        let c_lo = (0.5f32 + b) - 2f32.powi(-10);
        // fma: one rounding of the exact 0.5 t + c_lo (exact in f64 here: both are f32 values
        // within 2^29 of each other's scale, or the smaller one is below the f32 rounding).
        let l = (0.5 * t as f64 + c_lo as f64) as f32;
        prop_assert!(
            l <= key,
            "v8 L {l:e} > key {key:e} (x {x:e}, b {b:e}, t {t:e}, {mode:?})"
        );
        let thr = key - 2f32.powi(-9);
        prop_assert!(
            l >= thr,
            "v8 L {l:e} < fl(key - W) {thr:e} (x {x:e}, b {b:e}, {mode:?})"
        );
        Ok(())
    }

    /// v10: L = fl(sa + c_lo), c_lo = fl(b - 2^-14), sa an f32 with |sa - s| <= 2^-20;
    /// window W = 2^-12.
    fn v10_case(x: f32, b: f32, frac: f64, mode: SigmoidMode) -> Result<(), TestCaseError> {
        let s = sigmoid(x, mode);
        let key = s + b;
        let sa = (s as f64 + frac * 2f64.powi(-20)) as f32;
        if (sa as f64 - s as f64).abs() > 2f64.powi(-20) {
            return Ok(());
        }
        let c_lo = b - 2f32.powi(-14);
        let l = sa + c_lo;
        prop_assert!(
            l <= key,
            "v10 L {l:e} > key {key:e} (x {x:e}, b {b:e}, sa {sa:e}, {mode:?})"
        );
        let thr = key - 2f32.powi(-12);
        prop_assert!(
            l >= thr,
            "v10 L {l:e} < fl(key - W) {thr:e} (x {x:e}, b {b:e}, {mode:?})"
        );
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4096))]

        #[test]
        fn v8_lower_bound_and_window(x in logit(), b in bias(), frac in -1.0f64..=1.0, m in 0usize..3) {
            v8_case(x, b, frac, MODES[m])?;
        }

        #[test]
        fn v10_lower_bound_and_window(x in logit(), b in bias(), frac in -1.0f64..=1.0, m in 0usize..3) {
            v10_case(x, b, frac, MODES[m])?;
        }
    }

    /// The extreme corners: the approximation at either end of its bound, biases at +-256 and
    /// at every power of two in between.
    #[test]
    fn corners() {
        let mut biases = vec![0.0f32, 256.0, -256.0];
        for e in -30..8 {
            for m in [1.0f32, 1.5, 1.999_999_9] {
                biases.push(m * 2f32.powi(e));
                biases.push(-m * 2f32.powi(e));
            }
        }
        for &b in &biases {
            for x in [-20.0f32, -3.0, -0.5, 0.0, 0.5, 3.0, 20.0, f32::INFINITY] {
                for frac in [-1.0, -0.5, 0.0, 0.5, 1.0] {
                    for mode in MODES {
                        v8_case(x, b, frac, mode).unwrap();
                        v10_case(x, b, frac, mode).unwrap();
                    }
                }
            }
        }
    }
}
