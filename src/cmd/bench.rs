//! `duet bench [OP...|--all] [--backend cpu|gpu] [--out FILE.json]`: times every case of the
//! named ops and writes schema-versioned JSON (plus a Chrome trace of the run).
//!
//! CPU timings are wall-clock over repeated calls of the reference (median, p10, p90); the GPU
//! backend times kernels with CUDA events (see `gpu::bench`).

use anyhow::Context;
use compare::Case;
use reference::io::write_atomic;
use std::path::PathBuf;
use std::time::Instant;

#[derive(clap::Args)]
pub struct Args {
    /// Ops to bench (regexes over case names); none with --all means every op.
    ops: Vec<String>,
    #[arg(long)]
    all: bool,
    /// Leave out the per-kernel ptxas report (one more NVRTC compile of every kernel file not in
    /// the kernel cache: minutes on a fresh machine); `duet profile` passes it, since its bench
    /// run only feeds ncu.
    #[arg(long)]
    no_resources: bool,
    /// GPU: kernel-only benchmark presets at the Super shapes (repeatable), e.g. router_t1,
    /// router_t4096, router_t32768, nvfp4_8192, conv1d_prefill_50k, ssd_50k, copy.
    #[arg(long = "shape")]
    shapes: Vec<String>,
    /// With --shape router_*: time only these kernel versions (comma-separated, e.g. v7,v9;
    /// also the diagnostic variants v9n, v7p). Default: every version.
    #[arg(long, value_delimiter = ',')]
    versions: Vec<String>,
    #[arg(long, default_value = "cpu", value_parser = ["cpu", "gpu"])]
    backend: String,
    /// Minimum measured repetitions per case.
    #[arg(long, default_value_t = 5)]
    reps: usize,
    /// Stop repeating a case after this many seconds (after the minimum repetitions).
    #[arg(long, default_value_t = 2.0)]
    max_seconds: f64,
    /// JSON results file (written atomically).
    #[arg(long, default_value = "bench.json")]
    out: PathBuf,
    /// Chrome trace of the run (open in Perfetto).
    #[arg(long)]
    trace: Option<PathBuf>,
    /// `bench compare`: a slowdown above this percentage (and significant) is a regression.
    #[arg(long, default_value_t = 5.0)]
    threshold: f64,
    /// `bench compare`: deltas below this many microseconds are noise.
    #[arg(long, default_value_t = 1.0)]
    min_delta_us: f64,
}

/// Quantile of sorted samples (nearest rank).
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Pops the current NVTX range when dropped (every exit path of a measured case).
struct PopOnDrop;
impl Drop for PopOnDrop {
    fn drop(&mut self) {
        nvtx::range_pop!();
    }
}

/// One hash over every embedded kernel source (changes whenever any .cu or the header does).
fn kernel_source_hash() -> String {
    let all: String = gpu::compile::SOURCES
        .iter()
        .map(|k| gpu::compile::full_source(k))
        .collect();
    format!("{:016x}", gpu::compile::fnv1a(all.as_bytes()))
}

/// The GPU the run used: name, arch, SM count, driver version (nvidia-smi when present).
fn gpu_device_json() -> serde_json::Value {
    let driver = std::process::Command::new("nvidia-smi")
        .args(["--query-gpu=driver_version", "--format=csv,noheader"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    match gpu::runtime::gpu() {
        Ok(g) => {
            serde_json::json!({"name": g.name, "arch": g.arch, "sm_count": g.sm_count, "driver": driver})
        }
        Err(e) => serde_json::json!({"error": e.to_string()}),
    }
}

/// Registers, spill (local-memory) bytes, stack and static shared memory of every kernel, from
/// ptxas' report (NVRTC compiles each kernel file once more with `--ptxas-options=-v`).
fn kernel_resources_json() -> serde_json::Value {
    let arch = gpu::runtime::gpu()
        .map(|g| g.arch.clone())
        .unwrap_or_else(|_| "sm_90a".into());
    // One NVRTC compile per kernel file, in parallel (NVRTC is single-threaded per program).
    let results: Vec<(String, serde_json::Value)> = std::thread::scope(|sc| {
        let handles: Vec<_> = gpu::compile::SOURCES
            .iter()
            .map(|k| {
                let arch = arch.clone();
                sc.spawn(move || {
                    let v = match gpu::compile::resources(k.name, &arch) {
                        Ok(r) => serde_json::to_value(r).unwrap_or_default(),
                        Err(e) => serde_json::json!({"error": e.to_string()}),
                    };
                    (k.name.to_string(), v)
                })
            })
            .collect();
        handles.into_iter().filter_map(|h| h.join().ok()).collect()
    });
    let out: serde_json::Map<String, serde_json::Value> = results.into_iter().collect();
    serde_json::json!({"arch": arch, "files": out})
}

/// The git revision the binary was built from (build.rs), else the checkout's HEAD at run time.
fn git_rev() -> String {
    if let Some(rev) = option_env!("DUET_GIT_REV") {
        return rev.to_string();
    }
    std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into())
}

/// The verdict on one row of a comparison: (delta %, Mann-Whitney p of the samples, verdict).
/// A change counts when it is significant (p < 0.01, or no test possible), at least
/// `threshold_pct` and at least `min_delta` in absolute terms; slower is "REGRESSED".
fn verdict(
    base: f64,
    cand: f64,
    sa: &[f64],
    sb: &[f64],
    threshold_pct: f64,
    min_delta: f64,
) -> (f64, Option<f64>, &'static str) {
    let pct = 100.0 * (cand - base) / base;
    let p = traces::stats::mann_whitney(sa, sb);
    let significant = p.is_none_or(|p| p < 0.01);
    let v = if !pct.is_finite() {
        "no median"
    } else if (cand - base).abs() < min_delta || !significant || pct.abs() < threshold_pct {
        "unchanged"
    } else if pct > 0.0 {
        "REGRESSED"
    } else {
        "improved"
    };
    (pct, p, v)
}

/// `duet bench compare A.json B.json`: per case, median delta and a Mann-Whitney U test on the
/// per-repetition samples (the traces layer's noise model); regressions beyond the threshold
/// that are also statistically significant and above the minimum absolute delta fail (exit 1).
/// Two `duet e2e --bench-decode N --json` outputs (device logs with lines before the JSON
/// included) compare per decode path and per op instead ([`compare_decode_benches`]); two
/// `duet profile` outputs (text or `--json`) per kernel and per launch
/// ([`super::profile_compare`]).
fn compare_files(
    a: &std::path::Path,
    b: &std::path::Path,
    threshold_pct: f64,
    min_delta_s: f64,
) -> anyhow::Result<i32> {
    // Two `duet profile` outputs (e.g. engine-step before / after): per kernel and launch.
    if let Some(rc) = super::profile_compare::compare(a, b)? {
        return Ok(rc);
    }
    let load = |p: &std::path::Path| -> anyhow::Result<serde_json::Value> {
        let bytes = std::fs::read(p).with_context(|| format!("{}: cannot read", p.display()))?;
        let v: serde_json::Value = parse_json_output(&bytes).with_context(|| {
            format!(
                "{}: not a JSON file (expected `duet bench` or `duet e2e --json` output)",
                p.display()
            )
        })?;
        if v.get("bench_decode").is_some_and(|b| b.is_object()) {
            return Ok(v);
        }
        if !v["schema"]
            .as_str()
            .is_some_and(|s| s.starts_with("duet.bench/"))
        {
            anyhow::bail!("{}: no \"schema\": \"duet.bench/N\" field; expected a file written by `duet bench`", p.display());
        }
        Ok(v)
    };
    let (va, vb) = (load(a)?, load(b)?);
    match (va.get("bench_decode"), vb.get("bench_decode")) {
        (Some(x), Some(y)) => return compare_decode_benches(x, y, threshold_pct),
        (None, None) => {}
        _ => anyhow::bail!(
            "{} and {}: one is `duet e2e --json` output with a decode bench, the other is not; \
             compare like with like",
            a.display(),
            b.display()
        ),
    }
    type BenchRow = (String, f64, Vec<f64>);
    let rows = |v: &serde_json::Value, p: &std::path::Path| -> anyhow::Result<Vec<BenchRow>> {
        let list = v["results"].as_array().ok_or_else(|| {
            anyhow::anyhow!("{}: \"results\" is missing or not a list", p.display())
        })?;
        list.iter()
            .enumerate()
            .map(|(i, x)| {
                let case = x["case"].as_str().ok_or_else(|| {
                    anyhow::anyhow!("{}: results[{i}] has no \"case\" string", p.display())
                })?;
                let med = x["median_s"]
                    .as_f64()
                    .filter(|m| m.is_finite() && *m > 0.0)
                    .ok_or_else(|| {
                        anyhow::anyhow!(
                            "{}: results[{i}] ({case}) has no positive \"median_s\"",
                            p.display()
                        )
                    })?;
                let name = format!("{case} [{}]", x["implementation"].as_str().unwrap_or("?"));
                let samples = x["samples_s"]
                    .as_array()
                    .map(|s| s.iter().filter_map(|v| v.as_f64()).collect())
                    .unwrap_or_default();
                Ok((name, med, samples))
            })
            .collect()
    };
    let (ra, rb) = (rows(&va, a)?, rows(&vb, b)?);
    let mut regressions = 0;
    println!(
        "{:<70} {:>12} {:>12} {:>9} {:>8}  verdict",
        "case", "base ms", "cand ms", "delta %", "p"
    );
    for (name, ma, sa) in &ra {
        let Some((_, mb, sb)) = rb.iter().find(|(n, _, _)| n == name) else {
            println!(
                "{name:<70} {:>12.4} {:>12} {:>9} {:>8}  removed",
                ma * 1e3,
                "-",
                "-",
                "-"
            );
            continue;
        };
        let (pct, p, verdict) = verdict(*ma, *mb, sa, sb, threshold_pct, min_delta_s);
        if verdict == "REGRESSED" {
            regressions += 1;
        }
        println!(
            "{name:<70} {:>12.4} {:>12.4} {:>+9.1} {:>8}  {verdict}",
            ma * 1e3,
            mb * 1e3,
            pct,
            p.map_or("-".into(), |p| format!("{p:.1e}"))
        );
    }
    for (name, mb, _) in rb
        .iter()
        .filter(|(n, _, _)| !ra.iter().any(|(m, _, _)| m == n))
    {
        println!(
            "{name:<70} {:>12} {:>12.4} {:>9} {:>8}  new",
            "-",
            mb * 1e3,
            "-",
            "-"
        );
    }
    Ok(if regressions > 0 { 1 } else { 0 })
}

/// A JSON document from a file that may carry other lines before it (a device log: `duet e2e
/// --json`'s notes on stderr, merged): the whole text, else from the first line that starts
/// with `{`.
fn parse_json_output(bytes: &[u8]) -> anyhow::Result<serde_json::Value> {
    if let Ok(v) = serde_json::from_slice(bytes) {
        return Ok(v);
    }
    let text = std::str::from_utf8(bytes).context("not UTF-8")?;
    let start = text
        .match_indices('\n')
        .map(|(i, _)| i + 1)
        .find(|&i| text[i..].starts_with('{'))
        .context("no line starting with '{'")?;
    Ok(serde_json::from_str(&text[start..])?)
}

/// `duet bench compare` on two `duet e2e --json` outputs with decode benches: per path
/// (`gpu`, `gpu-engine`, ...) the median ms per step with a Mann-Whitney U test on the steps'
/// times (the `steady` steps after the graph engine's warm-up ones when both runs have them),
/// then per op of each path present in both the change in ms per step (largest first).
/// A path slower by more than the threshold and significant (p < 0.01) is a regression (exit 1).
fn compare_decode_benches(
    a: &serde_json::Value,
    b: &serde_json::Value,
    threshold_pct: f64,
) -> anyhow::Result<i32> {
    let paths = |v: &serde_json::Value| -> Vec<(String, serde_json::Value)> {
        v["paths"]
            .as_object()
            .map(|m| m.iter().map(|(k, x)| (k.clone(), x.clone())).collect())
            .unwrap_or_default()
    };
    let (pa, pb) = (paths(a), paths(b));
    if pa.is_empty() || pb.is_empty() {
        anyhow::bail!(
            "a decode bench without \"paths\": expected `duet e2e --bench-decode N --json`"
        );
    }
    for key in [
        "weights",
        "gpu_weights",
        "experts",
        "engine_fuse",
        "engine_pdl",
    ] {
        if a.get(key) != b.get(key) {
            println!(
                "note: {key} differs: {} -> {}",
                a.get(key).unwrap_or(&serde_json::Value::Null),
                b.get(key).unwrap_or(&serde_json::Value::Null)
            );
        }
    }
    let samples = |x: &serde_json::Value| -> Vec<f64> {
        x["ms"]
            .as_array()
            .map(|s| s.iter().filter_map(|v| v.as_f64()).collect())
            .unwrap_or_default()
    };
    let mut regressions = 0;
    println!(
        "decode step, median ms per step\n{:<14} {:>10} {:>10} {:>9} {:>9}  verdict",
        "path", "base", "cand", "delta %", "p"
    );
    for (name, xa) in &pa {
        let Some((_, xb)) = pb.iter().find(|(n, _)| n == name) else {
            println!(
                "{name:<14} {:>10.3} {:>10} {:>9} {:>9}  removed",
                xa["median_ms"].as_f64().unwrap_or(f64::NAN),
                "-",
                "-",
                "-"
            );
            continue;
        };
        // The steady-state steps (the graph engine's replays) when both runs report them.
        let both_steady = xa["steady"].is_object() && xb["steady"].is_object();
        let pick = |x: &serde_json::Value| {
            if both_steady {
                x["steady"].clone()
            } else {
                x.clone()
            }
        };
        let (sa, sb) = (pick(xa), pick(xb));
        let (ma, mb) = (
            sa["median_ms"].as_f64().unwrap_or(f64::NAN),
            sb["median_ms"].as_f64().unwrap_or(f64::NAN),
        );
        let (pct, p, verdict) = verdict(ma, mb, &samples(&sa), &samples(&sb), threshold_pct, 0.0);
        if verdict == "REGRESSED" {
            regressions += 1;
        }
        println!(
            "{name:<14} {ma:>10.3} {mb:>10.3} {pct:>+9.1} {:>9}  {verdict}{}",
            p.map_or("-".into(), |p| format!("{p:.1e}")),
            if both_steady {
                " (steady-state steps)"
            } else {
                ""
            }
        );
    }
    for (name, xb) in pb.iter().filter(|(n, _)| !pa.iter().any(|(m, _)| m == n)) {
        println!(
            "{name:<14} {:>10} {:>10.3} {:>9} {:>9}  new",
            "-",
            xb["median_ms"].as_f64().unwrap_or(f64::NAN),
            "-",
            "-"
        );
    }
    // The GPU engine's host time per steady step by part, where both runs report it.
    for (name, xa) in &pa {
        let Some((_, xb)) = pb.iter().find(|(n, _)| n == name) else {
            continue;
        };
        let (Some(ha), Some(hb)) = (
            xa["host_per_step_us"].as_object(),
            xb["host_per_step_us"].as_object(),
        ) else {
            continue;
        };
        println!("\n{name}: host us per steady step by part (base -> cand)");
        for (part, a) in ha {
            let (a, b) = (
                a.as_f64().unwrap_or(f64::NAN),
                hb.get(part).and_then(|v| v.as_f64()).unwrap_or(f64::NAN),
            );
            println!("  {part:<28} {a:>9.1} -> {b:>9.1}  {:>+9.1}", b - a);
        }
    }
    // How the device ran the step (the GPU graph's kernel edges and programmatic ones), where
    // both runs report it.
    for (name, xa) in &pa {
        let Some((_, xb)) = pb.iter().find(|(n, _)| n == name) else {
            continue;
        };
        let (Some(la), Some(lb)) = (xa["launch"].as_object(), xb["launch"].as_object()) else {
            continue;
        };
        println!("\n{name}: launch (base -> cand)");
        for (k, a) in la {
            let b = lb.get(k).unwrap_or(&serde_json::Value::Null);
            println!("  {k:<28} {:>9} -> {:>9}", a.to_string(), b.to_string());
        }
    }
    let ops = |x: &serde_json::Value| -> Vec<(String, f64)> {
        x["op_breakdown"]
            .as_array()
            .map(|v| {
                v.iter()
                    .filter_map(|o| {
                        Some((o["op"].as_str()?.to_string(), o["ms_per_step"].as_f64()?))
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    for (name, xa) in &pa {
        let Some((_, xb)) = pb.iter().find(|(n, _)| n == name) else {
            continue;
        };
        let (oa, ob) = (ops(xa), ops(xb));
        if oa.is_empty() && ob.is_empty() {
            continue;
        }
        let mut rows: Vec<(String, Option<f64>, Option<f64>)> = oa
            .iter()
            .map(|(o, t)| {
                (
                    o.clone(),
                    Some(*t),
                    ob.iter().find(|(p, _)| p == o).map(|x| x.1),
                )
            })
            .collect();
        for (o, t) in &ob {
            if !oa.iter().any(|(p, _)| p == o) {
                rows.push((o.clone(), None, Some(*t)));
            }
        }
        let d = |r: &(String, Option<f64>, Option<f64>)| r.2.unwrap_or(0.0) - r.1.unwrap_or(0.0);
        rows.sort_by(|x, y| d(y).abs().total_cmp(&d(x).abs()));
        println!("\n{name}: ms per step by op (base -> cand), largest change first");
        for r in &rows {
            let f = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.3}"));
            println!(
                "  {:<28} {:>9} -> {:>9}  {:>+9.3}",
                r.0,
                f(r.1),
                f(r.2),
                d(r)
            );
        }
    }
    Ok(if regressions > 0 { 1 } else { 0 })
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    if args.ops.first().is_some_and(|o| o == "compare") {
        let [_, a, b] = args.ops.as_slice() else {
            anyhow::bail!("usage: duet bench compare BASE.json CAND.json [--threshold PCT] (duet bench or duet e2e --bench-decode --json outputs)");
        };
        return compare_files(
            std::path::Path::new(a),
            std::path::Path::new(b),
            args.threshold,
            args.min_delta_us * 1e-6,
        );
    }
    if !args.shapes.is_empty() {
        if args.backend != "gpu" {
            anyhow::bail!("--shape presets are GPU kernel benchmarks; add --backend gpu");
        }
        if !args.versions.is_empty() && args.shapes.iter().any(|s| !s.starts_with("router_t")) {
            anyhow::bail!(
                "--versions filters the router presets (router_t*); run the other --shape presets without it"
            );
        }
        let versions = (!args.versions.is_empty()).then_some(args.versions.as_slice());
        let mut results = vec![];
        for s in &args.shapes {
            nvtx::range_push!("duet bench preset {s}");
            let _pop = PopOnDrop;
            let v = gpu::bench::preset_versions(s, versions)
                .with_context(|| format!("bench preset {s}"))?;
            println!("{}", serde_json::to_string(&v)?);
            results.push(v);
        }
        let doc = serde_json::json!({
            "schema": "duet.bench/1", "backend": "gpu", "kind": "presets",
            "device": gpu_device_json(),
            "kernel_source_hash": kernel_source_hash(), "git_revision": git_rev(), "duet_version": env!("CARGO_PKG_VERSION"), "results": results,
            "kernel_resources": if args.no_resources { serde_json::Value::Null } else { kernel_resources_json() },
        });
        write_atomic(&args.out, serde_json::to_string_pretty(&doc)?.as_bytes())?;
        eprintln!("-> {}", args.out.display());
        return Ok(0);
    }
    if args.ops.is_empty() && !args.all {
        anyhow::bail!("name the ops to bench (e.g. `duet bench noaux_tc_router`) or pass --all");
    }
    let res: Vec<regex::Regex> = args
        .ops
        .iter()
        .map(|o| {
            regex::Regex::new(o).map_err(|e| anyhow::anyhow!("'{o}' is not a valid regex: {e}"))
        })
        .collect::<Result<_, _>>()?;
    let cases: Vec<Box<dyn Case>> = compare::cases::all()
        .into_iter()
        .filter(|c| res.is_empty() || res.iter().any(|r| r.is_match(&c.name())))
        .collect();
    if cases.is_empty() {
        anyhow::bail!(
            "no case matches {:?}; `duet ops` lists the op names",
            args.ops
        );
    }
    let mut results = vec![];
    let mut events = vec![];
    let mut skipped: Vec<String> = vec![];
    let t0 = Instant::now();
    for case in &cases {
        // An NVTX range around each case's measured region (visible in an nsys capture of the run).
        nvtx::range_push!("duet bench {}", case.name());
        let _pop = PopOnDrop;
        if args.backend == "gpu" && gpu::ops::find(case.op()).is_err() {
            // --all over the case table: ops without a GPU kernel are listed, not fatal.
            if !args.all {
                anyhow::bail!(
                    "op '{}' has no GPU kernel yet; `duet ops` shows which ops do",
                    case.op()
                );
            }
            skipped.push(case.name());
            continue;
        }
        if args.backend == "gpu" {
            let s = Instant::now();
            let v = gpu::bench(case.as_ref()).with_context(|| format!("bench {}", case.name()))?;
            events.push(serde_json::json!({
                "name": case.name(), "ph": "X", "pid": 1, "tid": 2,
                "ts": (s - t0).as_secs_f64() * 1e6, "dur": s.elapsed().as_secs_f64() * 1e6,
                "args": {"median_s": v["median_s"]},
            }));
            println!("{}", serde_json::to_string(&v)?);
            results.push(v);
            continue;
        }
        let def = reference::ops::find(case.op())?;
        let inputs = case.inputs(1);
        let params = case.params();
        def.call(&inputs, &params)?; // warm-up, and fail early on a broken case
        let mut samples = vec![];
        let start = Instant::now();
        while samples.len() < args.reps
            || (start.elapsed().as_secs_f64() < args.max_seconds && samples.len() < 1000)
        {
            let s = Instant::now();
            let out = def.call(&inputs, &params)?;
            let dt = s.elapsed().as_secs_f64();
            std::hint::black_box(out);
            events.push(serde_json::json!({
                "name": case.name(), "ph": "X", "pid": 1, "tid": 1,
                "ts": (s - t0).as_secs_f64() * 1e6, "dur": dt * 1e6,
            }));
            samples.push(dt);
            if start.elapsed().as_secs_f64() > args.max_seconds && samples.len() >= 2 {
                break;
            }
        }
        samples.sort_by(f64::total_cmp);
        let med = quantile(&samples, 0.5);
        let gbs = case.bytes() as f64 / med / 1e9;
        let gflops = case.flops() as f64 / med / 1e9;
        println!(
            "{:<60} median {:>10.3} ms  p10 {:>10.3}  p90 {:>10.3}  {:>8.2} GB/s  {:>8.2} GFLOP/s  (n={})",
            case.name(),
            med * 1e3,
            quantile(&samples, 0.1) * 1e3,
            quantile(&samples, 0.9) * 1e3,
            gbs,
            gflops,
            samples.len()
        );
        results.push(serde_json::json!({
            "case": case.name(), "op": case.op(), "implementation": "reference",
            "median_s": med, "p10_s": quantile(&samples, 0.1), "p90_s": quantile(&samples, 0.9),
            "samples_s": samples, "bytes": case.bytes(), "flops": case.flops(),
            "gb_per_s": gbs, "gflop_per_s": gflops,
        }));
    }
    let doc = serde_json::json!({
        "schema": "duet.bench/1",
        "backend": args.backend,
        "device": if args.backend == "cpu" { serde_json::json!(format!("cpu x{}", std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1))) } else { gpu_device_json() },
        "git_revision": git_rev(),
        "duet_version": env!("CARGO_PKG_VERSION"),
        "kernel_source_hash": kernel_source_hash(),
        "results": results,
        "skipped_no_gpu_kernel": skipped,
        "kernel_resources": if args.backend == "gpu" && !args.no_resources { kernel_resources_json() } else { serde_json::Value::Null },
    });
    write_atomic(&args.out, serde_json::to_string_pretty(&doc)?.as_bytes())?;
    eprintln!("-> {}", args.out.display());
    if let Some(t) = &args.trace {
        write_atomic(
            t,
            serde_json::to_string(&serde_json::json!({"traceEvents": events}))?.as_bytes(),
        )?;
        eprintln!("-> {} (Chrome trace)", t.display());
    }
    Ok(0)
}
