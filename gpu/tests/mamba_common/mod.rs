//! Shared helpers of the Mamba GPU differential tests (gpu/tests/mamba_*.rs): run one op on a
//! GPU kernel version with poisoned (NaN-filled) outputs and guarded buffers, run the CPU
//! reference, and compare every output, returning the mismatch report on failure.

#![allow(dead_code)]

use compare::{Backend, Tolerance};
use gpu::ops::{self, RunOpts};
use reference::{DType, TensorMap};

pub fn sets(params: &[(&str, &str)]) -> Vec<(String, String)> {
    params
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Runs `op` on GPU kernel `version` and on the reference; compares every reference output.
/// `tol` gives the tolerance per output name and reference dtype.
pub fn check_op(
    what: &str,
    op: &str,
    version: &str,
    inputs: &TensorMap,
    params: &[(String, String)],
    tol: &dyn Fn(&str, DType) -> Tolerance,
) -> Result<(), String> {
    let def = reference::ops::find(op).map_err(|e| format!("{what}: {e}"))?;
    let want = def
        .call(inputs, params)
        .map_err(|e| format!("{what}: reference failed: {e}"))?;
    let g = gpu::runtime::gpu().map_err(|e| format!("{what}: {e}"))?;
    let gop = ops::find(op).map_err(|e| format!("{what}: {e}"))?;
    let got = ops::run_version(&g, &gop, version, inputs, params, &RunOpts::default())
        .map_err(|e| format!("{what} [gpu:{op}:{version}]: {e}"))?;
    let mut errs = vec![];
    for (name, r) in &want {
        match got.get(name) {
            None => errs.push(format!("output '{name}' missing")),
            Some(t) => {
                let rep = compare::compare(name, r, t, tol(name, r.dtype()));
                if !rep.passed {
                    errs.push(rep.render());
                }
            }
        }
    }
    if errs.is_empty() {
        Ok(())
    } else {
        Err(format!("{what} [gpu:{op}:{version}]:\n{}", errs.join("\n")))
    }
}

/// Every version of `op` that applies to these inputs.
pub fn versions_for(
    op: &str,
    inputs: &TensorMap,
    params: &[(String, String)],
) -> Vec<&'static str> {
    let Ok(gop) = ops::find(op) else {
        return vec![];
    };
    let Ok(def) = reference::ops::find(op) else {
        return vec![];
    };
    let Ok(p) = reference::op::Params::resolve(&def, params) else {
        return gop.versions.to_vec();
    };
    gop.versions
        .iter()
        .copied()
        .filter(|v| (gop.applicable)(v, inputs, &p).is_none())
        .collect()
}

/// Runs `check_op` on every applicable version; panics with every failure.
pub fn check_all_versions(
    what: &str,
    op: &str,
    inputs: &TensorMap,
    params: &[(String, String)],
    tol: &dyn Fn(&str, DType) -> Tolerance,
) -> usize {
    let vs = versions_for(op, inputs, params);
    let mut errs = vec![];
    for v in &vs {
        if let Err(e) = check_op(what, op, v, inputs, params, tol) {
            errs.push(e);
        }
    }
    assert!(errs.is_empty(), "{}", errs.join("\n\n"));
    vs.len()
}

/// The case table (compare::cases::all()) filtered by op, through every GPU kernel version
/// (backends poison outputs and check guards). Returns (cases, rows compared).
pub fn table_cases(op: &str) -> (usize, usize) {
    let cases: Vec<_> = compare::cases::all()
        .into_iter()
        .filter(|c| c.op() == op)
        .collect();
    let backends = gpu::backends(Some(&format!("^{op}$"))).expect("GPU backends");
    let refs: Vec<&dyn Backend> = backends.iter().map(|b| b.as_ref()).collect();
    let mut failures = vec![];
    let mut n = 0;
    for c in &cases {
        for row in compare::check::check_case(c.as_ref(), 1, &refs) {
            if !row.implementation.starts_with("gpu:") {
                continue;
            }
            n += 1;
            if !row.passed {
                let detail = match (&row.report, &row.error) {
                    (Some(r), _) => r.render(),
                    (None, Some(e)) => e.clone(),
                    _ => "failed".into(),
                };
                failures.push(format!(
                    "{} [{}] {}: {detail}",
                    row.case, row.implementation, row.output
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    eprintln!(
        "{op}: {} table cases, {n} GPU output rows compared",
        cases.len()
    );
    (cases.len(), n)
}

/// Default tolerance by dtype (the upstream tolerances, SPEC.md).
pub fn by_dtype(_name: &str, d: DType) -> Tolerance {
    Tolerance::for_dtype(d)
}
