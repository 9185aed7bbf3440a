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

/// Every version of `op` that applies to these inputs, or (DUET_MAMBA_TEST_VERSIONS=a,b: a
/// device call's way to leave out a version that hangs or fails) only those named there.
pub fn versions_for(
    op: &str,
    inputs: &TensorMap,
    params: &[(String, String)],
) -> Vec<&'static str> {
    let mut v = applicable_versions(op, inputs, params);
    if let Some(keep) = kept_versions(op) {
        v.retain(|x| keep.iter().any(|k| k == x));
    }
    v
}

/// DUET_MAMBA_TEST_VERSIONS's names, if set; a name that is no version of `op` or of any other
/// Mamba op is an error (a misspelt filter would leave nothing to test and every test passing).
pub fn kept_versions(op: &str) -> Option<Vec<String>> {
    let keep = std::env::var("DUET_MAMBA_TEST_VERSIONS").ok()?;
    let keep: Vec<String> = keep.split(',').map(|s| s.trim().to_string()).collect();
    let mut known: Vec<&str> = vec![];
    for o in [
        op,
        "ssd_chunk_scan",
        "causal_conv1d_fn",
        "causal_conv1d_update",
        "selective_state_update",
    ] {
        if let Ok(g) = ops::find(o) {
            known.extend(g.versions.iter().copied());
        }
    }
    let unknown: Vec<&String> = keep
        .iter()
        .filter(|k| !known.contains(&k.as_str()))
        .collect();
    assert!(
        unknown.is_empty(),
        "DUET_MAMBA_TEST_VERSIONS names {unknown:?}, no versions of the Mamba ops ({known:?})"
    );
    Some(keep)
}

/// Every version of `op` that applies to these inputs (DUET_MAMBA_TEST_VERSIONS ignored).
pub fn applicable_versions(
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
