//! `duet profile OP [--kernel REGEX] [--metrics LIST]`: runs the op's GPU benchmark under
//! Nsight Compute (`--clock-control none`, CSV raw page), ingests the CSV with the traces
//! layer and prints, per kernel, duration, DRAM bytes read/written, memory and SM throughput,
//! occupancy, registers, shared-memory bank conflicts and the per-SM balance (active cycles
//! min / avg / max: a straggler SM is flagged) next to the bytes the case table
//! counts ("DRAM read 134 MB of 134 MB counted"). `--from-csv` reads an existing ncu CSV.
//!
//! `duet profile engine-step [--e2e ARGS]`: one decode step of the decode engine (by default
//! the super preset `MEMEMEM*E` with NVFP4 experts, compact weights and CUDA graphs) under ncu
//! with `--profile-from-start off`: `duet e2e` marks its last timed engine step with
//! `cuProfilerStart` / `cuProfilerStop` (`DUET_PROFILE_ENGINE_STEP`), so every kernel of that
//! step, graph nodes included, is profiled once. `--by-kernel` (on by default here) sums the
//! durations per kernel name: where a step goes on the device without the per-op events'
//! overhead of the eager profile.

use anyhow::{bail, Context};
use std::path::PathBuf;
use traces::model::NcuKernel;

/// The metrics asked of ncu by default (names as `ncu --query-metrics` spells them).
pub const DEFAULT_METRICS: &[&str] = &[
    "gpu__time_duration.sum",
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "launch__registers_per_thread",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum",
    "smsp__inst_executed_pipe_fp64.sum",
    "smsp__inst_executed.sum",
    "l1tex__t_bytes_pipe_lsu_mem_local_op_ld.sum",
    "smsp__issue_active.avg.pct_of_peak_sustained_active",
    "sm__cycles_active.min",
    "sm__cycles_active.avg",
    "sm__cycles_active.max",
    "sm__cycles_elapsed.avg",
];

/// An SM active this many times the average marks a straggler (session 6: router v9's first
/// build had one SM active 1.98x the average, min 82.8k / avg 85.5k / max 169.6k of 173.1k
/// cycles, which looked like low occupancy until these were read).
pub const STRAGGLER_RATIO: f64 = 1.25;

/// Per-SM balance of one kernel from `sm__cycles_active.{min,avg,max}` and
/// `sm__cycles_elapsed.avg`: (min, avg, max, elapsed) in cycles when all four are present.
fn sm_cycles(k: &NcuKernel) -> Option<(f64, f64, f64, f64)> {
    Some((
        metric(k, &["sm__cycles_active.min"])?,
        metric(k, &["sm__cycles_active.avg"])?,
        metric(k, &["sm__cycles_active.max"])?,
        metric(k, &["sm__cycles_elapsed.avg"])?,
    ))
}

/// The kernels a `bench --shape` preset exists to measure (ncu regex), by preset prefix.
pub fn default_kernel_regex(shape: &str) -> Option<String> {
    let r = if shape.starts_with("router_") {
        "^router_v"
    } else if shape.starts_with("nvfp4_") {
        "^nvfp4_quantize_v"
    } else if shape.starts_with("ssu_") {
        "^ssu_(v[2-9]|x_)"
    } else if shape.starts_with("moe_") {
        "^moe_gemm"
    } else if shape.starts_with("conv1d_") {
        "conv1d"
    } else if shape.starts_with("ssd_") {
        "^ssd_"
    } else {
        return None;
    };
    Some(r.to_string())
}

#[derive(clap::Args)]
pub struct Args {
    /// Op (regex over case names) whose GPU benchmark is profiled.
    op: String,
    /// Only kernels whose name matches this regex (passed to ncu as `regex:`).
    #[arg(long)]
    kernel: Option<String>,
    /// Comma-separated ncu metric names (default: duration, DRAM bytes, throughputs,
    /// occupancy, registers, bank conflicts).
    #[arg(long)]
    metrics: Option<String>,
    /// Path of the ncu executable (default: `ncu` on PATH, then /usr/local/cuda/bin/ncu).
    #[arg(long)]
    ncu: Option<PathBuf>,
    /// Parse this ncu CSV (`--csv --page raw`) instead of running ncu.
    #[arg(long)]
    from_csv: Option<PathBuf>,
    /// Profile this `duet bench --shape` preset (e.g. ssu_b256_bf16, router_t32768) instead of
    /// the op's case-table benchmark. Without --kernel only the op's own kernels are profiled
    /// (not the preset's copy-ceiling or amax helpers).
    #[arg(long)]
    shape: Option<String>,
    /// How many kernel launches ncu profiles (default 20; engine-step: 4000, every kernel of
    /// the marked step).
    #[arg(long)]
    launch_count: Option<u32>,
    /// engine-step: the `duet e2e` arguments (whitespace-separated, one string) instead of
    /// the default super decode bench.
    #[arg(long, allow_hyphen_values = true)]
    e2e: Option<String>,
    /// Also sum the profiled kernels per name (calls, total duration, share); JSON output
    /// becomes {"kernels": [...], "by_kernel": [...], "total_us": ...}. On for engine-step.
    #[arg(long)]
    by_kernel: bool,
    #[arg(long)]
    json: bool,
}

/// The op name that profiles one decode-engine step (module doc).
pub const ENGINE_STEP: &str = "engine-step";

/// `duet e2e` arguments of the default engine step: the super decode bench with compact
/// weights and graphs (3 steps: eager, captured, replayed; the replayed one is profiled).
pub const ENGINE_STEP_E2E: &str = "--preset super --pattern MEMEMEM*E --experts nvfp4 \
    --weights bf16 --gpu-weights compact --engine-graphs --compare gpu --bench-decode 3 \
    --tokens 3 --mtp-pattern=";

/// Per kernel name: (name, calls, total ns), in order of total time (largest first).
pub fn by_kernel(rows: &[(String, Option<f64>)]) -> Vec<(String, usize, f64)> {
    let mut m: Vec<(String, usize, f64)> = Vec::new();
    for (name, dur) in rows {
        let d = dur.unwrap_or(0.0);
        match m.iter_mut().find(|(n, _, _)| n == name) {
            Some(e) => {
                e.1 += 1;
                e.2 += d;
            }
            None => m.push((name.clone(), 1, d)),
        }
    }
    m.sort_by(|a, b| b.2.total_cmp(&a.2));
    m
}

#[derive(Default)]
struct Collect(Vec<NcuKernel>);
impl traces::Sink for Collect {
    fn ncu_kernel(&mut self, k: &NcuKernel) {
        self.0.push(k.clone());
    }
}

fn find_ncu(given: &Option<PathBuf>) -> anyhow::Result<PathBuf> {
    if let Some(p) = given {
        return Ok(p.clone());
    }
    let on_path = std::env::var_os("PATH")
        .map(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join("ncu"))
                .find(|c| c.is_file())
        })
        .unwrap_or(None);
    on_path
        .or_else(|| Some(PathBuf::from("/usr/local/cuda/bin/ncu")).filter(|p| p.is_file()))
        .context("ncu (Nsight Compute) was not found on PATH or in /usr/local/cuda/bin; pass --ncu PATH, or --from-csv FILE to read an existing export")
}

fn metric(k: &NcuKernel, names: &[&str]) -> Option<f64> {
    k.metrics
        .iter()
        .find(|(n, _, v)| names.contains(&n.as_str()) && v.is_finite())
        .map(|(_, _, v)| *v)
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let engine = args.op == ENGINE_STEP;
    let re = regex::Regex::new(&args.op)
        .map_err(|e| anyhow::anyhow!("'{}' is not a valid regex: {e}", args.op))?;
    // A --shape preset is not a case-table row: the presets with one fixed shape count their
    // bytes in gpu::bench::preset_counted_bytes (the others report them in their own JSON).
    let counted: Option<u64> = if engine {
        None
    } else if let Some(shape) = &args.shape {
        gpu::bench::preset_counted_bytes(shape)
    } else {
        compare::cases::all()
            .into_iter()
            .find(|c| re.is_match(&c.name()))
            .map(|c| c.bytes())
    };
    let dir = tempfile_dir()?;
    let csv = match &args.from_csv {
        Some(p) => p.clone(),
        None => {
            let ncu = find_ncu(&args.ncu)?;
            let exe = std::env::current_exe().context("cannot locate the duet executable")?;
            let metrics = args
                .metrics
                .clone()
                .unwrap_or_else(|| DEFAULT_METRICS.join(","));
            let mut cmd = std::process::Command::new(&ncu);
            cmd.args([
                "--clock-control",
                "none",
                "--csv",
                "--page",
                "raw",
                "--metrics",
                &metrics,
            ]);
            let launches = args.launch_count.unwrap_or(if engine { 4000 } else { 20 });
            cmd.args(["--launch-count", &launches.to_string()]);
            // A preset also launches helper kernels (amax, the copy ceiling, the reference
            // version): without --kernel, profile the op's own kernels only.
            let kernel = args
                .kernel
                .clone()
                .or_else(|| args.shape.as_deref().and_then(default_kernel_regex));
            if let Some(k) = &kernel {
                eprintln!("profiling kernels matching regex:{k}");
                cmd.args(["--kernel-name", &format!("regex:{k}")]);
            }
            let rep = dir.join("engine-step");
            if engine {
                // Only the step inside duet e2e's profiler range; graph nodes one by one. The
                // report goes to a file (e2e prints to stdout too), read back as CSV below.
                cmd.args(["--profile-from-start", "off", "--graph-profiling", "node"]);
                cmd.args(["--force-overwrite", "-o"]).arg(&rep);
                cmd.arg(&exe).arg("e2e");
                cmd.args(
                    args.e2e
                        .as_deref()
                        .unwrap_or(ENGINE_STEP_E2E)
                        .split_whitespace(),
                );
                cmd.env(super::e2e::PROFILE_ENGINE_STEP_ENV, "1");
            } else {
                cmd.arg(&exe).arg("bench");
                match &args.shape {
                    Some(shape) => cmd.args(["--shape", shape]),
                    None => cmd.arg(&args.op),
                };
                cmd.args([
                    "--backend",
                    "gpu",
                    "--reps",
                    "1",
                    "--max-seconds",
                    "0",
                    "--no-resources",
                ]);
                cmd.arg("--out").arg(dir.join("bench.json"));
            }
            let mut out = cmd
                .output()
                .with_context(|| format!("cannot run {}", ncu.display()))?;
            if engine && out.status.success() {
                let mut rep_file = rep.clone().into_os_string();
                rep_file.push(".ncu-rep");
                out = std::process::Command::new(&ncu)
                    .arg("--import")
                    .arg(&rep_file)
                    .args(["--csv", "--page", "raw"])
                    .output()
                    .with_context(|| format!("cannot run {} --import", ncu.display()))?;
            }
            let p = dir.join("ncu.csv");
            std::fs::write(&p, &out.stdout)?;
            if !out.status.success() {
                bail!(
                    "ncu exited with {}: {}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr)
                        .lines()
                        .rev()
                        .take(8)
                        .collect::<Vec<_>>()
                        .join("\n")
                );
            }
            p
        }
    };
    let mut sink = Collect::default();
    traces::read_trace(&csv, &mut sink, traces::ReadOptions::default())?;
    let kre = match &args.kernel {
        Some(k) => Some(
            regex::Regex::new(k)
                .map_err(|e| anyhow::anyhow!("--kernel '{k}' is not a valid regex: {e}"))?,
        ),
        None => None,
    };
    let kernels: Vec<&NcuKernel> = sink
        .0
        .iter()
        .filter(|k| kre.as_ref().is_none_or(|r| r.is_match(&k.name)))
        .collect();
    if kernels.is_empty() {
        bail!(
            "no profiled kernel in {} matches; check --kernel and that the op has a GPU kernel",
            csv.display()
        );
    }
    let mut rows = vec![];
    for k in &kernels {
        let dur = metric(k, &["gpu__time_duration.sum", "Duration"]);
        let rd = metric(k, &["dram__bytes_read.sum", "DRAM Bytes Read"]);
        let wr = metric(k, &["dram__bytes_write.sum", "DRAM Bytes Write"]);
        let row = serde_json::json!({
            "kernel": k.name,
            "duration_ns": dur,
            "dram_read_bytes": rd,
            "dram_write_bytes": wr,
            "memory_throughput_pct": metric(k, &["gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed", "Memory Throughput"]),
            "sm_throughput_pct": metric(k, &["sm__throughput.avg.pct_of_peak_sustained_elapsed", "Compute (SM) Throughput"]),
            "occupancy_pct": metric(k, &["sm__warps_active.avg.pct_of_peak_sustained_active", "Achieved Occupancy"]),
            "registers": metric(k, &["launch__registers_per_thread", "Registers Per Thread"]),
            "smem_bank_conflicts": metric(k, &["l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum"]),
            "issue_active_pct": metric(k, &["smsp__issue_active.avg.pct_of_peak_sustained_active"]),
            "sm_active_cycles": sm_cycles(k).map(|(mn, avg, mx, _)| serde_json::json!({"min": mn, "avg": avg, "max": mx})),
            "sm_elapsed_cycles": sm_cycles(k).map(|c| c.3),
            // max / avg active cycles over the SMs: > STRAGGLER_RATIO means a few SMs set the
            // kernel's time (a slow path, tail work), not a throughput limit.
            "sm_straggler_ratio": sm_cycles(k).filter(|c| c.1 > 0.0).map(|(_, avg, mx, _)| mx / avg),
            "counted_bytes": counted,
        });
        rows.push(row);
    }
    let group = args.by_kernel || engine;
    let groups = by_kernel(
        &kernels
            .iter()
            .map(|k| {
                (
                    k.name.clone(),
                    metric(k, &["gpu__time_duration.sum", "Duration"]),
                )
            })
            .collect::<Vec<_>>(),
    );
    let total_ns: f64 = groups.iter().map(|g| g.2).sum();
    if args.json {
        if group {
            let g: Vec<serde_json::Value> = groups
                .iter()
                .map(|(n, c, t)| {
                    serde_json::json!({"kernel": n, "calls": c, "total_us": t / 1e3,
                        "share": if total_ns > 0.0 { t / total_ns } else { 0.0 }})
                })
                .collect();
            println!(
                "{}",
                serde_json::to_string_pretty(&serde_json::json!({
                    "kernels": rows, "by_kernel": g, "total_us": total_ns / 1e3,
                }))?
            );
        } else {
            println!("{}", serde_json::to_string_pretty(&rows)?);
        }
        return Ok(0);
    }
    let f = |v: &serde_json::Value, scale: f64, prec: usize| {
        v.as_f64()
            .map_or("-".to_string(), |x| format!("{:.*}", prec, x / scale))
    };
    println!(
        "{:<50} {:>10} {:>11} {:>11} {:>7} {:>7} {:>7} {:>5} {:>9}",
        "kernel",
        "dur us",
        "DRAM rd MB",
        "DRAM wr MB",
        "mem %",
        "SM %",
        "occ %",
        "regs",
        "bank cfl"
    );
    for r in &rows {
        let name = r["kernel"].as_str().unwrap_or("?");
        let short: String = name.chars().take(50).collect();
        println!(
            "{:<50} {:>10} {:>11} {:>11} {:>7} {:>7} {:>7} {:>5} {:>9}",
            short,
            f(&r["duration_ns"], 1e3, 2),
            f(&r["dram_read_bytes"], 1e6, 2),
            f(&r["dram_write_bytes"], 1e6, 2),
            f(&r["memory_throughput_pct"], 1.0, 1),
            f(&r["sm_throughput_pct"], 1.0, 1),
            f(&r["occupancy_pct"], 1.0, 1),
            f(&r["registers"], 1.0, 0),
            f(&r["smem_bank_conflicts"], 1.0, 0),
        );
        if let (Some(c), Some(ratio)) = (
            r["sm_active_cycles"].as_object(),
            r["sm_straggler_ratio"].as_f64(),
        ) {
            let g = |n: &str| c.get(n).and_then(|v| v.as_f64()).unwrap_or(f64::NAN) / 1e3;
            let el = r["sm_elapsed_cycles"].as_f64().unwrap_or(f64::NAN) / 1e3;
            println!(
                "    SM active cycles min / avg / max {:.1}k / {:.1}k / {:.1}k of {el:.1}k elapsed{}",
                g("min"),
                g("avg"),
                g("max"),
                if ratio > STRAGGLER_RATIO {
                    format!(
                        ": STRAGGLER, one SM active {ratio:.2}x the average (a slow path or tail \
                         work on a few SMs sets the time, not a throughput limit)"
                    )
                } else {
                    String::new()
                }
            );
        }
        if let (Some(c), Some(rd), Some(wr)) = (
            counted,
            r["dram_read_bytes"].as_f64(),
            r["dram_write_bytes"].as_f64(),
        ) {
            println!(
                "    DRAM read+write {:.2} MB of {:.2} MB counted",
                (rd + wr) / 1e6,
                c as f64 / 1e6
            );
        }
    }
    if group {
        println!(
            "\nper kernel name: {} kernels, {:.1} us in all (durations summed: kernels one at a time)",
            kernels.len(),
            total_ns / 1e3
        );
        println!(
            "{:<60} {:>6} {:>11} {:>7}",
            "kernel", "calls", "total us", "share"
        );
        for (n, c, t) in &groups {
            let short: String = n.chars().take(60).collect();
            println!(
                "{short:<60} {c:>6} {:>11.2} {:>6.1}%",
                t / 1e3,
                if total_ns > 0.0 {
                    100.0 * t / total_ns
                } else {
                    0.0
                }
            );
        }
    }
    Ok(0)
}

fn tempfile_dir() -> anyhow::Result<PathBuf> {
    let d = std::env::temp_dir().join(format!("duet-profile-{}", std::process::id()));
    std::fs::create_dir_all(&d).with_context(|| format!("cannot create {}", d.display()))?;
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::default_kernel_regex;

    #[test]
    fn presets_with_one_shape_count_their_bytes() {
        // 8192 x 8192 bf16 in, codes and linear scales out; 512 f32 logits per token + bias,
        // 22 (i32, f32) picks per token.
        assert_eq!(
            gpu::bench::preset_counted_bytes("nvfp4_8192"),
            Some(134_217_728 + 33_554_432 + 4_194_304)
        );
        assert_eq!(
            gpu::bench::preset_counted_bytes("router_t4096"),
            Some(4096 * 2048 + 2048 + 4096 * 176)
        );
        assert_eq!(
            gpu::bench::preset_counted_bytes("router_t1_f32sig"),
            Some(2048 + 2048 + 176)
        );
        assert_eq!(gpu::bench::preset_counted_bytes("ssu_b256_bf16"), None);
        assert_eq!(gpu::bench::preset_counted_bytes("router_tx"), None);
    }

    #[test]
    fn presets_profile_their_own_kernels_not_the_helpers() {
        let re = |s: &str| regex::Regex::new(&default_kernel_regex(s).expect(s)).expect("regex");
        let ssu = re("ssu_b256_bf16");
        assert!(ssu.is_match("ssu_v3_bf16") && ssu.is_match("ssu_x_bf16_r4_e1_s0"));
        assert!(!ssu.is_match("ssu_v1") && !ssu.is_match("copy_v1"));
        let nv = re("nvfp4_8192");
        assert!(nv.is_match("nvfp4_quantize_v4") && !nv.is_match("nvfp4_amax"));
        assert!(re("router_t4096").is_match("router_v2") && !re("router_t1").is_match("copy_v1"));
        assert_eq!(default_kernel_regex("copy"), None);
    }
}
