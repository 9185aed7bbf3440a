//! duet's GPU path: a cudarc runtime, NVRTC-compiled kernels from `gpu/kernels/*.cu`, and GPU
//! implementations of the reference ops, exposed to the compare layer as backends.
//!
//! Contract used by the CLI (keep these signatures):
//! - [`gpu_ops`]: which ops have GPU kernels and their versions (needs no device);
//! - [`backends`]: one `compare::Backend` per (op, kernel version), for `duet check --backend gpu`;
//! - [`run`]: runs one op's default kernel version, for `duet run --backend gpu`;
//! - [`bench::bench`]: CUDA-event timings of one op at a shape preset (for `duet bench`).
//!
//! Nothing here touches CUDA until one of `backends`, `run` or `bench` is called; then a
//! missing driver, GPU or NVRTC is one [`GpuError`] with a clear message.

pub mod backend;
pub mod bench;
pub mod compile;
pub mod engine;
pub mod graph;
pub mod handover_model;
pub mod model;
pub mod nvfp4_store;
pub mod ops;
pub mod runtime;
pub mod tune;

use compare::Backend;
use reference::TensorMap;

/// Errors of the GPU path.
#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    #[error("no usable GPU: {0}")]
    NoDevice(String),
    #[error("op '{0}' has no GPU kernel yet; `duet ops` shows which ops do")]
    NoKernel(String),
    #[error("op '{op}' has no GPU kernel version '{version}'; versions: {known}")]
    NoVersion {
        op: String,
        version: String,
        known: String,
    },
    #[error("NVRTC: {0}")]
    Nvrtc(String),
    #[error("NVRTC failed to compile gpu/kernels/{kernel}.cu:\n{log}")]
    Compile { kernel: String, log: String },
    #[error("CUDA driver: {0}")]
    Driver(String),
    #[error("out-of-bounds write detected: {0}")]
    Guard(String),
    #[error("not supported by this GPU kernel: {0}")]
    Unsupported(String),
    #[error(transparent)]
    Op(#[from] reference::op::OpError),
}

/// Ops with GPU kernels and their kernel versions (the first is the default).
pub fn gpu_ops() -> Vec<(&'static str, Vec<&'static str>)> {
    ops::all()
        .iter()
        .map(|o| (o.name, o.versions.to_vec()))
        .collect()
}

/// Every GPU kernel version as a backend; `filter` is an op-name regex (a plain substring
/// match is used when it is not a valid regex).
pub fn backends(filter: Option<&str>) -> Result<Vec<Box<dyn Backend>>, GpuError> {
    backends_where(|op| filter.is_none_or(|f| backend::name_matches(f, op)))
}

/// Every version of every GPU op whose name `keep` accepts.
pub fn backends_where(keep: impl Fn(&str) -> bool) -> Result<Vec<Box<dyn Backend>>, GpuError> {
    runtime::gpu()?;
    let mut v: Vec<Box<dyn Backend>> = vec![];
    for op in ops::all() {
        if !keep(op.name) {
            continue;
        }
        for &ver in op.versions {
            v.push(Box::new(backend::GpuBackend::new(op.name, ver)));
        }
    }
    Ok(v)
}

/// Runs `op` with its default GPU kernel.
pub fn run(
    op: &str,
    inputs: &TensorMap,
    params: &[(String, String)],
) -> Result<TensorMap, GpuError> {
    let o = ops::find(op)?;
    let g = runtime::gpu()?;
    ops::run_version(
        &g,
        &o,
        o.default_version(),
        inputs,
        params,
        &ops::RunOpts::default(),
    )
}

/// Times one case on its default GPU kernel (CUDA events; median, p10, p90) and returns a JSON
/// object for `duet bench --backend gpu`. Kernel-only numbers at the target shapes:
/// [`bench::preset`].
pub fn bench(case: &dyn compare::Case) -> Result<serde_json::Value, GpuError> {
    bench::case(case)
}
