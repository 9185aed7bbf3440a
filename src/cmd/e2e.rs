//! `duet e2e (MODEL_DIR | --preset NAME) [--compare cpu,gpu,golden] [--decode N] [--mtp K]
//! [--dump FILE --path cpu|gpu] [--prefill-len N] [--bench-decode N [--copy-gbps G]] [--json]`
//!
//! Decode benchmark (`--bench-decode N`): per path, a prefill of `prefill_len` tokens, then N
//! greedy single-token decode steps at batch 1 run twice from the same cache: the first pass
//! is the warm-up (NVRTC compiles, first weight uploads, the same experts as the timed pass),
//! the second is timed step by step (the GPU stream synchronised before the clock stops).
//! Reported: median / p10 / p90 ms per step, tokens/s, the HBM floor of the step
//! (`reference::model::floor`: bytes / copy ceiling, `--copy-gbps`, default 3900 GB/s as
//! measured on the H200) under the production dtypes (bf16 weights, `--experts` format) and
//! as loaded (f32), and measured / floor, plus `op_breakdown`: host wall time per backend op
//! over the timed steps (`reference::model::TimedKernels`; `linear` keyed by weight shape), most
//! first, the top 8 also printed. The target (batch-1 decode step <= 1.5x the
//! HBM floor) is measured with
//!
//! `duet e2e --preset super --pattern MEMEMEM*E --experts nvfp4 --compare gpu --bench-decode 8`
//!
//! On the GPU path the bench also runs the decode engine (`reference::model::engine` on
//! `gpu::engine::GpuDevice`: activations, Mamba states and KV caches stay on the device; only the
//! token's embedding row goes up, the router's top-k and the logits come back) over the same
//! prefill and tokens: `bench_decode.paths.gpu-engine`, with `vs_model_path_max_rel` (its
//! logits vs the model path's over the warm-up steps); the CPU path likewise runs it on the
//! CPU device (`cpu-engine`, the same bits as the model path: 0). The GPU engine's
//! `op_breakdown` is GPU time per op from CUDA events around every op, measured in a third
//! pass over the same steps (the timed pass runs without events). If it cannot run,
//! `engine_error` says why and the model path's numbers stand.
//!
//! `--decode-engine` runs each path's teacher-forced decode (the `decode_logits` held to the
//! golden) through the decode engine instead of `Model::forward` (CPU device on the CPU path,
//! GPU device on the GPU path); JSON `decode_with` says which.
//!
//! (the super preset's weights are lazy: the GPU path generates each weight once on the host
//! and uploads it once; the CPU reference regenerates them on every use, smoke runs only).
//! Runs the Nemotron-H model end to end on the CPU reference and/or the GPU path
//! (`gpu::model::GpuKernels`, the same network with every op on the device) and compares each
//! with the golden of the model directory (`reference.safetensors`, written by
//! `tools/gen_nemotron_h_golden.py`): a per-layer divergence table of `hidden.{i}`, full-forward
//! logits and greedy tokens, token-by-token decode logits, MTP logits, plus tokens/s. With both
//! cpu and gpu, the GPU path is also compared with the CPU path layer by layer (`gpu_vs_cpu`).
//! Asking for gpu on a machine without one is one clear error (exit 2).
//!
//! JSON: the top-level `layers`, `first_divergent`, `largest_jump`, `outputs`, `greedy`,
//! `speculative` and `tokens_per_s` describe the first path run (cpu when asked for, else gpu);
//! `paths.{cpu,gpu}` has the same fields per path, `gpu_vs_cpu` the GPU-vs-CPU comparison;
//! `pass` covers all of them.
//!
//! Metrics per tensor: NMSE = sum (a-b)² / sum a² (from `compare`), and the max relative
//! error, defined here as `max|a - b| / max|a|` over the whole tensor (a = golden). A tensor
//! passes when its max relative error is <= `--tol` (1e-4); greedy tokens must agree exactly.
//! The per-layer table marks the first row over tolerance: with a clean model none is, with a
//! broken layer it is that layer's output.

use anyhow::{bail, Context};
use compare::Tolerance;
use reference::model::nemotron::ExpertFormat;
use reference::model::{
    decode_step_bytes, CpuKernels, DecodeBytes, ForwardOut, Model, ModelKernels, OpTime, Pass,
    SpecStats, StepBytes, TimedKernels,
};
use reference::{io, Tensor, TensorMap};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

/// Error growth between consecutive hidden states that counts as a jump.
const JUMP_RATIO: f64 = 10.0;
/// Errors below this (f32 noise) are treated as this when computing the growth.
const JUMP_FLOOR: f64 = 1e-6;

#[derive(clap::Args)]
pub struct Args {
    /// Model directory: config.json, model.safetensors (or shards + index), and optionally
    /// reference.safetensors (the golden).
    #[arg(required_unless_present = "preset", conflicts_with = "preset")]
    model_dir: Option<PathBuf>,
    /// Built-in model with seeded random weights: tiny (the fixture's dimensions) or super
    /// (Nemotron 3 Super dimensions; needs --pattern with few layers on the CPU).
    #[arg(long)]
    preset: Option<String>,
    /// Layer pattern for a preset, e.g. MEMEMEM*E (M Mamba-2, E MoE, * attention, - MLP).
    #[arg(long)]
    pattern: Option<String>,
    /// MTP pattern for a preset ("" for none).
    #[arg(long)]
    mtp_pattern: Option<String>,
    /// Seed of a preset's weights and of its random prompt.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Paths to run and compare: cpu, gpu, golden (gpu needs an NVIDIA GPU).
    #[arg(long, value_delimiter = ',', default_value = "cpu,golden")]
    compare: Vec<String>,
    /// Golden file (default MODEL_DIR/reference.safetensors when present).
    #[arg(long)]
    golden: Option<PathBuf>,
    /// Decode steps after the prefill (default: to the end of the golden's tokens).
    #[arg(long)]
    decode: Option<usize>,
    /// Speculative decoding with K MTP draft tokens per round (checked against greedy).
    #[arg(long)]
    mtp: Option<usize>,
    /// Tokens of the prefill before decoding (default: the golden's prefill_len).
    #[arg(long)]
    prefill_len: Option<usize>,
    /// Prompt length when there is no golden (random tokens from --seed).
    #[arg(long, default_value_t = 40)]
    tokens: usize,
    /// Write logits, decode_logits, mtp_logits and hidden.{i} (the golden's names) here.
    #[arg(long, requires = "path")]
    dump: Option<PathBuf>,
    /// Which path --dump writes (run even when --compare does not name it).
    #[arg(long, value_parser = ["cpu", "gpu"])]
    path: Option<String>,
    /// Routed expert weights as f32 (as loaded), bf16, or nvfp4 (kernel-mode NVFP4, 16-element
    /// blocks, E4M3 scales, one global scale per matrix).
    #[arg(long, default_value = "f32", value_parser = ["f32", "bf16", "nvfp4"])]
    experts: String,
    /// The other linear weights (projections, shared expert, MLP, latent projections, LM
    /// head; not the fp32 router): f32 as loaded, or rounded to bf16.
    #[arg(long, default_value = "f32", value_parser = ["f32", "bf16"])]
    weights: String,
    /// How the GPU path stores weights: f32 (every weight as f32 values), or compact: bf16
    /// values as bf16 and the super preset's NVFP4 experts as codes and scale bytes plus a
    /// table of pairs (0.5625 bytes per weight), read by GEMM / GEMV kernels that give the f32
    /// storage's results bit for bit (gpu/src/nvfp4_store.rs). Pair with `--weights bf16
    /// --experts nvfp4`.
    #[arg(long, default_value = "f32", value_parser = ["f32", "compact"])]
    gpu_weights: String,
    /// Pass threshold of the max relative error.
    #[arg(long, default_value_t = 1e-4)]
    tol: f64,
    #[arg(long)]
    json: bool,
    /// Decode benchmark: time N single-token decode steps (batch 1) per path after a warm-up
    /// pass over the same steps, and compare with the HBM floor of a step.
    #[arg(long)]
    bench_decode: Option<usize>,
    /// Decode (teacher forced, the `decode_logits` compared with the golden) with the decode
    /// engine instead of `Model::forward`: on the CPU path its CPU device, on the GPU path its
    /// GPU device (every activation, state and cache on the device). Prefill, MTP and
    /// speculative decoding stay with the model.
    #[arg(long)]
    decode_engine: bool,
    /// The GPU decode engine records its step as a CUDA graph on the second step and replays
    /// it (the router's top-k stays on the device; every expert of a MoE layer is made
    /// resident on the first step). For `--decode-engine` and the decode bench's gpu-engine.
    #[arg(long)]
    engine_graphs: bool,
    /// The GPU decode engine's fused kernels, the same bits as without: each residual add with
    /// the following norm (`model_add_rmsnorm`, run on the H200 in session 9) and ReLU² folded
    /// into the routed experts' down GEMV (`model_gemv1_slots_*_relu`, session 9, not yet run
    /// on the H200).
    #[arg(long)]
    engine_fuse: bool,
    /// With `--engine-graphs`: programmatic dependent launch between the graph's kernels (each
    /// kernel's launch overlaps the end of the one before it; every kernel waits at its entry
    /// for that one's writes: the same bits). Session 10.
    #[arg(long)]
    engine_pdl: bool,
    /// The routed experts' NVFP4 slot GEMV of the GPU path (decode engine; all but mma give the
    /// same bits): chunk (`model_gemv1_slots_nvfp4w`), xs / xs3 (x and the table of pairs staged
    /// in shared memory per block; xs3 capped at 80 registers for three blocks an SM), xs3m
    /// (xs3 for the up GEMV, two columns a warp and four blocks an SM for the fused down GEMV:
    /// session 12), pipe (persistent blocks, the weights through cp.async stages). Session 11.
    /// mma (session 13, the default): the products on the tensor cores (mma.sync f16, x
    /// carried as three f16 terms; K % 128 == 0), with the fused down GEMV adding the slot mix:
    /// within f32 rounding of the others, not their bits (the model path keeps the exact GEMV:
    /// the engine's logits then differ from its by ~4e-6 instead of matching bit for bit).
    #[arg(long, value_parser = ["chunk", "xs", "xs3", "xs3m", "pipe", "mma"])]
    slot_kernel: Option<String>,
    /// Copy ceiling of the device in GB/s (1e9 B/s) for the HBM floor (H200: 3900 measured).
    #[arg(long, default_value_t = 3900.0)]
    copy_gbps: f64,
}

/// The target: a batch-1 decode step within this factor of the HBM floor.
const FLOOR_TARGET: f64 = 1.5;

/// Timed decode steps of one path.
struct BenchRun {
    /// ms per step, in step order
    ms: Vec<f64>,
    /// weights uploaded by the GPU backend during the timed steps (None on the CPU)
    uploads: Option<u64>,
    /// host wall time per backend op over the timed steps, most first ([`TimedKernels`])
    ops: Vec<(String, OpTime)>,
    /// the tokens fed to the steps (greedy from the prefill)
    toks: Vec<u32>,
    /// logits of every warm-up step (the reference of the decode engine's run)
    logits: Vec<Vec<f32>>,
    /// decode engine only: max relative error of its logits vs the model path's, every step
    vs_model_max_rel: Option<f64>,
    /// decode engine only: host seconds per steady step by part (`DecodeDevice::host_times`:
    /// the GPU device's uploads, launch, wait and download), averaged over those steps
    host: Vec<(&'static str, f64)>,
    /// decode engine only: the device's launch counts after the timed steps
    /// (`DecodeDevice::launch_stats`: the GPU graph's kernel edges, programmatic ones)
    launch: Vec<(&'static str, usize)>,
    /// leading steps that are not the steady state (the graph engine's eager and capturing
    /// steps); the JSON's `steady` stats leave them out
    warm: usize,
}

/// Quantile `q` of sorted values (nearest rank).
fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

impl BenchRun {
    fn stats(&self) -> (f64, f64, f64) {
        stats_of(&self.ms)
    }
}

/// (median, p10, p90) of step times.
fn stats_of(ms: &[f64]) -> (f64, f64, f64) {
    let mut v = ms.to_vec();
    v.sort_by(f64::total_cmp);
    (quantile(&v, 0.5), quantile(&v, 0.1), quantile(&v, 0.9))
}

impl BenchRun {
    /// The steady-state steps (after [`BenchRun::warm`]), when there are warm-up steps and
    /// steps after them.
    fn steady(&self) -> Option<&[f64]> {
        (self.warm > 0 && self.ms.len() > self.warm).then(|| &self.ms[self.warm..])
    }
}

/// Set (to anything): the decode bench's last engine step runs inside a profiler range
/// (`duet profile engine-step`).
pub const PROFILE_ENGINE_STEP_ENV: &str = "DUET_PROFILE_ENGINE_STEP";

/// The decode benchmark on the model's current kernels (module doc): prefill, an untimed
/// pass of `n` greedy decode steps, then the same steps again from the same cache, timed.
fn bench_decode(
    model: &Model,
    prompt: &[u32],
    n: usize,
    gpu: Option<&gpu::model::GpuKernels>,
    timer: &TimedKernels,
) -> anyhow::Result<BenchRun> {
    let v = model.cfg.vocab_size;
    let sync = || -> anyhow::Result<()> {
        if let Some(g) = gpu {
            g.sync().context("synchronising the GPU")?;
        }
        Ok(())
    };
    let mut cache0 = model.new_cache();
    let o = model
        .forward(prompt, Some(&mut cache0), Pass::Prefill, false)
        .context("bench prefill")?;
    let first = argmax_rows(&o.logits[o.logits.len() - v..], v)[0] as u32;
    // Warm-up: the steps themselves, recording the greedy tokens.
    let mut toks = vec![first];
    let mut logits = Vec::with_capacity(n);
    let mut cache = cache0.try_clone().context("copying the prefill cache")?;
    for i in 0..n {
        let o = model
            .forward(&[toks[i]], Some(&mut cache), Pass::Decode, false)
            .context("bench warm-up decode")?;
        toks.push(argmax_rows(&o.logits, v)[0] as u32);
        logits.push(o.logits);
    }
    sync()?;
    timer.reset();
    let up0 = gpu.map(|g| g.weight_stats().uploads);
    let mut cache = cache0;
    let mut ms = Vec::with_capacity(n);
    for &tk in &toks[..n] {
        let t0 = Instant::now();
        model
            .forward(&[tk], Some(&mut cache), Pass::Decode, false)
            .context("bench decode")?;
        sync()?;
        ms.push(t0.elapsed().as_secs_f64() * 1e3);
    }
    let uploads = match (gpu, up0) {
        (Some(g), Some(u)) => Some(g.weight_stats().uploads - u),
        _ => None,
    };
    Ok(BenchRun {
        ms,
        uploads,
        ops: timer.snapshot(),
        toks,
        logits,
        vs_model_max_rel: None,
        host: Vec::new(),
        launch: Vec::new(),
        warm: 0,
    })
}

/// The decode engine (`reference::model::engine`) on `dev` over the same steps as the model
/// path's bench `m` (same prefill on the model's current kernels, same tokens): a warm-up
/// pass whose logits are compared with the model path's, then a timed pass from the same
/// prefill cache (each step ends with its logits on the host). `sync` waits for the device;
/// `uploads` counts the GPU weight cache's uploads (None on the CPU).
fn bench_engine<D: reference::model::engine::DecodeDevice>(
    model: &Model,
    prompt: &[u32],
    m: &BenchRun,
    mut dev: impl FnMut() -> Result<D, reference::model::ModelError>,
    sync: &dyn Fn() -> anyhow::Result<()>,
    uploads: &dyn Fn() -> Option<u64>,
    profile_range: &dyn Fn(bool) -> anyhow::Result<()>,
    warm_steps: usize,
) -> anyhow::Result<BenchRun> {
    use reference::model::engine::DecodeEngine;
    let n = m.logits.len();
    let mut cache0 = model.new_cache();
    model
        .forward(prompt, Some(&mut cache0), Pass::Prefill, false)
        .context("engine bench prefill")?;
    let mut worst = 0f64;
    let mut eng =
        DecodeEngine::new(model, dev()?, &cache0, n).context("building the decode engine")?;
    for (i, want) in m.logits.iter().enumerate() {
        let got = eng.step(m.toks[i]).context("engine warm-up step")?;
        // max|a - b| / max|a| as the golden comparisons compute it; anything non-finite
        // counts as infinitely far.
        let r = metric(
            "decode engine logits",
            &Tensor::from_f32(&[want.len()], want.clone()),
            &got,
            f64::MAX,
        )?;
        let e = if r.max_rel.is_finite() && r.nmse.is_finite() {
            r.max_rel
        } else {
            f64::INFINITY
        };
        worst = worst.max(e);
    }
    sync()?;
    let up0 = uploads();
    let mut eng =
        DecodeEngine::new(model, dev()?, &cache0, n).context("building the decode engine")?;
    let mut ms = Vec::with_capacity(n);
    // DUET_PROFILE_ENGINE_STEP: the last timed step inside a profiler range (`duet profile
    // engine-step` runs this under ncu --profile-from-start off: one step's kernels, with
    // graphs the replayed graph's). Its time is left out of `ms`.
    let profile_last = std::env::var_os(PROFILE_ENGINE_STEP_ENV).is_some() && n > 1;
    // Host time per part over the steady steps (after the warm-up ones, the marked one out).
    let mut host: Vec<(&'static str, f64)> = Vec::new();
    let mut host_steps = 0usize;
    for (i, &tk) in m.toks[..n].iter().enumerate() {
        let marked = profile_last && i + 1 == n;
        if marked {
            profile_range(true)?;
        }
        let h0 = eng.device().host_times();
        let t0 = Instant::now();
        eng.step(tk).context("engine step")?;
        let dt = t0.elapsed().as_secs_f64() * 1e3;
        if marked {
            profile_range(false)?;
        } else {
            ms.push(dt);
            if i >= warm_steps {
                let h1 = eng.device().host_times();
                host_steps += 1;
                for ((name, b), (_, a)) in h1.iter().zip(&h0) {
                    match host.iter_mut().find(|(n, _)| n == name) {
                        Some(e) => e.1 += b - a,
                        None => host.push((name, b - a)),
                    }
                }
            }
        }
    }
    for e in &mut host {
        e.1 /= host_steps.max(1) as f64;
    }
    Ok(BenchRun {
        ms,
        uploads: uploads().zip(up0).map(|(a, b)| a - b),
        ops: Vec::new(),
        toks: m.toks.clone(),
        logits: Vec::new(),
        vs_model_max_rel: Some(worst),
        host,
        launch: eng.device().launch_stats(),
        warm: warm_steps,
    })
}

/// The engine's GPU time per op over the bench's steps: one more pass from the same prefill
/// with CUDA events around every op (`gpu::engine::GpuDevice::with_op_timing`).
fn profile_engine_gpu(
    model: &Model,
    prompt: &[u32],
    m: &BenchRun,
    g: &gpu::model::GpuKernels,
    fuse: bool,
) -> anyhow::Result<Vec<(String, OpTime)>> {
    use reference::model::engine::DecodeEngine;
    let n = m.logits.len();
    let mut cache0 = model.new_cache();
    model
        .forward(prompt, Some(&mut cache0), Pass::Prefill, false)
        .context("engine profile prefill")?;
    let dev = gpu::engine::GpuDevice::new(g).with_op_timing();
    let dev = if fuse { dev.with_fusion() } else { dev };
    let mut eng =
        DecodeEngine::new(model, dev, &cache0, n).context("building the decode engine")?;
    for &tk in &m.toks[..n] {
        eng.step(tk).context("engine profile step")?;
    }
    Ok(eng.device().op_times())
}

fn step_json(b: &StepBytes, bps: f64) -> Value {
    json!({
        "bytes": b.total(),
        "floor_us": b.floor_us(bps),
        "parts": {
            "mamba_weights": b.mamba_weights, "mamba_state": b.mamba_state,
            "attention_weights": b.attention_weights, "kv_cache": b.kv_cache,
            "moe_router": b.moe_router, "moe_latent": b.moe_latent,
            "moe_experts": b.moe_experts, "moe_shared": b.moe_shared, "mlp": b.mlp,
            "norms": b.norms, "embedding": b.embedding, "lm_head": b.lm_head,
        },
    })
}

/// Floors of the timed steps (context prefill_len .. prefill_len + n - 1), averaged (the
/// floor is linear in the context): (production, as loaded) in µs, and the middle step's bytes.
fn bench_floor(
    cfg: &reference::model::Config,
    fmt: ExpertFormat,
    prefill_len: usize,
    n: usize,
    bps: f64,
) -> (f64, f64, DecodeBytes) {
    let (mut p, mut a) = (0.0, 0.0);
    for i in 0..n.max(1) {
        let b = decode_step_bytes(cfg, fmt, prefill_len + i);
        p += b.production.floor_us(bps);
        a += b.as_loaded.floor_us(bps);
    }
    let k = n.max(1) as f64;
    (
        p / k,
        a / k,
        decode_step_bytes(cfg, fmt, prefill_len + n / 2),
    )
}

fn bench_path_json(b: &BenchRun, floor_us: f64, floor_loaded_us: f64) -> Value {
    let (med, p10, p90) = b.stats();
    json!({
        "steps": b.ms.len(),
        "median_ms": med, "p10_ms": p10, "p90_ms": p90,
        "tokens_per_s": 1e3 / med.max(1e-12),
        "ms": b.ms,
        "floor_us": floor_us,
        "ratio_vs_floor": med * 1e3 / floor_us.max(1e-12),
        "floor_as_loaded_us": floor_loaded_us,
        "ratio_vs_as_loaded_floor": med * 1e3 / floor_loaded_us.max(1e-12),
        "meets_target": med * 1e3 <= FLOOR_TARGET * floor_us,
        "weight_uploads_timed": b.uploads,
        "op_breakdown": op_breakdown_json(b),
        "vs_model_path_max_rel": b.vs_model_max_rel,
        // Host time per steady step by part (the GPU engine: uploads, launch, wait, download).
        "host_per_step_us": (!b.host.is_empty()).then(|| {
            Value::Object(b.host.iter().map(|(k, v)| (k.to_string(), json!(v * 1e6))).collect())
        }),
        "launch": (!b.launch.is_empty()).then(|| {
            Value::Object(b.launch.iter().map(|(k, v)| (k.to_string(), json!(v))).collect())
        }),
        // The steps after the warm-up ones (the graph engine's replays), when there are any.
        "steady": b.steady().map(|v| {
            let (m, p10, p90) = stats_of(v);
            json!({"from_step": b.warm, "ms": v, "median_ms": m, "p10_ms": p10, "p90_ms": p90})
        }),
    })
}

/// Per-op host wall time of the timed steps (module doc of `reference::model::timed`).
fn op_breakdown_json(b: &BenchRun) -> Value {
    let steps = b.ms.len().max(1) as f64;
    let total_ms: f64 = b.ms.iter().sum();
    Value::Array(
        b.ops
            .iter()
            .map(|(op, t)| {
                json!({
                    "op": op, "calls_per_step": t.calls as f64 / steps,
                    "ms_per_step": t.seconds * 1e3 / steps,
                    "share_of_step": if total_ms > 0.0 { t.seconds * 1e3 / total_ms } else { 0.0 },
                })
            })
            .collect(),
    )
}

/// Golden-vs-ours metrics of one tensor.
#[derive(Clone, Debug)]
struct Metric {
    name: String,
    nmse: f64,
    max_rel: f64,
    max_abs: f64,
    pass: bool,
}

fn metric(name: &str, golden: &Tensor, got: &[f32], tol: f64) -> anyhow::Result<Metric> {
    if golden.numel() != got.len() {
        bail!(
            "{name}: the golden has shape {:?} ({} values) but the model produced {} values; \
             is the golden from this model?",
            golden.shape,
            golden.numel(),
            got.len()
        );
    }
    // After the size check: from_f32 asserts that the data fits the shape.
    let got_t = Tensor::from_f32(&golden.shape, got.to_vec());
    let rep = compare::compare(name, golden, &got_t, Tolerance::Nmse { max: f64::MAX });
    let amax = golden.to_f64_vec().iter().fold(0f64, |m, v| m.max(v.abs()));
    let max_rel = if amax > 0.0 {
        rep.max_abs_err / amax
    } else {
        rep.max_abs_err
    };
    Ok(Metric {
        name: name.into(),
        nmse: rep.nmse,
        max_rel,
        max_abs: rep.max_abs_err,
        pass: max_rel <= tol && rep.nmse.is_finite(),
    })
}

fn metric_json(m: &Metric) -> Value {
    json!({"name": m.name, "nmse": m.nmse, "max_rel": m.max_rel, "max_abs": m.max_abs, "pass": m.pass})
}

fn argmax_rows(x: &[f32], v: usize) -> Vec<usize> {
    x.chunks_exact(v)
        .map(|r| {
            let mut b = 0;
            for (i, &a) in r.iter().enumerate() {
                if a > r[b] {
                    b = i;
                }
            }
            b
        })
        .collect()
}

/// Greedy agreement of two logit matrices: (equal rows, rows).
fn greedy_agreement(golden: &Tensor, got: &[f32], v: usize) -> (usize, usize) {
    let a = argmax_rows(&golden.to_f32_vec(), v);
    let b = argmax_rows(got, v);
    (a.iter().zip(&b).filter(|(x, y)| x == y).count(), a.len())
}

/// Labels of hidden.{i}: embeddings, layer outputs, norm_f.
fn hidden_labels(model: &Model) -> Vec<String> {
    let n = model.cfg.layers.len();
    let mut v = vec!["embeddings".to_string()];
    for (i, k) in model.cfg.layers.iter().enumerate() {
        if i + 1 < n {
            v.push(format!("layer {i} ({})", k.symbol()));
        } else {
            v.push(format!("norm_f(layer {i} ({}))", k.symbol()));
        }
    }
    v
}

/// What one path (cpu or gpu) produced.
struct PathRun {
    name: &'static str,
    full: ForwardOut,
    decode_logits: Vec<f32>,
    mtp_logits: Option<Vec<f32>>,
    spec: Option<SpecRun>,
    prefill_s: f64,
    decode_s: f64,
}

/// Speculative decoding vs greedy on one path.
struct SpecRun {
    k: usize,
    n_new: usize,
    greedy: Vec<u32>,
    greedy_s: f64,
    stats: SpecStats,
    spec_s: f64,
}

/// Sizes of the run shared by every path.
#[derive(Clone, Copy)]
struct Plan {
    t: usize,
    prefill_len: usize,
    steps: usize,
    v: usize,
    hs: usize,
}

/// Full forward (with hidden states), prefill + token-by-token decode, MTP logits and the
/// optional speculative decoding, on the model's current kernels.
/// Teacher-forced decode steps through the decode engine on `dev`, from `cache` (a prefill's):
/// the logits of every step, in order.
fn engine_decode<D: reference::model::engine::DecodeDevice>(
    model: &Model,
    dev: D,
    cache: &reference::model::Cache,
    toks: &[u32],
) -> anyhow::Result<Vec<f32>> {
    let mut eng = reference::model::engine::DecodeEngine::new(model, dev, cache, toks.len())
        .context("building the decode engine")?;
    let mut out = Vec::new();
    for &tk in toks {
        out.extend(eng.step(tk).context("decode engine step")?);
    }
    Ok(out)
}

/// Where a path's decode steps run: the model, or the decode engine (on the CPU device, or on
/// the GPU device of these kernels).
#[derive(Clone, Copy)]
enum DecodeWith<'a> {
    Model,
    /// the GPU kernels (None: the CPU device), and the GPU device's options
    Engine(Option<&'a gpu::model::GpuKernels>, EngineOpts),
}

/// How the GPU decode engine's device is built (`--engine-graphs`, `--engine-fuse`).
#[derive(Clone, Copy)]
struct EngineOpts {
    graphs: bool,
    fuse: bool,
    pdl: bool,
}

/// The GPU decode engine's device with `o`.
fn gpu_engine_device(
    g: &gpu::model::GpuKernels,
    o: EngineOpts,
) -> Result<gpu::engine::GpuDevice<'_>, reference::model::ModelError> {
    let d = gpu::engine::GpuDevice::new(g);
    let d = if o.fuse { d.with_fusion() } else { d };
    let d = if o.pdl { d.with_pdl() } else { d };
    if o.graphs {
        d.with_graphs()
    } else {
        Ok(d)
    }
}

fn run_path(
    model: &Model,
    name: &'static str,
    ids: &[u32],
    p: Plan,
    mtp: Option<usize>,
    with: DecodeWith<'_>,
) -> anyhow::Result<PathRun> {
    let Plan {
        t,
        prefill_len,
        steps,
        v,
        hs,
    } = p;
    let ctx = |what: &str| format!("{name} path: {what}");
    let t0 = Instant::now();
    let full = model
        .forward(ids, None, Pass::Prefill, true)
        .with_context(|| ctx("full forward"))?;
    let prefill_s = t0.elapsed().as_secs_f64();
    // Decode: prefill of prefill_len tokens, then one token at a time (teacher forcing).
    let mut cache = model.new_cache();
    let o = model
        .forward(&ids[..prefill_len], Some(&mut cache), Pass::Prefill, false)
        .with_context(|| ctx("prefill"))?;
    let mut decode_logits = o.logits[(prefill_len - 1) * v..].to_vec();
    let t1 = Instant::now();
    let toks = &ids[prefill_len..prefill_len + steps];
    match with {
        DecodeWith::Model => {
            for &tk in toks {
                let o = model
                    .forward(&[tk], Some(&mut cache), Pass::Decode, false)
                    .with_context(|| ctx("decode"))?;
                decode_logits.extend_from_slice(&o.logits);
            }
        }
        DecodeWith::Engine(None, _) => decode_logits.extend(
            engine_decode(model, reference::model::engine::CpuDevice, &cache, toks)
                .with_context(|| ctx("decode"))?,
        ),
        DecodeWith::Engine(Some(g), o) => {
            let dev = gpu_engine_device(g, o)?;
            decode_logits
                .extend(engine_decode(model, dev, &cache, toks).with_context(|| ctx("decode"))?)
        }
    }
    let decode_s = t1.elapsed().as_secs_f64();
    // MTP logits: row i from (h_i, token i+1).
    let mtp_logits = if model.mtp.is_some() {
        Some(
            model
                .mtp_forward(&full.last_hidden[..(t - 1) * hs], &ids[1..], None)
                .with_context(|| ctx("MTP head"))?
                .0,
        )
    } else {
        None
    };
    let spec = match mtp {
        Some(k) => {
            let n_new = steps.max(1);
            let prompt = &ids[..prefill_len];
            let tg = Instant::now();
            let greedy = model
                .generate_greedy(prompt, n_new)
                .with_context(|| ctx("greedy decoding"))?;
            let greedy_s = tg.elapsed().as_secs_f64();
            let ts = Instant::now();
            let stats = model
                .generate_speculative(prompt, n_new, k)
                .with_context(|| ctx("speculative decoding"))?;
            let spec_s = ts.elapsed().as_secs_f64();
            Some(SpecRun {
                k,
                n_new,
                greedy,
                greedy_s,
                stats,
                spec_s,
            })
        }
        None => None,
    };
    Ok(PathRun {
        name,
        full,
        decode_logits,
        mtp_logits,
        spec,
        prefill_s,
        decode_s,
    })
}

/// A path's outputs under the golden's names and shapes (`--dump`, and the CPU path as the
/// reference of `gpu_vs_cpu`).
fn to_map(r: &PathRun, ids: &[u32], p: Plan) -> TensorMap {
    let Plan {
        t, steps, v, hs, ..
    } = p;
    let mut m = TensorMap::new();
    m.insert(
        "logits".into(),
        Tensor::from_f32(&[t, v], r.full.logits.clone()),
    );
    m.insert(
        "decode_logits".into(),
        Tensor::from_f32(&[steps + 1, v], r.decode_logits.clone()),
    );
    if let Some(ml) = &r.mtp_logits {
        m.insert(
            "mtp_logits".into(),
            Tensor::from_f32(&[t - 1, v], ml.clone()),
        );
    }
    for (i, h) in r.full.hidden.iter().enumerate() {
        m.insert(format!("hidden.{i}"), Tensor::from_f32(&[t, hs], h.clone()));
    }
    m.insert(
        "input_ids".into(),
        Tensor::from_i32(&[1, t], ids.iter().map(|&x| x as i32).collect()),
    );
    m
}

/// One path against a reference (the golden, or the CPU path).
struct Report {
    layers: Vec<(usize, Metric)>,
    first_bad: Option<usize>,
    largest_jump: Option<(usize, f64)>,
    outs: Vec<Metric>,
    agree: BTreeMap<String, (usize, usize)>,
    ok: bool,
}

fn compare_run(reference: &TensorMap, r: &PathRun, p: Plan, tol: f64) -> anyhow::Result<Report> {
    let Plan { t, steps, v, .. } = p;
    let mut layers = Vec::new();
    let mut first_bad = None;
    for (i, h) in r.full.hidden.iter().enumerate() {
        let name = format!("hidden.{i}");
        if let Some(gt) = reference.get(&name) {
            let m = metric(&name, gt, h, tol)?;
            if !m.pass && first_bad.is_none() {
                first_bad = Some(i);
            }
            layers.push((i, m));
        }
    }
    // The largest step-to-step growth of the error (floored at f32 noise): where a path whose
    // every layer is over tolerance (bf16 on the GPU) actually breaks.
    let mut largest_jump: Option<(usize, f64)> = None;
    for w in layers.windows(2) {
        let (prev, cur) = (&w[0].1, &w[1].1);
        let ratio = cur.max_rel / prev.max_rel.max(JUMP_FLOOR);
        if ratio > JUMP_RATIO && largest_jump.is_none_or(|(_, r)| ratio > r) {
            largest_jump = Some((w[1].0, ratio));
        }
    }
    let mut ok = true;
    let mut agree = BTreeMap::new();
    let mut outs = Vec::new();
    for (name, got, rows) in [
        ("logits", Some(&r.full.logits), t),
        ("decode_logits", Some(&r.decode_logits), steps + 1),
        ("mtp_logits", r.mtp_logits.as_ref(), t.saturating_sub(1)),
    ] {
        let (Some(got), Some(gt)) = (got, reference.get(name)) else {
            continue;
        };
        if gt.shape.len() != 2 || gt.shape[1] != v {
            bail!(
                "{name}: the reference has shape {:?} but the model's vocabulary is {v} (expected \
                 (rows, {v})); is the golden from this model?",
                gt.shape
            );
        }
        // A shorter decode than the golden's compares the first rows.
        let gt = if name == "decode_logits" && gt.shape[0] > rows {
            Tensor::from_f32(&[rows, v], gt.to_f32_vec()[..rows * v].to_vec())
        } else {
            gt.clone()
        };
        let m = metric(name, &gt, got, tol)?;
        let (eq, n) = greedy_agreement(&gt, got, v);
        ok &= m.pass && eq == n;
        agree.insert(name.to_string(), (eq, n));
        outs.push(m);
    }
    ok &= layers.iter().all(|(_, m)| m.pass);
    Ok(Report {
        layers,
        first_bad,
        largest_jump,
        outs,
        agree,
        ok,
    })
}

fn report_json(rep: &Report, labels: &[String]) -> Value {
    let at = |i: usize| {
        json!({
            "hidden": i,
            "layer": if i == 0 { Value::Null } else { json!(i - 1) },
            "label": labels.get(i).cloned().unwrap_or_default(),
        })
    };
    json!({
        "layers": rep.layers.iter().map(|(i, m)| {
            let mut j = metric_json(m);
            j["label"] = json!(labels.get(*i).cloned().unwrap_or_default());
            j["index"] = json!(i);
            j
        }).collect::<Vec<_>>(),
        "first_divergent": rep.first_bad.map(at),
        "largest_jump": rep.largest_jump.map(|(i, r)| {
            let mut j = at(i);
            j["ratio"] = json!(r);
            j
        }),
        "outputs": rep.outs.iter().map(metric_json).collect::<Vec<_>>(),
        "greedy": rep.agree
            .iter()
            .map(|(k, (e, n))| (k.clone(), json!({"agree": e, "rows": n})))
            .collect::<serde_json::Map<_, _>>(),
        "pass": rep.ok,
    })
}

fn spec_json(s: &SpecRun) -> Value {
    let acc: usize = s.stats.accepted.iter().sum();
    let rounds = s.stats.rounds;
    json!({
        "k": s.k, "new_tokens": s.n_new, "rounds": rounds, "accepted": s.stats.accepted,
        "acceptance_rate": if rounds > 0 { acc as f64 / (rounds * s.k) as f64 } else { 0.0 },
        "matches_greedy": s.greedy == s.stats.tokens, "tokens": s.stats.tokens,
        "greedy_tokens_per_s": s.n_new as f64 / s.greedy_s.max(1e-9),
        "spec_tokens_per_s": s.n_new as f64 / s.spec_s.max(1e-9),
    })
}

fn tps(r: &PathRun, p: Plan) -> (f64, f64) {
    (
        p.t as f64 / r.prefill_s.max(1e-9),
        p.steps as f64 / r.decode_s.max(1e-9),
    )
}

fn print_report(title: &str, rep: &Report, labels: &[String]) {
    println!("\n{title}:");
    println!(
        "  {:<8} {:<22} {:>11} {:>11} {:>11}",
        "tensor", "after", "nmse", "max rel", "max abs"
    );
    for (i, m) in &rep.layers {
        let mut mark = if Some(*i) == rep.first_bad {
            "  <== first over tolerance".to_string()
        } else if m.pass {
            String::new()
        } else {
            "  (over)".to_string()
        };
        if let Some((_, r)) = rep.largest_jump.filter(|(j, _)| j == i) {
            mark.push_str(&format!("  <== largest jump (x{r:.0})"));
        }
        println!(
            "  {:<8} {:<22} {:>11.3e} {:>11.3e} {:>11.3e}{mark}",
            m.name,
            labels.get(*i).map(String::as_str).unwrap_or(""),
            m.nmse,
            m.max_rel,
            m.max_abs
        );
    }
    match rep.first_bad {
        Some(i) => println!(
            "first divergent: hidden.{i} = {}",
            labels.get(i).map(String::as_str).unwrap_or("")
        ),
        None => println!("no layer over tolerance"),
    }
    if let Some((i, r)) = rep.largest_jump {
        println!(
            "largest error jump: hidden.{i} = {} (x{r:.0} over the previous row)",
            labels.get(i).map(String::as_str).unwrap_or("")
        );
    }
    println!("outputs:");
    for m in &rep.outs {
        let (e, n) = rep.agree.get(&m.name).copied().unwrap_or((0, 0));
        println!(
            "  {:<14} nmse {:.3e}  max rel {:.3e}  greedy {e}/{n}  {}",
            m.name,
            m.nmse,
            m.max_rel,
            if m.pass && e == n { "PASS" } else { "FAIL" }
        );
    }
}

/// The GPU backend, or one clear error when this machine cannot run it.
fn gpu_kernels(
    compact: bool,
    slot_kernel: Option<&str>,
) -> anyhow::Result<Arc<gpu::model::GpuKernels>> {
    match gpu::model::GpuKernels::new() {
        Ok(mut k) => {
            k.bf16_weights |= compact;
            k.nvfp4_weights |= compact;
            if let Some(s) = gpu::model::SLOT_KERNELS
                .iter()
                .find(|s| Some(**s) == slot_kernel)
            {
                k.slot_kernel = s;
            }
            Ok(Arc::new(k))
        }
        Err(e) => bail!(
            "the gpu path cannot run here: {e}. Run without gpu (e.g. --compare cpu,golden) on a \
             machine without a usable NVIDIA GPU"
        ),
    }
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    if !(args.copy_gbps.is_finite() && args.copy_gbps > 0.0) {
        bail!(
            "--copy-gbps {}: must be a positive number of GB/s (the H200 copies at about 3900)",
            args.copy_gbps
        );
    }
    for c in &args.compare {
        if !["cpu", "gpu", "golden"].contains(&c.as_str()) {
            bail!("--compare {c}: unknown path; use cpu, gpu and/or golden");
        }
    }
    // Paths to run, in order (cpu first: the reference of gpu_vs_cpu).
    let mut paths: Vec<&'static str> = ["cpu", "gpu"]
        .into_iter()
        .filter(|p| args.compare.iter().any(|c| c == p) || args.path.as_deref() == Some(*p))
        .collect();
    if paths.is_empty() {
        // `--compare golden` alone: the CPU path against the golden (as before).
        paths.push("cpu");
    }
    // Fail fast (before loading anything) when the gpu path cannot run.
    let gpu_k = if paths.contains(&"gpu") {
        Some(gpu_kernels(
            args.gpu_weights == "compact",
            args.slot_kernel.as_deref(),
        )?)
    } else {
        None
    };
    let t_load = Instant::now();
    let (model, golden_path) = match (&args.model_dir, &args.preset) {
        (Some(dir), _) => {
            let (m, unused) = Model::load_dir_with_unused(dir)
                .with_context(|| format!("loading the model in {}", dir.display()))?;
            if !unused.is_empty() {
                eprintln!(
                    "note: {} checkpoint tensors are not used by the config (first: {}); check the layer pattern",
                    unused.len(),
                    unused[0]
                );
            }
            let g = args
                .golden
                .clone()
                .or_else(|| Some(dir.join("reference.safetensors")).filter(|p| p.exists()));
            (m, g)
        }
        (None, Some(p)) => (
            Model::preset(
                p,
                args.pattern.as_deref(),
                args.mtp_pattern.as_deref(),
                args.seed,
            )?,
            args.golden.clone(),
        ),
        (None, None) => bail!("give a MODEL_DIR or --preset tiny|super"),
    };
    let mut model = model;
    let fmt = reference::model::nemotron::ExpertFormat::parse(&args.experts)
        .context("--experts: use f32, bf16 or nvfp4")?;
    let converted = model.set_expert_format(fmt)?;
    if converted > 0 {
        eprintln!(
            "note: {converted} routed expert weight matrices stored as {}",
            args.experts
        );
    }
    if args.weights == "bf16" {
        let n = model.set_dense_weights_bf16()?;
        eprintln!("note: {n} other linear weight matrices rounded to bf16");
    }
    let load_s = t_load.elapsed().as_secs_f64();
    let want_golden = args.compare.iter().any(|c| c == "golden");
    let (golden, gmeta): (Option<TensorMap>, BTreeMap<String, String>) = match &golden_path {
        Some(p) => {
            let (m, meta) = io::load_with_metadata(p)?;
            (Some(m), meta)
        }
        None => (None, BTreeMap::new()),
    };
    if want_golden && golden.is_none() && args.compare.len() > 1 {
        eprintln!(
            "note: no golden (reference.safetensors); running the {} path(s) only",
            paths.join(", ")
        );
    }
    let golden = if want_golden { golden } else { None };
    let v = model.cfg.vocab_size;
    // Tokens: the golden's, or seeded random ones.
    let ids: Vec<u32> = match golden.as_ref().and_then(|g| g.get("input_ids")) {
        Some(t) => t
            .to_i64_vec()
            .context("input_ids in the golden is not an integer tensor")?
            .into_iter()
            .map(|x| x as u32)
            .collect(),
        None => {
            let mut s = args.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
            (0..args.tokens)
                .map(|_| {
                    s ^= s << 13;
                    s ^= s >> 7;
                    s ^= s << 17;
                    (s % v as u64) as u32
                })
                .collect()
        }
    };
    let t = ids.len();
    if t < 2 {
        bail!("need at least 2 tokens, have {t}");
    }
    let prefill_len = args
        .prefill_len
        .or_else(|| gmeta.get("prefill_len").and_then(|s| s.parse().ok()))
        .unwrap_or(t / 2)
        .clamp(1, t);
    let steps = args.decode.unwrap_or(t - prefill_len).min(t - prefill_len);
    let plan = Plan {
        t,
        prefill_len,
        steps,
        v,
        hs: model.cfg.hidden_size,
    };

    // Run every path.
    let mut runs: Vec<PathRun> = Vec::new();
    let mut benches: Vec<(&'static str, BenchRun)> = Vec::new();
    let mut engine_error: Option<String> = None;
    for &p in &paths {
        let (k, g): (Arc<dyn ModelKernels>, _) = match (p, &gpu_k) {
            ("gpu", Some(g)) => (g.clone(), Some(g.as_ref())),
            _ => (Arc::new(CpuKernels), None),
        };
        model.set_kernels(k.clone());
        let with = if args.decode_engine {
            DecodeWith::Engine(
                g,
                EngineOpts {
                    graphs: args.engine_graphs,
                    fuse: args.engine_fuse,
                    pdl: args.engine_pdl,
                },
            )
        } else {
            DecodeWith::Model
        };
        runs.push(run_path(&model, p, &ids, plan, args.mtp, with)?);
        if let Some(n) = args.bench_decode.filter(|&n| n > 0) {
            // The same backend behind a per-op timer (where a step's time goes).
            let timer = Arc::new(TimedKernels::new(k.clone()));
            model.set_kernels(timer.clone());
            let b = bench_decode(&model, &ids[..prefill_len], n, g, &timer)
                .with_context(|| format!("{p} path: decode benchmark"))?;
            model.set_kernels(k);
            // The decode engine over the same steps: on the GPU every activation, state and
            // cache stays on the device; on the CPU it checks the orchestration (same bits).
            let prompt = &ids[..prefill_len];
            let eo = EngineOpts {
                graphs: args.engine_graphs,
                fuse: args.engine_fuse,
                pdl: args.engine_pdl,
            };
            let (name, eng) = match g {
                Some(g) => (
                    "gpu-engine",
                    bench_engine(
                        &model,
                        prompt,
                        &b,
                        || gpu_engine_device(g, eo),
                        &|| g.sync().context("synchronising the GPU"),
                        &|| Some(g.weight_stats().uploads),
                        &|on| {
                            g.gpu()
                                .profiler_range(on)
                                .context("the profiler range around an engine step")
                        },
                        // With graphs: the first step runs eagerly, the second is captured.
                        if eo.graphs { 2 } else { 0 },
                    ),
                ),
                None => (
                    "cpu-engine",
                    bench_engine(
                        &model,
                        prompt,
                        &b,
                        || Ok(reference::model::engine::CpuDevice),
                        &|| Ok(()),
                        &|| None,
                        &|_| Ok(()),
                        0,
                    ),
                ),
            };
            // On the GPU, a third pass with CUDA events around every op: where the engine's
            // step goes on the device (the op breakdown of gpu-engine).
            let eng = match (eng, g) {
                (Ok(mut e), Some(g)) => match profile_engine_gpu(&model, prompt, &b, g, eo.fuse) {
                    Ok(ops) => {
                        e.ops = ops;
                        Ok(e)
                    }
                    Err(err) => Err(err),
                },
                (r, _) => r,
            };
            benches.push((p, b));
            match eng {
                Ok(e) => benches.push((name, e)),
                Err(e) => {
                    eprintln!("warning: the decode engine ({name}) did not run: {e:#}");
                    engine_error = Some(format!("{name}: {e:#}"));
                }
            }
        }
    }
    let bps = args.copy_gbps * 1e9;
    let floor = args
        .bench_decode
        .filter(|&n| n > 0)
        .map(|n| bench_floor(&model.cfg, fmt, prefill_len, n, bps));
    model.set_kernels(Arc::new(CpuKernels));

    // Dump.
    if let Some(path) = &args.dump {
        let which = args.path.as_deref().unwrap_or("cpu");
        let r = runs
            .iter()
            .find(|r| r.name == which)
            .with_context(|| format!("--path {which}: that path did not run"))?;
        let m = to_map(r, &ids, plan);
        let mut meta = BTreeMap::new();
        meta.insert("prefill_len".to_string(), prefill_len.to_string());
        meta.insert("path".to_string(), which.to_string());
        io::save_with_metadata(path, &m, &meta)?;
    }

    // Compare.
    let labels = hidden_labels(&model);
    let mut ok = true;
    let mut reports: Vec<Option<Report>> = Vec::new();
    for r in &runs {
        let rep = match &golden {
            Some(g) => Some(compare_run(g, r, plan, args.tol)?),
            None => None,
        };
        if let Some(rep) = &rep {
            ok &= rep.ok;
        }
        if let Some(s) = &r.spec {
            ok &= s.greedy == s.stats.tokens;
        }
        reports.push(rep);
    }
    let gpu_vs_cpu = match (
        runs.iter().find(|r| r.name == "cpu"),
        runs.iter().find(|r| r.name == "gpu"),
    ) {
        (Some(c), Some(g)) => {
            let rep = compare_run(&to_map(c, &ids, plan), g, plan, args.tol)?;
            ok &= rep.ok;
            Some(rep)
        }
        _ => None,
    };
    let cfg = &model.cfg;
    let (pb, pm) = model.param_counts();

    if args.json {
        let mut per_path = serde_json::Map::new();
        for (r, rep) in runs.iter().zip(&reports) {
            let (ptps, dtps) = tps(r, plan);
            let mut j = match rep {
                Some(rep) => report_json(rep, &labels),
                None => json!({"layers": [], "first_divergent": null, "largest_jump": null,
                               "outputs": [], "greedy": null, "pass": true}),
            };
            j["speculative"] = r.spec.as_ref().map_or(Value::Null, spec_json);
            j["tokens_per_s"] = json!({"prefill": ptps, "decode": dtps});
            if let Some(s) = &r.spec {
                j["pass"] =
                    json!(j["pass"].as_bool().unwrap_or(true) && s.greedy == s.stats.tokens);
            }
            if let (Some((fp, fa, _)), Some((_, b))) =
                (&floor, benches.iter().find(|(p, _)| *p == r.name))
            {
                j["bench_decode"] = bench_path_json(b, *fp, *fa);
            }
            per_path.insert(r.name.to_string(), j);
        }
        let mut out = json!({
            "model": {"pattern": cfg.pattern(), "mtp_pattern": cfg.mtp_pattern(),
                      "params_backbone": pb, "params_mtp": pm, "load_s": load_s},
            "paths_run": paths,
            "decode_with": if args.decode_engine { "engine" } else { "model" },
            "tokens": t, "prefill_len": prefill_len, "decode_steps": steps,
            "golden": golden_path.as_ref().filter(|_| golden.is_some()).map(|p| p.display().to_string()),
            "tolerance_max_rel": args.tol,
            "paths": per_path,
            "gpu_vs_cpu": gpu_vs_cpu.as_ref().map_or(Value::Null, |r| report_json(r, &labels)),
            "pass": ok,
        });
        if let (Some(n), Some((fp, fa, mid))) = (args.bench_decode, &floor) {
            out["bench_decode"] = json!({
                "steps": n,
                "batch": 1,
                "context_len": {"first": prefill_len, "last": prefill_len + n - 1},
                "copy_bytes_per_s": bps,
                "experts": args.experts,
                "weights": args.weights,
                "gpu_weights": args.gpu_weights,
                "engine_fuse": args.engine_fuse,
                "engine_pdl": args.engine_pdl,
                "slot_kernel": gpu_k.as_ref().map(|k| k.slot_kernel),
                "target_ratio": FLOOR_TARGET,
                "floor_us": fp,
                "floor_as_loaded_us": fa,
                "floor_middle_step": {
                    "context_len": mid.context_len,
                    "production": step_json(&mid.production, bps),
                    "as_loaded": step_json(&mid.as_loaded, bps),
                },
                "paths": benches.iter().map(|(p, b)| (p.to_string(), bench_path_json(b, *fp, *fa)))
                    .collect::<serde_json::Map<_, _>>(),
                "engine_error": engine_error,
            });
        }
        // The first path's fields at the top level (the layout of the CPU-only report).
        if let Some(first) = paths.first().and_then(|p| out["paths"].get(*p).cloned()) {
            for key in [
                "layers",
                "first_divergent",
                "largest_jump",
                "outputs",
                "greedy",
                "speculative",
                "tokens_per_s",
            ] {
                out[key] = first[key].clone();
            }
        }
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        println!(
            "model: pattern {} (mtp {}), {:.2}M backbone + {:.2}M MTP parameters, loaded in {:.2}s",
            cfg.pattern(),
            if cfg.mtp_pattern().is_empty() {
                "none".to_string()
            } else {
                cfg.mtp_pattern()
            },
            pb as f64 / 1e6,
            pm as f64 / 1e6,
            load_s
        );
        println!(
            "paths {}; tokens {t}, prefill_len {prefill_len}, decode steps {steps}; max rel = max|a-b|/max|a|, tolerance {:.0e}",
            paths.join(", "),
            args.tol
        );
        for (r, rep) in runs.iter().zip(&reports) {
            if let Some(rep) = rep {
                print_report(
                    &format!("{} path: per-layer divergence vs golden", r.name),
                    rep,
                    &labels,
                );
            }
        }
        if let Some(rep) = &gpu_vs_cpu {
            print_report("gpu path vs cpu path, per layer", rep, &labels);
        }
        for r in &runs {
            if let Some(s) = &r.spec {
                let acc: usize = s.stats.accepted.iter().sum();
                let rounds = s.stats.rounds;
                println!(
                    "\n{} speculative (k={}): {} tokens in {rounds} rounds, {acc} drafts accepted ({:.0}%), {} greedy; {:.1} tok/s vs greedy {:.1} tok/s",
                    r.name,
                    s.k,
                    s.n_new,
                    if rounds > 0 { 100.0 * acc as f64 / (rounds * s.k) as f64 } else { 0.0 },
                    if s.greedy == s.stats.tokens { "matches" } else { "DIFFERS FROM" },
                    s.n_new as f64 / s.spec_s.max(1e-9),
                    s.n_new as f64 / s.greedy_s.max(1e-9)
                );
            }
        }
        println!();
        for r in &runs {
            let (ptps, dtps) = tps(r, plan);
            println!("{} tokens/s: prefill {ptps:.3}, decode {dtps:.3}", r.name);
        }
        if let (Some(n), Some((fp, fa, mid))) = (args.bench_decode, &floor) {
            println!(
                "\ndecode bench: batch 1, {n} steps after an untimed pass over the same steps, context {}..{}",
                prefill_len,
                prefill_len + n - 1
            );
            println!(
                "  HBM floor at {:.0} GB/s: production (bf16 weights, {} experts, f32 router/SSM state) {:.2} MB/step -> floor_us {fp:.1}; as loaded (all f32) {:.2} MB/step -> {fa:.1} us",
                args.copy_gbps,
                args.experts,
                mid.production.total() as f64 / 1e6,
                mid.as_loaded.total() as f64 / 1e6,
            );
            for (p, b) in &benches {
                let (med, p10, p90) = b.stats();
                println!(
                    "  {p}: median {med:.3} ms/step (p10 {p10:.3}, p90 {p90:.3}), {:.2} tok/s; measured/floor {:.1}x (target <= {FLOOR_TARGET}x: {}), vs as-loaded floor {:.1}x{}",
                    1e3 / med.max(1e-12),
                    med * 1e3 / fp.max(1e-12),
                    if med * 1e3 <= FLOOR_TARGET * fp { "met" } else { "not met" },
                    med * 1e3 / fa.max(1e-12),
                    b.uploads.map_or(String::new(), |u| format!("; {u} weight uploads while timed")),
                );
                if let Some(v) = b.steady() {
                    let (m, p10, p90) = stats_of(v);
                    println!(
                        "    steady state (steps {}..{}, after the eager and capturing steps): median {m:.3} ms/step (p10 {p10:.3}, p90 {p90:.3})",
                        b.warm + 1,
                        b.ms.len()
                    );
                }
                if let Some(e) = b.vs_model_max_rel {
                    println!(
                        "    logits vs the model path's: max rel {e:.3e} over the warm-up steps"
                    );
                }
                let steps = b.ms.len().max(1) as f64;
                if *p == "gpu-engine" && !b.ops.is_empty() {
                    println!("    (GPU time per op from CUDA events, a separate pass over the same steps)");
                }
                for (op, t) in b.ops.iter().take(8) {
                    println!(
                        "    {op:<28} {:>9.3} ms/step  {:>6.1} calls/step",
                        t.seconds * 1e3 / steps,
                        t.calls as f64 / steps
                    );
                }
            }
        }
        if golden.is_some() || gpu_vs_cpu.is_some() || runs.iter().any(|r| r.spec.is_some()) {
            println!("{}", if ok { "PASS" } else { "FAIL" });
        }
    }
    Ok(if ok { 0 } else { 1 })
}
