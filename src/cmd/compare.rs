//! `duet compare A B [--atol X --rtol Y | --nmse X | --exact] [--json]`: diff two tensor files
//! tensor by tensor (A is the reference). Exit 1 when any tensor fails or is missing.

use compare::Tolerance;
use reference::{io, Tensor};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// Reference file (or NAME=FILE for a single-tensor file, e.g. out=expected.npy).
    a: PathBuf,
    /// File to check (or NAME=FILE).
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
    /// Compare `topk_indices` / `topk_weights` in row order instead of as sets (by default,
    /// when both files hold them, each row's indices are compared as a set and the weights
    /// after aligning B's row to A's expert order: torch.topk's order on ties is unspecified).
    #[arg(long)]
    ordered: bool,
    /// Compare only these tensors (repeatable); others in either file are ignored.
    #[arg(long = "only")]
    only: Vec<String>,
}

/// Reorders each row of B's (indices, weights) to follow A's index order where the sets match.
fn align_topk(ai: &Tensor, bi: &Tensor, bw: &Tensor) -> Option<(Tensor, Tensor)> {
    if ai.shape != bi.shape || bi.shape != bw.shape || ai.rank() != 2 {
        return None;
    }
    let (a, b) = (ai.to_i64_vec()?, bi.to_i64_vec()?);
    let w = bw.to_f32_vec();
    let k = ai.shape[1];
    let (mut ni, mut nw) = (b.clone(), w.clone());
    for r in 0..ai.shape[0] {
        let row = r * k..(r + 1) * k;
        let mut used = vec![false; k];
        let mut perm = vec![];
        for &want in &a[row.clone()] {
            match (0..k).find(|&j| !used[j] && b[r * k + j] == want) {
                Some(j) => {
                    used[j] = true;
                    perm.push(j);
                }
                None => break,
            }
        }
        if perm.len() == k {
            for (dst, &src) in perm.iter().enumerate() {
                ni[r * k + dst] = b[r * k + src];
                nw[r * k + dst] = w[r * k + src];
            }
        }
    }
    let idx = Tensor::from_i64(&bi.shape, ni);
    let idx = Tensor::from_f32_as(&bi.shape, &idx.to_f32_vec(), bi.dtype());
    Some((idx, Tensor::from_f32_as(&bw.shape, &nw, bw.dtype())))
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    for (flag, v) in [
        ("--atol", args.atol),
        ("--rtol", args.rtol),
        ("--nmse", args.nmse),
    ] {
        if let Some(x) = v.filter(|x| !(x.is_finite() && *x >= 0.0)) {
            anyhow::bail!("{flag} {x}: a tolerance must be a finite number >= 0");
        }
    }
    // `NAME=FILE` names the tensor of a single-tensor file (as `duet run --in` does).
    let load = |p: &PathBuf| -> anyhow::Result<reference::TensorMap> {
        if !p.exists() {
            if let Some(s) = p.to_str().filter(|s| s.contains('=')) {
                return super::run::load_inputs(&[s.to_string()]);
            }
        }
        Ok(io::load(p)?)
    };
    let mut a = load(&args.a)?;
    let mut b = load(&args.b)?;
    if !args.only.is_empty() {
        for n in &args.only {
            if !a.contains_key(n) && !b.contains_key(n) {
                anyhow::bail!(
                    "--only {n}: no tensor of that name in {} or {}",
                    args.a.display(),
                    args.b.display()
                );
            }
        }
        a.retain(|k, _| args.only.contains(k));
        b.retain(|k, _| args.only.contains(k));
    }
    // Two single-tensor files (e.g. ref.npy vs mine.npy, named after their stems): compare
    // the two tensors whatever their names.
    if a.len() == 1 && b.len() == 1 && a.keys().ne(b.keys()) {
        if let (Some(name), Some((_, t))) = (a.keys().next(), b.pop_first()) {
            b.insert(name.clone(), t);
        }
    }
    let mut set_compared = vec![];
    if !args.ordered {
        if let (Some(ai), Some(bi), Some(bw)) = (
            a.get("topk_indices"),
            b.get("topk_indices"),
            b.get("topk_weights"),
        ) {
            if let Some((ni, nw)) = align_topk(ai, bi, bw) {
                b.insert("topk_indices".into(), ni);
                b.insert("topk_weights".into(), nw);
                set_compared.push("topk_indices");
                eprintln!("note: topk_indices compared as per-row sets and topk_weights aligned to A's expert order (--ordered to disable)");
            }
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
        let tol = if set_compared.contains(&name.as_str()) {
            Tolerance::SameSet
        } else if args.exact {
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
