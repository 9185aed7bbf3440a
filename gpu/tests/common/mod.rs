//! Shared body of the GPU differential tests: reference vs one GPU kernel version, outputs
//! poisoned with two different byte patterns (results must agree bit for bit, so an element
//! the kernel never wrote cannot pass by matching the poison), guard regions checked on every
//! download, and the compare layer's mismatch report on failure.
#![allow(dead_code)]

use compare::check::{compare_maps, render_table};
use compare::Tolerance;
use gpu::ops::{self, RunOpts};
use reference::TensorMap;

pub fn gpu() -> std::sync::Arc<gpu::runtime::Gpu> {
    match gpu::runtime::gpu() {
        Ok(g) => g,
        Err(e) => panic!("GPU test run without a usable GPU: {e}"),
    }
}

/// Runs `op`/`version` on `inputs` with `sets`, compares every output with the reference under
/// `tol`; returns the rendered table on failure.
pub fn diff(
    op: &str,
    version: &str,
    name: &str,
    inputs: &TensorMap,
    sets: &[(String, String)],
    tol: &dyn Fn(&str, &reference::Tensor) -> Tolerance,
) -> Result<(), String> {
    let g = gpu();
    let def = reference::ops::find(op).map_err(|e| e.to_string())?;
    let want = def
        .call(inputs, sets)
        .map_err(|e| format!("{name}: reference failed: {e}"))?;
    let o = ops::find(op).map_err(|e| e.to_string())?;
    let mut runs = vec![];
    for poison in [0xFFu8, 0x00, 0x5A] {
        // Unlisted: the SSU sweep variants are accepted by the op but not listed as versions.
        let got = ops::run_unlisted_version(&g, &o, version, inputs, sets, &RunOpts { poison })
            .map_err(|e| format!("{name} gpu:{op}:{version} (poison {poison:#04x}): {e}"))?;
        runs.push(got);
    }
    for (i, r) in runs.iter().enumerate().skip(1) {
        for (k, t) in r {
            // Bitwise (NaN != NaN under PartialEq).
            if runs[0].get(k).map(|a| a.to_le_bytes()) != Some(t.to_le_bytes()) {
                return Err(format!(
                    "{name} gpu:{op}:{version}: output '{k}' differs between poison patterns 0xFF and run {i}: some elements are not written"
                ));
            }
        }
    }
    let imp = format!("gpu:{op}:{version}");
    let rows = compare_maps(name, &imp, &want, &runs[0], |o, t| tol(o, t), None);
    if rows.iter().all(|r| r.passed) && !rows.is_empty() {
        Ok(())
    } else {
        Err(render_table(&rows))
    }
}

pub fn sets(pairs: &[(&str, String)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

pub fn exact(_: &str, _: &reference::Tensor) -> Tolerance {
    Tolerance::Exact
}
