//! The compare-layer backend: one per (op, kernel version), used by `duet check --backend gpu`
//! and the GPU differential tests. Outputs are poisoned and guarded on every run.

use crate::ops::{self, RunOpts};
use crate::runtime;
use compare::{Backend, Case};
use reference::TensorMap;

/// `gpu:<op>:<version>`.
pub struct GpuBackend {
    pub op: &'static str,
    pub version: &'static str,
    pub opts: RunOpts,
}

impl GpuBackend {
    pub fn new(op: &'static str, version: &'static str) -> Self {
        GpuBackend {
            op,
            version,
            opts: RunOpts::default(),
        }
    }
}

impl Backend for GpuBackend {
    fn name(&self) -> String {
        format!("gpu:{}:{}", self.op, self.version)
    }

    fn supports(&self, case: &dyn Case) -> bool {
        if case.op() != self.op {
            return false;
        }
        let Ok(op) = ops::find(self.op) else {
            return false;
        };
        let Ok(def) = reference::ops::find(self.op) else {
            return false;
        };
        let Ok(p) = reference::op::Params::resolve(&def, &case.params()) else {
            return true; // let run() report the param error
        };
        (op.applicable)(self.version, &case.inputs(0), &p).is_none()
    }

    fn run(&self, case: &dyn Case, inputs: &TensorMap) -> Result<TensorMap, String> {
        let g = runtime::gpu().map_err(|e| e.to_string())?;
        let op = ops::find(self.op).map_err(|e| e.to_string())?;
        ops::run_version(&g, &op, self.version, inputs, &case.params(), &self.opts)
            .map_err(|e| e.to_string())
    }
}

/// `filter` as a regex over the op name (a plain substring match if it is not a valid regex).
pub fn name_matches(filter: &str, name: &str) -> bool {
    match regex::Regex::new(filter) {
        Ok(r) => r.is_match(name),
        Err(_) => name.contains(filter),
    }
}
