//! The case table: one trait that ties an op's seeded inputs, its params, the tolerance of each
//! output, and its minimum bytes and FLOPs (for "% of roofline"). `duet check`, `duet bench`,
//! the property tests and the GPU differential tests all go through it.

use crate::tolerance::Tolerance;
use reference::{DType, TensorMap};
use std::collections::BTreeMap;
use std::sync::Arc;

/// One test case of one op.
pub trait Case: Send + Sync {
    /// The op name (`duet ops`).
    fn op(&self) -> &'static str;
    /// Filterable parameters as `key=value` pairs, e.g. `T=4,E=512,k=22` (ggml's `vars()`).
    fn vars(&self) -> String;
    /// Where the shape comes from, e.g. "Nemotron 3 Super router".
    fn model(&self) -> &'static str {
        ""
    }
    /// Params passed to the op (`--set` pairs).
    fn params(&self) -> Vec<(String, String)>;
    /// Inputs for this seed (never zeros).
    fn inputs(&self, seed: u64) -> TensorMap;
    /// Tolerance of output `name` whose reference has dtype `dtype`.
    fn tolerance(&self, name: &str, dtype: DType) -> Tolerance;
    /// Minimum bytes the op must move (inputs read + outputs written).
    fn bytes(&self) -> u64;
    /// Floating-point operations (approximate, for FLOP/s).
    fn flops(&self) -> u64;
    /// Reference modes that must agree with the default mode on the listed outputs.
    fn variants(&self) -> Vec<Variant> {
        vec![]
    }
    /// `op/vars`, the case's name in tables and filters.
    fn name(&self) -> String {
        format!("{}/{}", self.op(), self.vars())
    }
}

/// Another mode of the reference compared against the default one.
#[derive(Clone, Debug)]
pub struct Variant {
    pub label: String,
    pub params: Vec<(String, String)>,
    /// Outputs compared, with their tolerance.
    pub outputs: Vec<(String, Tolerance)>,
}

impl Variant {
    /// A variant named `label`, run with `params`, comparing `outputs` at their tolerance.
    pub fn new(label: &str, params: &[(&str, &str)], outputs: &[(&str, Tolerance)]) -> Variant {
        Variant {
            label: label.into(),
            params: params
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            outputs: outputs.iter().map(|(k, t)| (k.to_string(), *t)).collect(),
        }
    }
}

type MakeFn = dyn Fn(u64) -> TensorMap + Send + Sync;

/// A case described by data: the usual way to add one.
#[derive(Clone)]
pub struct CaseDef {
    pub op: &'static str,
    pub vars: Vec<(String, String)>,
    pub model: &'static str,
    pub params: Vec<(String, String)>,
    pub make: Arc<MakeFn>,
    pub tolerances: BTreeMap<String, Tolerance>,
    pub bytes: u64,
    pub flops: u64,
    pub variants: Vec<Variant>,
}

impl CaseDef {
    pub fn new(
        op: &'static str,
        make: impl Fn(u64) -> TensorMap + Send + Sync + 'static,
    ) -> CaseDef {
        CaseDef {
            op,
            vars: vec![],
            model: "",
            params: vec![],
            make: Arc::new(make),
            tolerances: BTreeMap::new(),
            bytes: 0,
            flops: 0,
            variants: vec![],
        }
    }
    pub fn var(mut self, k: &str, v: impl ToString) -> Self {
        self.vars.push((k.into(), v.to_string()));
        self
    }
    pub fn model(mut self, m: &'static str) -> Self {
        self.model = m;
        self
    }
    pub fn param(mut self, k: &str, v: impl ToString) -> Self {
        self.params.push((k.into(), v.to_string()));
        self
    }
    pub fn tol(mut self, output: &str, t: Tolerance) -> Self {
        self.tolerances.insert(output.into(), t);
        self
    }
    pub fn cost(mut self, bytes: u64, flops: u64) -> Self {
        self.bytes = bytes;
        self.flops = flops;
        self
    }
    pub fn variant(mut self, v: Variant) -> Self {
        self.variants.push(v);
        self
    }
    pub fn boxed(self) -> Box<dyn Case> {
        Box::new(self)
    }
}

impl Case for CaseDef {
    fn op(&self) -> &'static str {
        self.op
    }
    fn vars(&self) -> String {
        let mut all: Vec<String> = self.vars.iter().map(|(k, v)| format!("{k}={v}")).collect();
        for (k, v) in &self.params {
            if !self.vars.iter().any(|(vk, _)| vk == k) {
                all.push(format!("{k}={v}"));
            }
        }
        all.join(",")
    }
    fn model(&self) -> &'static str {
        self.model
    }
    fn params(&self) -> Vec<(String, String)> {
        self.params.clone()
    }
    fn inputs(&self, seed: u64) -> TensorMap {
        (self.make)(seed)
    }
    fn tolerance(&self, name: &str, dtype: DType) -> Tolerance {
        self.tolerances
            .get(name)
            .copied()
            .unwrap_or_else(|| Tolerance::for_dtype(dtype))
    }
    fn bytes(&self) -> u64 {
        self.bytes
    }
    fn flops(&self) -> u64 {
        self.flops
    }
    fn variants(&self) -> Vec<Variant> {
        self.variants.clone()
    }
}

/// Bytes of every tensor in a map (for napkin byte counts).
pub fn map_bytes(m: &TensorMap) -> u64 {
    m.values()
        .map(|t| (t.numel() * t.dtype().size()) as u64)
        .sum()
}
