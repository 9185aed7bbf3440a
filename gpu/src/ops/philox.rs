//! `philox` and `stochastic_round_f16` on the GPU (gpu/kernels/philox.cu). Registered only once
//! the reference ops of those names exist.

use super::GpuOp;

pub fn ops() -> Vec<GpuOp> {
    vec![]
}
