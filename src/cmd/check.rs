//! `duet check [--op REGEX] [--json] [--backend cpu|gpu]`: every case through every
//! implementation available, plus the checked-in goldens; a table (or JSON) and exit 1 on a
//! failure.

use compare::check::{check_case, check_golden_with, render_table, Backend, Row};
use regex::Regex;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// Only cases whose name (`op/vars`) matches this regex.
    #[arg(long)]
    op: Option<String>,
    #[arg(long)]
    json: bool,
    /// `cpu`: reference modes against each other and the goldens; `gpu`: also every GPU
    /// kernel version.
    #[arg(long, default_value = "cpu", value_parser = ["cpu", "gpu"])]
    backend: String,
    /// Also run the GPU fused SSD's numerics twin with these tensor-core operand forms
    /// (repeatable): `kernel` (bf16 hi + lo splits, as v2-v8 ship), `v5m`, `exact`, or
    /// `m=F,s=F,xw=F` with F one of f32, bf16, bf16x2, f16, f16x2 (unnamed products as
    /// `kernel`), plus `scale=pow2` for power-of-two scales on the f16 operands (per row of M,
    /// S and (x w)^T, per chunk tile of x, C and B). E.g. `duet check --op
    /// ssd_chunk_scan/what=bf16 --twin kernel --twin m=f16,s=f16,xw=f16x2,scale=pow2`.
    #[arg(long = "twin", value_name = "SPEC")]
    twins: Vec<String>,
    /// Seed for the case inputs.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Folder of golden files (default: the repo's fixtures/goldens when present).
    #[arg(long)]
    goldens: Option<PathBuf>,
}

/// The op names of the case-table rows whose name (`op/vars`) the regex matches (all without one).
pub fn ops_of_matching_cases(
    cases: &[Box<dyn compare::case::Case>],
    re: Option<&Regex>,
) -> std::collections::BTreeSet<&'static str> {
    cases
        .iter()
        .filter(|c| re.is_none_or(|r| r.is_match(&c.name())))
        .map(|c| c.op())
        .collect()
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let re = match &args.op {
        Some(r) => Some(
            Regex::new(r).map_err(|e| anyhow::anyhow!("--op '{r}' is not a valid regex: {e}"))?,
        ),
        None => None,
    };
    // GPU versions of the ops whose name matches --op, and of the ops of every case the regex
    // selects: `--op 'ssd_chunk_scan/what=odd,'` names cases, not an op, and must still run the
    // op's kernels (before session 4 it matched no op name, and the GPU rows were silently
    // left out).
    let cases = compare::cases::all();
    let gpu_backends: Vec<Box<dyn Backend>> = if args.backend == "gpu" {
        let case_ops = ops_of_matching_cases(&cases, re.as_ref());
        gpu::backends_where(|op| {
            case_ops.contains(op)
                || args
                    .op
                    .as_deref()
                    .is_none_or(|f| gpu::backend::name_matches(f, op))
        })?
    } else {
        vec![]
    };
    let oracles = compare::check::oracles();
    let twins = args
        .twins
        .iter()
        .map(|t| {
            reference::ops::ssd_twin::Precision::parse(t)
                .map(|prec| compare::check::TwinBackend { prec })
                .map_err(|e| anyhow::anyhow!("--twin {t:?}: {e}"))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    if let Some(t) = twins.first() {
        let selected = cases
            .iter()
            .filter(|c| re.as_ref().is_none_or(|r| r.is_match(&c.name())))
            .filter(|c| t.supports(c.as_ref()))
            .count();
        if selected == 0 {
            anyhow::bail!(
                "--twin scores ssd_chunk_scan's bf16 rows (the fused kernels' inputs), and --op {:?} \
                 selects none of them; use e.g. --op ssd_chunk_scan/what=bf16",
                args.op.as_deref().unwrap_or("")
            );
        }
    }
    let mut backends: Vec<&dyn Backend> = gpu_backends.iter().map(|b| b.as_ref()).collect();
    backends.extend(oracles.iter().map(|o| o as &dyn Backend));
    backends.extend(twins.iter().map(|t| t as &dyn Backend));
    let mut rows: Vec<Row> = vec![];
    for case in cases {
        if re.as_ref().is_some_and(|r| !r.is_match(&case.name())) {
            continue;
        }
        rows.extend(check_case(case.as_ref(), args.seed, &backends));
    }
    let dir = args
        .goldens
        .clone()
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/goldens"));
    if dir.is_dir() {
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "safetensors"))
            .collect();
        files.sort();
        for f in files {
            let name = f
                .file_name()
                .map(|s| s.to_string_lossy().to_string())
                .unwrap_or_default();
            if re.as_ref().is_some_and(|r| !r.is_match(&name)) {
                continue;
            }
            // Goldens run through the reference and, with --backend gpu, every GPU kernel
            // version of their op (held to the file's tolerances).
            let gpu_refs: Vec<&dyn Backend> = gpu_backends.iter().map(|b| b.as_ref()).collect();
            rows.extend(check_golden_with(&f, &gpu_refs));
        }
    } else if args.goldens.is_some() {
        anyhow::bail!("--goldens {}: not a folder", dir.display());
    }
    if rows.is_empty() {
        anyhow::bail!(
            "no case matches --op {}; `duet ops` lists the op names",
            args.op.as_deref().unwrap_or("")
        );
    }
    // --backend gpu that ran no GPU kernel is not a pass: a sanitizer run over it would report
    // "0 errors" about nothing (session 4 found exactly that).
    if args.backend == "gpu" && !rows.iter().any(|r| r.implementation.starts_with("gpu:")) {
        anyhow::bail!(
            "--backend gpu: no GPU kernel ran for the cases matching --op {} (their ops have no GPU \
             kernel, or none applies to these shapes); `duet ops` shows which ops have GPU kernels",
            args.op.as_deref().unwrap_or(".")
        );
    }
    let failed = rows.iter().filter(|r| !r.passed).count();
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "rows": rows, "failed": failed, "total": rows.len()
            }))?
        );
    } else {
        print!("{}", render_table(&rows));
        println!(
            "{} of {} comparisons passed",
            rows.len() - failed,
            rows.len()
        );
    }
    Ok(if failed == 0 { 0 } else { 1 })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_case_regex_selects_its_ops_gpu_kernels() {
        let re = Regex::new("ssd_chunk_scan/what=(odd|odd_all),").expect("regex");
        let ops = ops_of_matching_cases(&compare::cases::all(), Some(&re));
        assert_eq!(ops.into_iter().collect::<Vec<_>>(), vec!["ssd_chunk_scan"]);
        let re = Regex::new("router").expect("regex");
        assert!(
            ops_of_matching_cases(&compare::cases::all(), Some(&re)).contains("noaux_tc_router")
        );
        let re = Regex::new("^no_such_op/").expect("regex");
        assert!(ops_of_matching_cases(&compare::cases::all(), Some(&re)).is_empty());
    }
}
