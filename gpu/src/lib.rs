//! duet's GPU path: a cudarc runtime, NVRTC-compiled kernels from `gpu/kernels/*.cu`, and GPU
//! implementations of the reference ops, exposed to the compare layer as backends.
//!
//! Contract used by the CLI (keep these signatures):
//! - [`gpu_ops`]: which ops have GPU kernels and their versions (needs no device);
//! - [`backends`]: one `compare::Backend` per (op, kernel version), for `duet check --backend gpu`;
//! - [`run`]: runs one op's default kernel version, for `duet run --backend gpu`.

use compare::Backend;
use reference::TensorMap;

/// Errors of the GPU path.
#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    #[error("no usable GPU: {0}")]
    NoDevice(String),
    #[error("op '{0}' has no GPU kernel yet; `duet ops` shows which ops do")]
    NoKernel(String),
}

/// Ops with GPU kernels and their kernel versions.
pub fn gpu_ops() -> Vec<(&'static str, Vec<&'static str>)> {
    vec![]
}

/// Every GPU kernel version as a backend; `filter` is an op-name regex.
pub fn backends(_filter: Option<&str>) -> Result<Vec<Box<dyn Backend>>, GpuError> {
    Err(GpuError::NoDevice("the GPU runtime is not built yet".into()))
}

/// Runs `op` with its default GPU kernel.
pub fn run(op: &str, _inputs: &TensorMap, _params: &[(String, String)]) -> Result<TensorMap, GpuError> {
    Err(GpuError::NoKernel(op.into()))
}

/// Times one case on its default GPU kernel (CUDA events; median, p10, p90; GB/s against the
/// measured copy ceiling) and returns a JSON object for `duet bench --backend gpu`.
pub fn bench(case: &dyn compare::Case) -> Result<serde_json::Value, GpuError> {
    Err(GpuError::NoKernel(case.op().into()))
}
