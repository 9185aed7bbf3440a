//! GPU benchmarks: CUDA-event timings (median, p10, p90) after warm-up, CUDA-graph replay for
//! small launches (many launches captured in one graph, time per launch), bandwidth against a
//! device-to-device copy measured in the same process. Results are JSON values.
//!
//! - [`crate::bench`] (crate root): one case of the compare table on its default kernel version.
//! - [`preset`]: the issue's target shapes (`router_t1`, `router_t64`, `router_t4096`,
//!   `router_t32768`: 512 experts, top-22, Super config, versions v1-v4; `router_t*_f32sig`: the
//!   same with the all-f32 sigmoid `tanh_f32`; `nvfp4_8192`: an 8192 x 8192 bf16
//!   tensor quantized in kernel mode, linear and swizzled scales; `copy`: the copy ceiling;
//!   `norms_super`: the engine's rmsnorm / gated rmsnorm / slot mix, default vs unrolled;
//!   `moe_slots_t1`: the decode engine's routed slots of one token (22 NVFP4 experts, the
//!   `model_gemv1_slots_nvfp4w` variants side by side, bits checked against the default);
//!   `moe_t1`, `moe_t8`, `moe_t64`, `moe_t4096`: the LatentMoE routed expert layer;
//!   `ssu_sweep_b{64,256}_bf16`: SSU v3 / v5-v9 and v8's ring depths at the Super shape;
//!   `ssu_sweep_all_b{1,64,256}_bf16`: also every sweep variant (rows per thread, early loads,
//!   cache hints, v7 ring depths and consumer warps)).

use crate::ops::{self, noaux_tc_router, nvfp4};
use crate::runtime::{cfg, gpu, Gpu, Timing};
use crate::GpuError;
use cudarc::driver::{sys, DevicePtr, PushKernelArg};
use reference::ops::noaux_tc_router::RouterConfig;
use reference::ops::nvfp4_quantize::{Nvfp4Mode, SfLayout};
use reference::{DType, Tensor};
use serde_json::json;

const WARMUP: usize = 5;
const ITERS: usize = 50;
/// Launches captured per graph for the graph-replay timing.
const GRAPH_LAUNCHES: usize = 20;
/// Untimed replays of a graph before the timed ones.
const GRAPH_WARMUP: usize = 3;

/// Times `f` with events (one launch per sample) and, if `graph`, by replaying a graph of
/// GRAPH_LAUNCHES launches (per-launch time = replay time / GRAPH_LAUNCHES).
pub fn time_launch<F: FnMut() -> Result<(), GpuError>>(
    g: &Gpu,
    graph: bool,
    mut f: F,
) -> Result<(Timing, Option<Timing>), GpuError> {
    let single = g.time(WARMUP, ITERS, &mut f)?;
    if !graph {
        return Ok((single, None));
    }
    let err = capture_launches(g, &mut f)?;
    let graph = g
        .stream
        .end_capture(sys::CUgraphInstantiate_flags(0))
        .map_err(|e| GpuError::Driver(format!("end capture: {e}")))?;
    if let Some(e) = err {
        return Err(e);
    }
    let Some(graph) = graph else {
        return Ok((single, None));
    };
    let t = g.time(GRAPH_WARMUP, ITERS, || {
        graph
            .launch()
            .map_err(|e| GpuError::Driver(format!("graph launch: {e}")))
    })?;
    Ok((single, Some(per_launch(&t))))
}

/// Begins a capture on the GPU's stream and records GRAPH_LAUNCHES calls of `f`; the first
/// error of `f` (the capture is still open: the caller ends it, then reports the error).
fn capture_launches<F: FnMut() -> Result<(), GpuError>>(
    g: &Gpu,
    f: &mut F,
) -> Result<Option<GpuError>, GpuError> {
    g.sync()?;
    g.stream
        .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        .map_err(|e| GpuError::Driver(format!("begin capture: {e}")))?;
    for _ in 0..GRAPH_LAUNCHES {
        if let Err(e) = f() {
            return Ok(Some(e));
        }
    }
    Ok(None)
}

/// A graph replay's timing per launch of its GRAPH_LAUNCHES.
fn per_launch(t: &Timing) -> Timing {
    let per = |x: f64| x / GRAPH_LAUNCHES as f64;
    Timing {
        median_us: per(t.median_us),
        p10_us: per(t.p10_us),
        p90_us: per(t.p90_us),
        samples: t.samples,
    }
}

/// Times a graph of GRAPH_LAUNCHES launches of `f` whose kernel-to-kernel edges are
/// programmatic ([`crate::graph`]: each launch may begin while the one before it finishes, and
/// waits at its `DUET_PDL_ENTRY` until that one's writes are visible), as the decode engine's
/// `--engine-pdl` graphs run. Per-launch time and the number of programmatic edges; `None` when
/// `g` is not the process's GPU or no edge could be made programmatic (a kernel that is not
/// PDL-safe), so a caller never reports a plain graph as a PDL one.
pub fn time_graph_pdl<F: FnMut() -> Result<(), GpuError>>(
    g: &Gpu,
    mut f: F,
) -> Result<Option<(Timing, usize)>, GpuError> {
    let arc = crate::runtime::gpu()?;
    if !std::ptr::eq(&*arc, g) {
        return Ok(None);
    }
    let err = capture_launches(g, &mut f)?;
    let graph = crate::graph::end_capture(&arc, true);
    if let Some(e) = err {
        return Err(e);
    }
    let graph = graph?;
    if graph.programmatic_edges == 0 {
        return Ok(None);
    }
    let t = g.time(3, ITERS, || graph.launch())?;
    Ok(Some((per_launch(&t), graph.programmatic_edges)))
}

/// Device-to-device copy of `bytes` bytes: (timing, GB/s counting read + write).
pub fn copy_ceiling(g: &Gpu, bytes: usize) -> Result<(Timing, f64), GpuError> {
    copy_kernel(g, bytes, "copy_v1", 8, 512, 0, false)
}

/// Times `bench_copy.cu`'s kernel `name` copying `bytes` (rounded down to 16) on `blocks_per_sm`
/// x SMs blocks of `threads` with `smem` bytes of dynamic shared memory (<= 48 KiB); returns the
/// timing and GB/s counting bytes read plus written. `graph`: the per-launch time of a replayed
/// graph of launches instead of one launch's (the floor of a small kernel's launch; `bytes` may
/// be 0: an empty kernel).
fn copy_kernel(
    g: &Gpu,
    bytes: usize,
    name: &str,
    blocks_per_sm: u32,
    threads: u32,
    smem: u32,
    graph: bool,
) -> Result<(Timing, f64), GpuError> {
    let n16 = bytes / 16;
    // Session 28's in-place probes (bench_copy.cu v8-v10) add 1 to every byte of `dst` in place.
    let inplace = COPY_INPLACE.contains(&name);
    let bumped = name == COPY_BUMPED;
    if (inplace || bumped) && !n16.is_multiple_of(16384) {
        return Err(GpuError::Unsupported(format!(
            "{name}: tiled probe over {bytes} bytes: needs a multiple of 256 KiB"
        )));
    }
    // (in place: a 16-byte source only for the kernels' common signature)
    // (at least 16 bytes each: `bytes` may be 0)
    let dbytes = (n16 * 16).max(16);
    let sbytes = if inplace { 16 } else { dbytes };
    let src = g.alloc_raw::<u8>(sbytes)?;
    let dst = g.alloc_raw::<u8>(dbytes)?;
    let (sp, _a) = src.device_ptr(&g.stream);
    let (dp, _b) = dst.device_ptr(&g.stream);
    let f = g.function("bench_copy", name)?;
    let n = n16 as i64;
    let grid = g.sm_count * blocks_per_sm;
    // The source a byte pattern, the destination poisoned: checked after the timing (in place:
    // the pattern, bumped once a launch).
    let dbyte = if inplace { 0x5Au8 } else { 0xA5u8 };
    let mut launches = 0usize;
    for (p, v, len) in [(sp, 0x5Au8, sbytes), (dp, dbyte, dbytes)] {
        // SAFETY: p is a live allocation of n16 * 16 bytes on this stream's context.
        unsafe { cudarc::driver::result::memset_d8_async(p, v, len, g.stream.cu_stream()) }
            .map_err(|e| GpuError::Driver(format!("{name}: memset: {e}")))?;
    }
    let (single, replay) = time_launch(g, graph, || {
        launches += 1;
        let mut a = g.stream.launch_builder(&f);
        a.arg(&sp).arg(&dp).arg(&n);
        // SAFETY: both buffers hold n16 16-byte vectors; the kernels walk them grid-stride;
        // smem covers copy_v3's barriers and stages (the others take none).
        unsafe { a.launch(cfg(grid, threads, smem)) }
            .map(|_| ())
            .map_err(|e| GpuError::Driver(format!("{name}: {e}")))
    })?;
    let t = match (graph, replay) {
        (false, _) => single,
        (true, Some(t)) => {
            // the captured launches ran (GRAPH_WARMUP + ITERS) times each, not once
            launches += (GRAPH_WARMUP + ITERS - 1) * GRAPH_LAUNCHES;
            t
        }
        (true, None) => {
            return Err(GpuError::Driver(format!(
                "{name}: the graph capture gave no graph"
            )))
        }
    };
    // The copy must have written every byte: the first, a middle and the last 4 KiB (the
    // kernels' tails) hold the source's pattern (in place: bumped once a launch).
    let want = if inplace {
        0x5Au8.wrapping_add((launches % 256) as u8)
    } else if bumped {
        0x5B
    } else {
        0x5A
    };
    let len = n16 * 16;
    let probe = 4096.min(len);
    let starts = if len == 0 {
        vec![]
    } else {
        vec![0, len / 2 / 16 * 16, len - probe]
    };
    for start in starts {
        let got = g
            .stream
            .clone_dtoh(&dst.slice(start..start + probe))
            .map_err(|e| GpuError::Driver(format!("{name}: download: {e}")))?;
        if let Some(i) = got.iter().position(|&b| b != want) {
            return Err(GpuError::Driver(format!(
                "{name} did not copy byte {} of {len} (0x{:02x}, want 0x{want:02x} after {launches} launches): its timing is not a copy",
                start + i,
                got[i]
            )));
        }
    }
    let gbs = 2.0 * (n16 * 16) as f64 / (t.median_us * 1e-6) / 1e9;
    Ok((t, gbs))
}

/// The in-place probes of bench_copy.cu (session 28): every byte bumped in place, read and
/// written where it lies as a state update does: grid-stride (v8), SSU v11's pattern of one
/// contiguous range of 4 KiB chunks a warp (v9), whole 16 KiB tiles dealt round-robin (v10).
/// Session 29's tile-size sweep of v10: v11 (4 KiB tiles), v12 (8 KiB), v13 (64 KiB), v14
/// (256 KiB); v16 / v17 (v10 with a bulk L2 prefetch of each warp's tile one / two rounds
/// ahead), all in place.
const COPY_INPLACE: [&str; 9] = [
    "copy_v8", "copy_v9", "copy_v10", "copy_v11", "copy_v12", "copy_v13", "copy_v14", "copy_v16",
    "copy_v17",
];

/// copy_v15: v10's order reading a source and writing the destination bumped once (0x5B).
const COPY_BUMPED: &str = "copy_v15";

/// copy_v3's dynamic shared memory: 128 bytes of barriers and 5 stages of 8 KiB (COPY3_ST,
/// COPY3_CH in bench_copy.cu).
const COPY3_SMEM: u32 = 128 + 5 * 8192;

/// The copy ceiling several ways at `bytes`: `copy_v1` (the benches' ceiling), `copy_v2` (four
/// loads in flight a thread), with `with_v3` (the `copy` preset) `copy_v3` (the bulk copy engine
/// both ways, one thread a block) and session 24's `copy_v4`-`copy_v7` (cache hints, streaming
/// stores, warp-contiguous chunks), and the driver's device-to-device memcpy (the copy engines,
/// not a kernel: ~7% faster than any SM form on the H200). A variant that fails is reported
/// with its error.
pub fn copy_variants(g: &Gpu, bytes: usize, with_v3: bool) -> Result<serde_json::Value, GpuError> {
    let mut out = vec![];
    let mut kernels = vec![
        ("copy_v1", 8, 512, 0),
        ("copy_v2", 8, 256, 0),
        ("copy_v2", 4, 256, 0),
    ];
    if with_v3 {
        kernels.push(("copy_v3", 5, 32, COPY3_SMEM));
        // Session 24's probe of the gap to the driver's memcpy (bench_copy.cu v4-v7).
        kernels.extend([
            ("copy_v4", 8, 256, 0),
            ("copy_v5", 8, 256, 0),
            ("copy_v6", 8, 256, 0),
            ("copy_v7", 8, 256, 0),
            ("copy_v6", 4, 256, 0),
            // Session 28: in place (v11's pattern, 4 blocks of 128 an SM as its bf16 forms).
            ("copy_v8", 8, 512, 0),
            ("copy_v9", 4, 128, 0),
            ("copy_v10", 4, 128, 0),
            ("copy_v9", 3, 128, 0),
            // Session 29: v10's tile size and occupancy swept, and its order as a copy.
            ("copy_v10", 2, 128, 0),
            ("copy_v10", 5, 128, 0),
            ("copy_v11", 4, 128, 0),
            ("copy_v12", 4, 128, 0),
            ("copy_v13", 4, 128, 0),
            ("copy_v14", 4, 128, 0),
            ("copy_v15", 4, 128, 0),
            ("copy_v15", 5, 128, 0),
            ("copy_v16", 4, 128, 0),
            ("copy_v17", 4, 128, 0),
        ]);
    }
    for (name, bps, threads, smem) in kernels {
        out.push(
            match copy_kernel(g, bytes, name, bps, threads, smem, false) {
                Ok((t, gbs)) => json!({"kernel": name, "blocks_per_sm": bps, "threads": threads,
                                   "time": timing_json(&t), "gb_per_s": gbs}),
                Err(e) => json!({"kernel": name, "blocks_per_sm": bps, "error": e.to_string()}),
            },
        );
    }
    if with_v3 {
        // Session 29: launch floors in a graph (per launch of a replayed graph of 20): an empty
        // kernel (copy_v1 over 0 bytes) on SSU v11's batch-1 grid, v10 in place over batch 1's
        // 2 MiB state (L2-resident across the launches: a floor, not DRAM) and over 128 MiB
        // (batch 64's state); v11 (4 KiB tiles: one chunk a warp over 512 warps at 2 MiB) the
        // same.
        for (name, b, bps) in [
            ("copy_v1", 0usize, 4u32),
            ("copy_v10", 2 << 20, 4),
            ("copy_v11", 2 << 20, 4),
            ("copy_v10", 128 << 20, 4),
            ("copy_v11", 128 << 20, 4),
        ] {
            out.push(match copy_kernel(g, b, name, bps, 128, 0, true) {
                Ok((t, gbs)) => json!({"kernel": name, "graph": true, "bytes": b,
                    "blocks_per_sm": bps, "threads": 128, "time": timing_json(&t), "gb_per_s": gbs}),
                Err(e) => json!({"kernel": name, "graph": true, "bytes": b, "error": e.to_string()}),
            });
        }
    }
    let n = bytes / 16 * 16;
    let src = g.alloc_raw::<u8>(n)?;
    let mut dst = g.alloc_raw::<u8>(n)?;
    let (t, _) = time_launch(g, false, || {
        g.stream
            .memcpy_dtod(&src, &mut dst)
            .map_err(|e| GpuError::Driver(format!("memcpy_dtod: {e}")))
    })?;
    out.push(json!({"kernel": "memcpy_dtod", "time": timing_json(&t),
                    "gb_per_s": 2.0 * n as f64 / (t.median_us * 1e-6) / 1e9}));
    Ok(json!(out))
}

pub(crate) fn timing_json(t: &Timing) -> serde_json::Value {
    json!({"median_us": t.median_us, "p10_us": t.p10_us, "p90_us": t.p90_us, "samples": t.samples})
}

fn rand_f32(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut r = compare::gen::Rng::new(seed);
    r.normal_vec(n, scale)
}

/// Router at `tokens` tokens, 512 experts, top-22, Super config; every version.
/// Router versions a preset times (`duet bench --versions`); `None`: every version.
#[derive(Clone, Copy)]
pub struct RouterVersions<'a>(pub Option<&'a [String]>);

/// Every router version the router presets know: `auto` (the version the op picks for this T),
/// the op's versions and the diagnostic variants (timed only when named).
const ROUTER_BENCH_VERSIONS: &[&str] = &[
    "auto", "v1", "v2", "v3", "v4", "v5", "v6", "v7", "v8", "v9", "v10", "v11", "v12", "v18",
    "v9n", "v7p",
];

pub fn router(g: &Gpu, tokens: usize, rv: RouterVersions) -> Result<serde_json::Value, GpuError> {
    router_with(g, tokens, RouterConfig::nemotron_super(), rv)
}

/// [`router`] with the Super config's sigmoid replaced by `tanh_f32` (the all-f32 sigmoid of
/// `reference::num::tanhf`; presets `router_t*_f32sig`).
pub fn router_f32sig(
    g: &Gpu,
    tokens: usize,
    rv: RouterVersions,
) -> Result<serde_json::Value, GpuError> {
    let c = RouterConfig {
        sigmoid: reference::ops::noaux_tc_router::SigmoidMode::TanhF32,
        ..RouterConfig::nemotron_super()
    };
    router_with(g, tokens, c, rv)
}

fn router_with(
    g: &Gpu,
    tokens: usize,
    c: RouterConfig,
    rv: RouterVersions,
) -> Result<serde_json::Value, GpuError> {
    let e = 512;
    let logits = g.upload(&Tensor::from_f32(
        &[tokens, e],
        rand_f32(tokens * e, 1, 2.0),
    ))?;
    let bias = g.upload(&Tensor::from_f32(&[e], rand_f32(e, 2, 0.1)))?;
    let idx = g.alloc_poisoned(&[tokens, c.top_k], DType::I32, 0xFF)?;
    let w = g.alloc_poisoned(&[tokens, c.top_k], DType::F32, 0xFF)?;
    let l = noaux_tc_router::Launch {
        logits: logits.ptr(&g.stream),
        logits_dt: 0,
        bias: bias.ptr(&g.stream),
        bias_dt: 0,
        tokens,
        experts: e,
        cfg: c,
        out_idx: idx.ptr(&g.stream),
        out_w: w.ptr(&g.stream),
        f32_sigmoid_bench: false,
    };
    let bytes = (tokens * e * 4 + e * 4 + tokens * c.top_k * 8) as f64;
    debug_assert!(
        e != 512
            || c.top_k != 22
            || preset_counted_bytes(&format!("router_t{tokens}")) == Some(bytes as u64)
    );
    let mut versions = vec![];
    let only = rv.0;
    for &v in ROUTER_BENCH_VERSIONS {
        let named = only.is_some_and(|o| o.iter().any(|x| x == v));
        // The diagnostic variants only when named; with a list, only what it names.
        if (only.is_some() && !named) || (only.is_none() && matches!(v, "v9n" | "v7p")) {
            continue;
        }
        let (single, graph) = time_launch(g, true, || l.run(g, v))?;
        let best = graph.as_ref().map_or(single.median_us, |t| t.median_us);
        versions.push(json!({
            "version": v, "event": timing_json(&single),
            "graph_per_launch": graph.as_ref().map(timing_json),
            "gb_per_s": bytes / (best * 1e-6) / 1e9,
        }));
    }
    // Cost attribution only: v3 with an f32 tanhf sigmoid (NOT bit-exact with the reference).
    let lf = noaux_tc_router::Launch {
        f32_sigmoid_bench: true,
        ..l
    };
    if only.is_none() {
        let (single, graph) = time_launch(g, true, || lf.run(g, "v3"))?;
        versions.push(json!({
        "version": "v3[f32 tanhf sigmoid, bench only, not exact]", "event": timing_json(&single),
        "graph_per_launch": graph.as_ref().map(timing_json),
    }));
    }
    Ok(
        json!({"op": "noaux_tc_router", "shape": {"T": tokens, "E": e, "top_k": c.top_k},
              "sigmoid": format!("{:?}", c.sigmoid), "bytes": bytes, "versions": versions}),
    )
}

/// NVFP4 quantize of a rows x cols bf16 tensor (kernel mode), both layouts, vs the copy ceiling.
pub fn nvfp4_quantize(g: &Gpu, rows: usize, cols: usize) -> Result<serde_json::Value, GpuError> {
    let x = g.upload(&Tensor::from_f32_as(
        &[rows, cols],
        &rand_f32(rows * cols, 3, 1.0),
        DType::BF16,
    ))?;
    let gs = nvfp4::global_from_device_amax(g, x.ptr(&g.stream), 1, rows * cols)?;
    let gd = g.upload(&Tensor::from_f32(&[1], vec![gs]))?;
    let (ct, cgbs) = copy_ceiling(g, rows * cols * 2)?;
    let mut out = vec![];
    for (ver, l) in [
        ("v1", SfLayout::Linear),
        ("v2", SfLayout::Linear),
        ("v3", SfLayout::Linear),
        ("v3", SfLayout::Swizzled128x4),
        ("v4", SfLayout::Linear),
        ("v4", SfLayout::Swizzled128x4),
        ("v5", SfLayout::Linear),
        ("v6", SfLayout::Linear),
        ("v7", SfLayout::Linear),
        ("v7", SfLayout::Swizzled128x4),
        ("v8", SfLayout::Linear),
    ] {
        let q = g.alloc_poisoned(&[rows, cols / 2], DType::U8, 0xFF)?;
        let sf = g.alloc_poisoned(&l.shape(rows, cols), DType::U8, 0xFF)?;
        let (t, _) = time_launch(g, false, || {
            nvfp4::launch_quantize(
                g,
                ver,
                x.ptr(&g.stream),
                1,
                rows,
                cols,
                gd.ptr(&g.stream),
                Nvfp4Mode::Kernel,
                l,
                q.ptr(&g.stream),
                sf.ptr(&g.stream),
            )
        })?;
        let bytes = (rows * cols * 2 + rows * cols / 2 + l.len(rows, cols)) as f64;
        debug_assert!(
            rows != 8192
                || cols != 8192
                || l.name() != "linear"
                || preset_counted_bytes("nvfp4_8192") == Some(bytes as u64)
        );
        let gbs = bytes / (t.median_us * 1e-6) / 1e9;
        out.push(
            json!({"version": ver, "layout": l.name(), "time": timing_json(&t), "bytes": bytes,
                        "gb_per_s": gbs, "pct_of_copy": 100.0 * gbs / cgbs}),
        );
    }
    Ok(
        json!({"op": "nvfp4_quantize", "shape": {"rows": rows, "cols": cols, "dtype": "bf16", "mode": "kernel"},
              "copy": {"bytes": 2 * rows * cols * 2, "time": timing_json(&ct), "gb_per_s": cgbs},
              "versions": out}),
    )
}

/// Bytes a preset's kernel must move at least (inputs read once + outputs written once), for
/// the presets whose shape is one number: `router_t*` (f32 logits [T, 512] + bias, i32 indices
/// and f32 weights [T, 22]) and `nvfp4_8192` (bf16 in, E2M1 codes + linear E4M3 scales out).
/// `duet profile --shape` prints ncu's DRAM bytes next to it. No GPU needed.
pub fn preset_counted_bytes(name: &str) -> Option<u64> {
    let router = |t: u64| t * 512 * 4 + 512 * 4 + t * 22 * 8;
    let nvfp4 = |rows: u64, cols: u64| rows * cols * 2 + rows * cols / 2 + rows * cols / 16;
    let t = name
        .strip_prefix("router_t")
        .map(|r| r.strip_suffix("_f32sig").unwrap_or(r));
    match (name, t.and_then(|t| t.parse::<u64>().ok())) {
        (_, Some(t)) => Some(router(t)),
        ("nvfp4_8192", _) => Some(nvfp4(8192, 8192)),
        _ => None,
    }
}

/// A named preset (module doc).
pub fn preset(name: &str) -> Result<serde_json::Value, GpuError> {
    preset_versions(name, None)
}

/// [`preset`], the router presets timing only `versions` when given (unknown names are an
/// error; the diagnostic variants v9n / v7p are timed only when named).
pub fn preset_versions(
    name: &str,
    versions: Option<&[String]>,
) -> Result<serde_json::Value, GpuError> {
    if let Some(vs) = versions {
        if let Some(bad) = vs
            .iter()
            .find(|v| !ROUTER_BENCH_VERSIONS.contains(&v.as_str()))
        {
            return Err(GpuError::NoVersion {
                op: "noaux_tc_router".into(),
                version: bad.clone(),
                known: ROUTER_BENCH_VERSIONS.join(", "),
            });
        }
        if !name.starts_with("router_t") {
            return Err(GpuError::Unsupported(format!(
                "bench preset {name}: a version list applies to the router presets only"
            )));
        }
    }
    let g = gpu()?;
    let rv = RouterVersions(versions);
    let mut out = match name {
        "router_t1" => router(&g, 1, rv),
        "router_t64" => router(&g, 64, rv),
        "router_t4096" => router(&g, 4096, rv),
        "router_t32768" => router(&g, 32768, rv),
        "router_t1_f32sig" => router_f32sig(&g, 1, rv),
        "router_t64_f32sig" => router_f32sig(&g, 64, rv),
        "router_t4096_f32sig" => router_f32sig(&g, 4096, rv),
        "router_t32768_f32sig" => router_f32sig(&g, 32768, rv),
        "nvfp4_8192" => nvfp4_quantize(&g, 8192, 8192),
        // Mamba (gpu/src/ops/{causal_conv1d,ssd_chunk_scan}.rs): prefill batch 1, 50,000 tokens.
        "conv1d_prefill_50k" => ops::causal_conv1d::bench_prefill(&g, 1, 10240, 50_000, 4),
        "ssd_50k" => ops::ssd_chunk_scan::bench_scan(&g, 1, 50_000, 128, 64, 8, 128, 128, false),
        "ssd_4k" => ops::ssd_chunk_scan::bench_scan(&g, 1, 4096, 128, 64, 8, 128, 128, false),
        "ssd_50k_sweep" => ops::ssd_chunk_scan::bench_scan(&g, 1, 50_000, 128, 64, 8, 128, 128, true),
        "ssu_b1_bf16" => ops::selective_state_update::bench_super(&g, 1, DType::BF16),
        "ssu_b64_bf16" => ops::selective_state_update::bench_super(&g, 64, DType::BF16),
        "ssu_b256_bf16" => ops::selective_state_update::bench_super(&g, 256, DType::BF16),
        "ssu_b256_f32" => ops::selective_state_update::bench_super(&g, 256, DType::F32),
        // the decode engine's case: batch 1, f32 state (v6 until session 12, then v10)
        "ssu_b1_f32" => ops::selective_state_update::bench_super(&g, 1, DType::F32),
        "ssu_b64_f16" => ops::selective_state_update::bench_f16(&g, 64),
        "ssu_b256_f16" => ops::selective_state_update::bench_f16(&g, 256),
        "ssu_b256_i16" => ops::selective_state_update::bench_i16(&g, 256),
        "ssu_v11" => ops::selective_state_update::bench_v11(&g),
        "ssu_v11_b256" => ops::selective_state_update::bench_v11_b256(&g),
        "ssu_sweep_b64_bf16" => ops::selective_state_update::bench_sweep(&g, 64, false),
        "ssu_sweep_b256_bf16" => ops::selective_state_update::bench_sweep(&g, 256, false),
        "ssu_sweep_all_b1_bf16" => ops::selective_state_update::bench_sweep(&g, 1, true),
        "ssu_sweep_all_b64_bf16" => ops::selective_state_update::bench_sweep(&g, 64, true),
        "ssu_sweep_all_b256_bf16" => ops::selective_state_update::bench_sweep(&g, 256, true),
        // LatentMoE routed expert layer (gpu/src/ops/moe.rs): GEMM1 + relu^2 + NVFP4 epilogue,
        // GEMM2, Super shapes; floors from the issue (bandwidth at small T, bf16 FLOPs at 4096).
        "moe_t1" => ops::moe::bench_expert_layer(&g, 1, 16.0),
        "moe_t8" => ops::moe::bench_expert_layer(&g, 8, 115.0),
        "moe_t64" => ops::moe::bench_expert_layer(&g, 64, 350.0),
        "moe_t4096" => ops::moe::bench_expert_layer(&g, 4096, 1335.0),
        // The decode engine's routed slots of one token (gpu/src/model.rs): the NVFP4 slot
        // GEMV variants side by side, their bits checked against the default's.
        "moe_slots_t1" => crate::model::GpuKernels::new()?.bench_moe_slots(),
        // The decode engine's norms and slot mix with and without unrolled loops.
        "norms_super" => crate::model::GpuKernels::new()?.bench_norms(),
        "copy" => {
            let (t, gbs) = copy_ceiling(&g, 1 << 30)?;
            Ok(json!({"op": "copy", "bytes": 2u64 << 30, "time": timing_json(&t), "gb_per_s": gbs,
                      "variants": copy_variants(&g, 1 << 30, true)?}))
        }
        other => Err(GpuError::Unsupported(format!(
            "bench preset '{other}'; known: router_t1, router_t64, router_t4096, router_t32768, router_t1_f32sig, router_t64_f32sig, router_t4096_f32sig, router_t32768_f32sig, nvfp4_8192, conv1d_prefill_50k, ssd_50k, ssd_4k, ssd_50k_sweep, ssu_b1_bf16, ssu_b64_bf16, ssu_b256_bf16, ssu_b256_f32, ssu_b1_f32, ssu_b64_f16, ssu_b256_f16, ssu_b256_i16, ssu_v11, ssu_v11_b256, ssu_sweep_b64_bf16, ssu_sweep_b256_bf16, ssu_sweep_all_b1_bf16, ssu_sweep_all_b64_bf16, ssu_sweep_all_b256_bf16, moe_t1, moe_t8, moe_t64, moe_t4096, moe_slots_t1, norms_super, copy"
        ))),
    }?;
    if let (Some(t), Some(o)) = (preset_target(name), out.as_object_mut()) {
        o.insert("target".into(), t);
    }
    Ok(out)
}

/// The issue's speed target for a preset (written into its JSON as `target`), where the issue
/// names one: the router and NVFP4 (issue 4), conv1d / SSD / SSU (issue 5), the LatentMoE expert
/// layer (issue 10). `median_us_max`: the median must be at most this; `pct_of_copy_min` /
/// `effective_tb_per_s_min`: bandwidth floors.
pub fn preset_target(name: &str) -> Option<serde_json::Value> {
    let us = |issue: u32, max: f64, what: &str| json!({"issue": issue, "median_us_max": max, "what": what});
    Some(match name {
        "router_t1" | "router_t64" => us(4, 5.0, "auto"),
        "router_t4096" => us(4, 20.0, "auto"),
        "router_t32768" => us(4, 30.0, "auto"),
        "nvfp4_8192" => {
            json!({"issue": 4, "pct_of_copy_min": 85.0, "what": "the best version"})
        }
        "conv1d_prefill_50k" => us(
            5,
            520.0,
            "auto in both layouts (channel-first v5, channel-last v10)",
        ),
        "ssd_50k" => us(5, 1500.0, "auto"),
        "ssu_b256_bf16" | "ssu_b256_f32" => json!({"issue": 5, "effective_tb_per_s_min": 4.05,
            "what": "auto (95% of the 4.27 TB/s copy the issue measured)"}),
        "ssu_b64_bf16" => us(5, 70.0, "auto"),
        "ssu_b1_bf16" => us(5, 4.0, "auto"),
        "moe_t1" => us(10, 25.0, "the expert layer, auto"),
        "moe_t8" => us(10, 180.0, "the expert layer, auto"),
        "moe_t64" => us(10, 500.0, "the expert layer, auto"),
        "moe_t4096" => us(10, 2000.0, "the expert layer, auto"),
        _ => return None,
    })
}

/// One case on its default kernel version, timed end to end through `run_version` (uploads and
/// downloads included: use [`preset`] for kernel-only numbers).
pub fn case(c: &dyn compare::Case) -> Result<serde_json::Value, GpuError> {
    let g = gpu()?;
    let op = ops::find(c.op())?;
    let inputs = c.inputs(1);
    let params = c.params();
    let opts = ops::RunOpts::default();
    let t = g.time(2, 10, || {
        ops::run_version(&g, &op, op.default_version(), &inputs, &params, &opts).map(|_| ())
    })?;
    let gbs = c.bytes() as f64 / (t.median_us * 1e-6) / 1e9;
    Ok(
        json!({"case": c.name(), "op": c.op(), "implementation": format!("gpu:{}:{}", c.op(), op.default_version()),
              "median_s": t.median_us * 1e-6, "p10_s": t.p10_us * 1e-6, "p90_s": t.p90_us * 1e-6,
              "bytes": c.bytes(), "flops": c.flops(), "gb_per_s": gbs,
              "note": "end to end: includes host<->device transfers; kernel-only numbers: gpu::bench::preset"}),
    )
}

#[cfg(test)]
mod target_tests {
    use super::preset_target;

    #[test]
    fn presets_carry_their_issue_targets() {
        let t = preset_target("conv1d_prefill_50k").expect("conv target");
        assert_eq!(t["median_us_max"], 520.0);
        assert_eq!(t["issue"], 5);
        assert_eq!(
            preset_target("moe_t4096").expect("moe")["median_us_max"],
            2000.0
        );
        assert_eq!(
            preset_target("router_t64").expect("router")["median_us_max"],
            5.0
        );
        assert_eq!(
            preset_target("ssu_b256_f32").expect("ssu")["effective_tb_per_s_min"],
            4.05
        );
        // Sweeps and diagnostics have none.
        assert!(preset_target("ssd_50k_sweep").is_none());
        assert!(preset_target("copy").is_none());
    }
}
