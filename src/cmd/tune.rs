//! `duet tune OP --shape PRESET|b,l,h,p,g,n,q`: the autotune harness (gpu::tune): sweep the
//! kernel's tile configs, drop those failing the reference tolerance on the case table, rank
//! by median time, print the Pareto front and persist the winner in the tuning cache (read by
//! the `tuned` kernel version). Tunable today: `ssd_chunk_scan`.

use anyhow::bail;

#[derive(clap::Args)]
pub struct Args {
    /// Op to tune.
    op: String,
    /// `super_4k` (batch 1, 4096 tokens, Super heads 128 x 64, dstate 128, 8 groups, chunk 128),
    /// `super_50k`, or `batch,seqlen,nheads,headdim,ngroups,dstate,chunk`.
    #[arg(long, default_value = "super_4k")]
    shape: String,
    #[arg(long)]
    json: bool,
}

fn parse_shape(s: &str) -> anyhow::Result<[usize; 7]> {
    Ok(match s {
        "super_4k" => [1, 4096, 128, 64, 8, 128, 128],
        "super_50k" => [1, 50000, 128, 64, 8, 128, 128],
        _ => {
            let v: Vec<usize> = s
                .split(',')
                .map(|x| x.trim().parse::<usize>())
                .collect::<Result<_, _>>()
                .map_err(|_| anyhow::anyhow!("--shape '{s}': expected super_4k, super_50k or 7 comma-separated sizes batch,seqlen,nheads,headdim,ngroups,dstate,chunk"))?;
            let Ok(a) = <[usize; 7]>::try_from(v) else {
                bail!("--shape '{s}': expected 7 comma-separated sizes batch,seqlen,nheads,headdim,ngroups,dstate,chunk");
            };
            if a.contains(&0) || a[2] % a[4] != 0 {
                bail!("--shape '{s}': sizes must be >= 1 and ngroups must divide nheads");
            }
            a
        }
    })
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    if args.op != "ssd_chunk_scan" {
        bail!(
            "'{}' has no tunable parameters yet; tunable ops: ssd_chunk_scan",
            args.op
        );
    }
    let [b, l, h, p, g, n, q] = parse_shape(&args.shape)?;
    let gpu = gpu::runtime::gpu()?;
    let r = gpu::ops::ssd_chunk_scan::tune(&gpu, b, l, h, p, g, n, q)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
        return Ok(0);
    }
    println!(
        "tuning {} at {} on {} ({}), {} accuracy cases",
        args.op, r["shape_key"], r["device"], r["arch"], r["accuracy_cases"]
    );
    let mut trials = r["trials"].as_array().cloned().unwrap_or_default();
    trials.sort_by(|a, b| {
        a["median_us"]
            .as_f64()
            .unwrap_or(f64::MAX)
            .total_cmp(&b["median_us"].as_f64().unwrap_or(f64::MAX))
    });
    println!(
        "{:<70} {:>12} {:>10}  {}",
        "config", "median us", "worst%tol", "accuracy"
    );
    for t in &trials {
        println!(
            "{:<70} {:>12.1} {:>10.1}  {}",
            t["config"].to_string(),
            t["median_us"].as_f64().unwrap_or(f64::NAN),
            t["worst_pct_of_tol"].as_f64().unwrap_or(f64::INFINITY),
            if t["passed"].as_bool() == Some(true) {
                "ok".to_string()
            } else {
                format!("DROPPED ({})", t["note"].as_str().unwrap_or("fails"))
            }
        );
    }
    println!("pareto front (time vs accuracy):");
    for t in r["pareto"].as_array().cloned().unwrap_or_default() {
        println!(
            "  {} {:.1} us, {:.1}% of tolerance",
            t["config"],
            t["median_us"].as_f64().unwrap_or(f64::NAN),
            t["worst_pct_of_tol"].as_f64().unwrap_or(f64::NAN)
        );
    }
    match (
        r["winner"]["median_us"].as_f64(),
        r["default_median_us"].as_f64(),
    ) {
        (Some(w), Some(d)) => println!(
            "winner {} at {:.1} us vs default {:.1} us ({:+.1}%); stored in {}",
            r["winner"]["config"],
            w,
            d,
            100.0 * (w - d) / d,
            r["tuning_cache"].as_str().unwrap_or("?")
        ),
        _ => println!("no configuration passed the accuracy filter; nothing stored"),
    }
    Ok(if r["winner"].is_null() { 1 } else { 0 })
}
