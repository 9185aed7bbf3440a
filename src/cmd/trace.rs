//! `duet trace`: summarise, diff and convert nsys / ncu / Kineto traces.

use anyhow::{bail, Context};
use std::path::PathBuf;
use traces::diff::{Class, Compare, DiffOptions};
use traces::summary::{GroupBy, SummaryOptions};
use traces::ReadOptions;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: TraceCommand,
}

#[derive(clap::Args, Clone)]
struct Grouping {
    /// Group kernels by: kernel (full canonical signature), template (template args folded),
    /// base (base function name), nvtx (NVTX ranges / annotations instead of kernels),
    /// nvtx-kernels (kernel time per innermost NVTX range open at launch; nsys SQLite).
    #[arg(long, default_value = "kernel", value_parser = parse_group)]
    group_by: GroupBy,
    /// Fold all GPUs into one row per kernel.
    #[arg(long)]
    merge_devices: bool,
    /// Rows to show in tables.
    #[arg(long, default_value_t = 30)]
    top: usize,
    /// Print JSON to stdout instead of the terminal table.
    #[arg(long)]
    json: bool,
    /// Also write a Markdown report here.
    #[arg(long, value_name = "FILE")]
    md: Option<PathBuf>,
    /// Also write a self-contained HTML report (with SVG plots) here.
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
    /// Also write the JSON report here.
    #[arg(long, value_name = "FILE")]
    json_out: Option<PathBuf>,
    /// Never draw a progress bar (it is only drawn when stderr is a terminal anyway).
    #[arg(long)]
    no_progress: bool,
}

#[derive(clap::Subcommand)]
enum TraceCommand {
    /// Per-kernel (and NVTX / memcpy / API) summary of one trace.
    Summary {
        /// nsys .sqlite[.gz], nsys stats CSV, ncu CSV, or Kineto .json[.gz]
        file: PathBuf,
        #[command(flatten)]
        g: Grouping,
    },
    /// Diff two traces kernel by kernel and flag regressions.
    Diff {
        /// Baseline trace.
        base: PathBuf,
        /// Candidate trace.
        cand: PathBuf,
        #[command(flatten)]
        g: Grouping,
        /// Minimum relative change (%) for regressed / improved.
        #[arg(long, default_value_t = 5.0)]
        threshold: f64,
        /// Minimum absolute impact in microseconds.
        #[arg(long, default_value_t = 10.0)]
        min_delta_us: f64,
        /// Significance level of the rank test on per-instance durations.
        #[arg(long, default_value_t = 0.05)]
        alpha: f64,
        /// Classify on per-instance mean (robust to different instance counts) or on total time.
        #[arg(long, default_value = "mean", value_parser = ["mean", "total"])]
        compare: String,
        /// Exit with code 1 if any row regressed by at least PCT percent.
        #[arg(long, value_name = "PCT")]
        fail_on_regression: Option<f64>,
        /// Show unchanged rows too.
        #[arg(long)]
        all: bool,
    },
    /// Convert a trace to another format.
    Convert {
        file: PathBuf,
        /// Target format.
        #[arg(long, value_parser = ["chrome"], default_value = "chrome")]
        to: String,
        /// Output file (default: FILE with .chrome.json appended).
        #[arg(short, long)]
        output: Option<PathBuf>,
        #[arg(long)]
        no_progress: bool,
    },
}

/// Print to stdout; a closed pipe (`| head`) is not an error.
fn emit(s: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(s.as_bytes()).and_then(|_| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(e).context("writing to stdout"),
    }
}

fn parse_group(s: &str) -> Result<GroupBy, String> {
    GroupBy::parse(s).ok_or_else(|| {
        format!("unknown grouping {s:?}; use kernel, template, base, nvtx or nvtx-kernels")
    })
}

fn write_reports(
    g: &Grouping,
    md: impl FnOnce() -> String,
    html: impl FnOnce() -> String,
    json: &str,
) -> anyhow::Result<()> {
    if let Some(p) = &g.md {
        traces::output::write_string(p, &md())?;
        eprintln!("wrote {}", p.display());
    }
    if let Some(p) = &g.html {
        traces::output::write_string(p, &html())?;
        eprintln!("wrote {}", p.display());
    }
    if let Some(p) = &g.json_out {
        traces::output::write_string(p, json)?;
        eprintln!("wrote {}", p.display());
    }
    Ok(())
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    match args.command {
        TraceCommand::Summary { file, g } => {
            let opts = SummaryOptions {
                group_by: g.group_by,
                merge_devices: g.merge_devices,
            };
            let s = traces::summarize(
                &file,
                opts,
                ReadOptions {
                    progress: !g.no_progress,
                    ..Default::default()
                },
            )?;
            let json = serde_json::to_string_pretty(&s).context("serialising the summary")?;
            if g.json {
                emit(&format!("{json}\n"))?;
            } else {
                emit(&traces::report::summary_text(&s, g.top))?;
            }
            write_reports(
                &g,
                || traces::report::summary_markdown(&s, g.top),
                || traces::report::summary_html(&s, g.top),
                &json,
            )?;
            Ok(0)
        }
        TraceCommand::Diff {
            base,
            cand,
            g,
            threshold,
            min_delta_us,
            alpha,
            compare,
            fail_on_regression,
            all,
        } => {
            let opts = SummaryOptions {
                group_by: g.group_by,
                merge_devices: g.merge_devices,
            };
            let ro = ReadOptions {
                progress: !g.no_progress,
                ..Default::default()
            };
            let sb = traces::summarize(&base, opts, ro).context("reading the baseline")?;
            let sc = traces::summarize(&cand, opts, ro).context("reading the candidate")?;
            let dopts = DiffOptions {
                threshold_pct: threshold,
                min_delta_ns: min_delta_us * 1e3,
                alpha,
                compare: if compare == "total" {
                    Compare::Total
                } else {
                    Compare::Mean
                },
            };
            if let Some(p) = fail_on_regression {
                if !(p >= 0.0) {
                    bail!("--fail-on-regression must be a percentage >= 0, got {p}");
                }
            }
            let d = traces::diff::diff(&sb, &sc, &dopts)?;
            let json = serde_json::to_string_pretty(&d).context("serialising the diff")?;
            if g.json {
                emit(&format!("{json}\n"))?;
            } else {
                emit(&traces::report::diff_text(&d, g.top, all))?;
            }
            write_reports(
                &g,
                || traces::report::diff_markdown(&d, g.top, all),
                || traces::report::diff_html(&d, g.top, all),
                &json,
            )?;
            if let Some(limit) = fail_on_regression {
                let bad: Vec<&traces::diff::DiffRow> = d
                    .rows
                    .iter()
                    .filter(|r| r.class == Class::Regressed && r.pct.unwrap_or(0.0) >= limit)
                    .collect();
                if !bad.is_empty() {
                    eprintln!(
                        "FAIL: {} row(s) regressed by >= {limit}%: {}",
                        bad.len(),
                        bad.iter()
                            .take(5)
                            .map(|r| format!("{} ({:+.1}%)", r.name, r.pct.unwrap_or(0.0)))
                            .collect::<Vec<_>>()
                            .join(", ")
                    );
                    return Ok(1);
                }
            }
            Ok(0)
        }
        TraceCommand::Convert {
            file,
            to: _,
            output,
            no_progress,
        } => {
            let out = output.unwrap_or_else(|| {
                let mut s = file.clone().into_os_string();
                s.push(".chrome.json");
                PathBuf::from(s)
            });
            let n = traces::chrome::convert(&file, &out, !no_progress)?;
            eprintln!(
                "wrote {} ({n} events); open it in https://ui.perfetto.dev",
                out.display()
            );
            Ok(0)
        }
    }
}
