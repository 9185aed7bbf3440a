//! Runs cases through implementations and compares every output with the reference.

use crate::case::Case;
use crate::tolerance::{compare, Report, Tolerance};
use reference::{io, ops, TensorMap};
use serde::Serialize;
use std::path::Path;

/// An implementation of some ops other than the default reference: a GPU kernel version, a
/// reference mode, a golden file.
pub trait Backend {
    /// e.g. `gpu:noaux_tc_router:v1`.
    fn name(&self) -> String;
    fn supports(&self, case: &dyn Case) -> bool;
    /// Runs the case's op on `inputs` with the case's params.
    fn run(&self, case: &dyn Case, inputs: &TensorMap) -> Result<TensorMap, String>;
}

/// One line of the `duet check` table.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    pub case: String,
    pub implementation: String,
    pub output: String,
    pub passed: bool,
    pub report: Option<Report>,
    pub error: Option<String>,
}

impl Row {
    fn error(case: &str, imp: &str, e: String) -> Row {
        Row {
            case: case.into(),
            implementation: imp.into(),
            output: "-".into(),
            passed: false,
            report: None,
            error: Some(e),
        }
    }
}

/// Compares every output of `reference` present in `got` (and flags outputs that are missing).
pub fn compare_maps(
    case: &str,
    imp: &str,
    reference: &TensorMap,
    got: &TensorMap,
    tol: impl Fn(&str, &reference::Tensor) -> Tolerance,
    only: Option<&[String]>,
) -> Vec<Row> {
    let mut rows = vec![];
    for (name, r) in reference {
        if let Some(o) = only {
            if !o.contains(name) {
                continue;
            }
        }
        match got.get(name) {
            None => rows.push(Row {
                case: case.into(),
                implementation: imp.into(),
                output: name.clone(),
                passed: false,
                report: None,
                error: Some(format!("output '{name}' was not produced")),
            }),
            Some(g) => {
                let rep = compare(name, r, g, tol(name, r));
                rows.push(Row {
                    case: case.into(),
                    implementation: imp.into(),
                    output: name.clone(),
                    passed: rep.passed,
                    report: Some(rep),
                    error: None,
                });
            }
        }
    }
    rows
}

/// Runs one case: the reference, its variants, then every backend that supports it.
pub fn check_case(case: &dyn Case, seed: u64, backends: &[&dyn Backend]) -> Vec<Row> {
    let name = case.name();
    let inputs = case.inputs(seed);
    let def = match ops::find(case.op()) {
        Ok(d) => d,
        Err(e) => return vec![Row::error(&name, "reference", e.to_string())],
    };
    let reference = match def.call(&inputs, &case.params()) {
        Ok(o) => o,
        Err(e) => return vec![Row::error(&name, "reference", e.to_string())],
    };
    let mut rows = vec![];
    for v in case.variants() {
        let mut params = case.params();
        for (k, val) in &v.params {
            params.retain(|(pk, _)| pk != k);
            params.push((k.clone(), val.clone()));
        }
        let imp = format!("reference[{}]", v.label);
        match def.call(&inputs, &params) {
            Err(e) => rows.push(Row::error(&name, &imp, e.to_string())),
            Ok(got) => {
                let outs: Vec<String> = v.outputs.iter().map(|(o, _)| o.clone()).collect();
                rows.extend(compare_maps(
                    &name,
                    &imp,
                    &reference,
                    &got,
                    |o, _| {
                        v.outputs
                            .iter()
                            .find(|(n, _)| n == o)
                            .map(|(_, t)| *t)
                            .unwrap_or(Tolerance::Exact)
                    },
                    Some(&outs),
                ));
            }
        }
    }
    for b in backends {
        if !b.supports(case) {
            continue;
        }
        match b.run(case, &inputs) {
            Err(e) => rows.push(Row::error(&name, &b.name(), e)),
            Ok(got) => rows.extend(compare_maps(
                &name,
                &b.name(),
                &reference,
                &got,
                |o, r| case.tolerance(o, r.dtype()),
                None,
            )),
        }
    }
    if rows.is_empty() {
        // Nothing else to compare against: the reference must be deterministic (a second run on
        // freshly generated inputs is bit-identical: catches order-dependent parallel sums and
        // unseeded inputs) and must not produce NaN from these finite inputs.
        let again = def.call(&case.inputs(seed), &case.params());
        match again {
            Err(e) => rows.push(Row::error(&name, "reference[rerun]", e.to_string())),
            Ok(got) => rows.extend(compare_maps(
                &name,
                "reference[rerun]",
                &reference,
                &got,
                |_, _| Tolerance::Exact,
                None,
            )),
        }
        let bad: Vec<&String> = reference
            .iter()
            .filter(|(_, t)| t.dtype().is_float() && t.to_f64_vec().iter().any(|x| x.is_nan()))
            .map(|(k, _)| k)
            .collect();
        if !bad.is_empty() {
            rows.push(Row::error(
                &name,
                "reference",
                format!("NaN in {bad:?} from finite inputs"),
            ));
        }
    }
    rows
}

/// Parses a tolerance spec: `exact`, `sameset`, `close:ATOL:RTOL`, `nmse:MAX`.
pub fn parse_tolerance(s: &str) -> Option<Tolerance> {
    let parts: Vec<&str> = s.split(':').collect();
    match parts.as_slice() {
        ["exact"] => Some(Tolerance::Exact),
        ["sameset"] | ["same_set"] => Some(Tolerance::SameSet),
        ["close", a, r] => Some(Tolerance::Close {
            atol: a.parse().ok()?,
            rtol: r.parse().ok()?,
        }),
        ["nmse", m] => Some(Tolerance::Nmse {
            max: m.parse().ok()?,
        }),
        _ => None,
    }
}

/// Checks one golden file: a safetensors whose metadata names the `op`, its `params`
/// (`k=v;k=v`) and per-output `tol.<output>` specs; tensors named like the op's inputs are
/// inputs, tensors named `expected.<output>` are the upstream outputs.
pub fn check_golden(path: &Path) -> Vec<Row> {
    check_golden_with(path, &[])
}

/// A golden file as a [`Case`], so other backends (the GPU kernels) run the same inputs and
/// params and are held to the file's tolerances.
struct GoldenCase {
    op: &'static str,
    file: String,
    params: Vec<(String, String)>,
    inputs: TensorMap,
    tols: std::collections::BTreeMap<String, Tolerance>,
}

impl Case for GoldenCase {
    fn op(&self) -> &'static str {
        self.op
    }
    fn vars(&self) -> String {
        format!("golden={}", self.file)
    }
    fn params(&self) -> Vec<(String, String)> {
        self.params.clone()
    }
    fn inputs(&self, _seed: u64) -> TensorMap {
        self.inputs.clone()
    }
    fn tolerance(&self, name: &str, dtype: reference::DType) -> Tolerance {
        self.tols
            .get(name)
            .copied()
            .unwrap_or_else(|| Tolerance::for_dtype(dtype))
    }
    fn bytes(&self) -> u64 {
        0
    }
    fn flops(&self) -> u64 {
        0
    }
}

/// [`check_golden`], plus every backend in `backends` that supports the golden's op and
/// inputs, compared with the golden's expected outputs at the file's tolerances.
pub fn check_golden_with(path: &Path, backends: &[&dyn Backend]) -> Vec<Row> {
    let case = path.display().to_string();
    let (tensors, meta) = match io::load_with_metadata(path) {
        Ok(x) => x,
        Err(e) => return vec![Row::error(&case, "golden", e.to_string())],
    };
    let Some(op) = meta.get("op") else {
        return vec![Row::error(
            &case,
            "golden",
            "metadata has no 'op' entry".into(),
        )];
    };
    let params: Vec<(String, String)> = meta
        .get("params")
        .map(|p| {
            p.split(';')
                .filter(|s| !s.is_empty())
                .filter_map(|kv| {
                    kv.split_once('=')
                        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
                })
                .collect()
        })
        .unwrap_or_default();
    let mut inputs = TensorMap::new();
    let mut expected = TensorMap::new();
    for (k, t) in tensors {
        match k.strip_prefix("expected.") {
            Some(o) => {
                expected.insert(o.to_string(), t);
            }
            None => {
                inputs.insert(k, t);
            }
        }
    }
    let imp = format!(
        "golden[{}]",
        meta.get("source").map(String::as_str).unwrap_or("upstream")
    );
    let tol_of = |o: &str, r: &reference::Tensor| {
        meta.get(&format!("tol.{o}"))
            .and_then(|s| parse_tolerance(s))
            .unwrap_or_else(|| Tolerance::for_dtype(r.dtype()))
    };
    let def = match ops::find(op) {
        Ok(d) => d,
        Err(e) => return vec![Row::error(&case, &imp, e.to_string())],
    };
    let got = match def.call(&inputs, &params) {
        Ok(g) => g,
        Err(e) => return vec![Row::error(&case, &imp, e.to_string())],
    };
    let mut rows = compare_maps(&case, &imp, &expected, &got, tol_of, None);
    if backends.is_empty() {
        return rows;
    }
    let gc = GoldenCase {
        op: def.name,
        file: path
            .file_name()
            .map(|f| f.to_string_lossy().to_string())
            .unwrap_or_default(),
        params,
        tols: expected
            .iter()
            .filter_map(|(o, r)| {
                meta.get(&format!("tol.{o}"))
                    .and_then(|s| parse_tolerance(s))
                    .or_else(|| Some(Tolerance::for_dtype(r.dtype())))
                    .map(|t| (o.clone(), t))
            })
            .collect(),
        inputs,
    };
    for b in backends {
        if !b.supports(&gc) {
            continue;
        }
        let imp = format!("{}[golden]", b.name());
        match b.run(&gc, &gc.inputs) {
            Ok(got) => rows.extend(compare_maps(&case, &imp, &expected, &got, tol_of, None)),
            Err(e) => rows.push(Row::error(&case, &imp, e)),
        }
    }
    rows
}

/// The table `duet check` prints.
pub fn render_table(rows: &[Row]) -> String {
    let w_case = rows
        .iter()
        .map(|r| r.case.len())
        .max()
        .unwrap_or(4)
        .clamp(4, 70);
    let w_imp = rows
        .iter()
        .map(|r| r.implementation.len())
        .max()
        .unwrap_or(4)
        .clamp(4, 40);
    let mut s = format!(
        "{:<w_case$}  {:<w_imp$}  {:<14} {:<6} {:>10}  {}\n",
        "case", "implementation", "output", "result", "worst%tol", "tolerance / note"
    );
    for r in rows {
        let (worst, tol) = match &r.report {
            Some(rep) => (
                format!("{:.1}", rep.worst_pct_of_tol),
                rep.tolerance.describe()
                    + &rep
                        .note
                        .as_ref()
                        .map(|n| format!(" ({n})"))
                        .unwrap_or_default(),
            ),
            None => ("-".into(), r.error.clone().unwrap_or_default()),
        };
        s.push_str(&format!(
            "{:<w_case$}  {:<w_imp$}  {:<14} {:<6} {:>10}  {}\n",
            r.case,
            r.implementation,
            r.output,
            if r.passed { "ok" } else { "FAIL" },
            worst,
            tol
        ));
        if !r.passed {
            if let Some(rep) = &r.report {
                for line in rep.render().lines().skip(1) {
                    s.push_str(&format!("    {line}\n"));
                }
            }
        }
    }
    s
}

/// Another reference op that computes the same outputs a different way (the sequential scan
/// for the chunked scan): a backend whose disagreement with the op is a bug in one of them.
pub struct OracleBackend {
    pub op: &'static str,
    pub oracle: &'static str,
    /// Params of `op` that `oracle` does not take.
    pub drop_params: &'static [&'static str],
}

impl Backend for OracleBackend {
    fn name(&self) -> String {
        format!("oracle:{}", self.oracle)
    }
    fn supports(&self, case: &dyn Case) -> bool {
        case.op() == self.op
    }
    fn run(&self, case: &dyn Case, inputs: &TensorMap) -> Result<TensorMap, String> {
        let params: Vec<(String, String)> = case
            .params()
            .into_iter()
            .filter(|(k, _)| !self.drop_params.contains(&k.as_str()))
            .collect();
        ops::find(self.oracle)
            .and_then(|d| d.call(inputs, &params))
            .map_err(|e| e.to_string())
    }
}

/// The GPU fused SSD's numerics twin (`reference::ops::ssd_twin`) with the tensor-core operand
/// forms `prec`: how a kernel that rounds its operands that way would score against the
/// reference, before it is written (`duet check --twin SPEC`). The twin runs the case's own
/// chunk size; the fused kernels take 128-token chunks only.
pub struct TwinBackend {
    pub prec: reference::ops::ssd_twin::Precision,
}

impl Backend for TwinBackend {
    fn name(&self) -> String {
        format!("twin:{}", self.prec.describe())
    }
    /// The fused kernels take bf16 x / B / C: the twin runs the bf16 rows.
    fn supports(&self, case: &dyn Case) -> bool {
        case.op() == "ssd_chunk_scan" && case.vars().contains("dtype=bf16")
    }
    fn run(&self, case: &dyn Case, inputs: &TensorMap) -> Result<TensorMap, String> {
        let def = ops::find("ssd_chunk_scan").map_err(|e| e.to_string())?;
        let params =
            reference::op::Params::resolve(&def, &case.params()).map_err(|e| e.to_string())?;
        reference::ops::ssd_twin::run(inputs, &params, self.prec).map_err(|e| e.to_string())
    }
}

/// The oracle pairs `duet check` runs on the CPU.
pub fn oracles() -> Vec<OracleBackend> {
    vec![OracleBackend {
        op: "ssd_chunk_scan",
        oracle: "selective_scan",
        drop_params: &["chunk_size"],
    }]
}
