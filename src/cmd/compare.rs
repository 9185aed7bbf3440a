//! `duet compare A B [--atol X --rtol Y | --nmse X | --exact] [--json]`: diff two tensor files
//! tensor by tensor (A is the reference). Exit 1 when any tensor fails or is missing.

use compare::Tolerance;
use reference::io;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// Reference file.
    a: PathBuf,
    /// File to check.
    b: PathBuf,
    #[arg(long, conflicts_with_all = ["nmse", "exact"])]
    atol: Option<f64>,
    #[arg(long, conflicts_with_all = ["nmse", "exact"])]
    rtol: Option<f64>,
    /// Pass when sum (a-b)^2 / sum a^2 <= X.
    #[arg(long, conflicts_with = "exact")]
    nmse: Option<f64>,
    /// Bit-identical.
    #[arg(long)]
    exact: bool,
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    for (flag, v) in [("--atol", args.atol), ("--rtol", args.rtol), ("--nmse", args.nmse)] {
        if let Some(x) = v.filter(|x| !(x.is_finite() && *x >= 0.0)) {
            anyhow::bail!("{flag} {x}: a tolerance must be a finite number >= 0");
        }
    }
    let a = io::load(&args.a)?;
    let mut b = io::load(&args.b)?;
    // Two single-tensor files (e.g. ref.npy vs mine.npy, named after their stems): compare
    // the two tensors whatever their names.
    if a.len() == 1 && b.len() == 1 && a.keys().ne(b.keys()) {
        if let (Some(name), Some((_, t))) = (a.keys().next(), b.pop_first()) {
            b.insert(name.clone(), t);
        }
    }
    let mut reports = vec![];
    let mut missing = vec![];
    for (name, ta) in &a {
        let Some(tb) = b.get(name) else {
            missing.push(format!(
                "'{name}' is in {} but not in {}",
                args.a.display(),
                args.b.display()
            ));
            continue;
        };
        let tol = if args.exact {
            Tolerance::Exact
        } else if let Some(m) = args.nmse {
            Tolerance::Nmse { max: m }
        } else if args.atol.is_some() || args.rtol.is_some() {
            Tolerance::Close {
                atol: args.atol.unwrap_or(0.0),
                rtol: args.rtol.unwrap_or(0.0),
            }
        } else {
            Tolerance::for_dtype(ta.dtype())
        };
        reports.push(compare::compare(name, ta, tb, tol));
    }
    for name in b.keys().filter(|k| !a.contains_key(*k)) {
        missing.push(format!(
            "'{name}' is in {} but not in {}",
            args.b.display(),
            args.a.display()
        ));
    }
    let ok = missing.is_empty() && reports.iter().all(|r| r.passed);
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "passed": ok, "tensors": reports, "missing": missing
            }))?
        );
    } else {
        for r in &reports {
            println!("{}", r.render());
        }
        for m in &missing {
            println!("missing: {m}");
        }
        println!("{}", if ok { "all tensors match" } else { "MISMATCH" });
    }
    Ok(if ok { 0 } else { 1 })
}
