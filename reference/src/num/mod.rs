//! Number formats shared by the reference ops and mirrored bit for bit by the GPU kernels.
//!
//! | module                | format / operation                                             |
//! |-----------------------|----------------------------------------------------------------|
//! | [`f16`](mod@f16)      | IEEE binary16 <-> f32, round to nearest even                  |
//! | [`bf16`]              | bfloat16 <-> f32, round to nearest even                       |
//! | [`e4m3`]              | FP8 E4M3 (`fn`: no inf, NaN 0x7F, max 448), saturating or not  |
//! | [`e2m1`]              | FP4 E2M1 (NVFP4 elements), nibble packing (element 0 low)      |
//! | [`rcp_approx`]        | PTX `rcp.approx.ftz.f32`, bit-exact from an H200 measurement   |
//! | [`philox`]            | Philox-4x32-R counter-based random numbers                    |
//! | [`stochastic_round`]  | f32 -> f16 stochastic rounding from 13 random bits (SSU state)|
//! | [`tanhf`]             | `duet_tanhf`: f32 tanh from plain f32 ops (router sigmoid)     |
//!
//! All functions are pure and work on raw bits where the format has no Rust type, so the
//! CPU reference and the CUDA kernels can share one documented algorithm.

pub mod bf16;
pub mod e2m1;
pub mod e4m3;
pub mod f16;
pub mod philox;
pub mod rcp_approx;
pub mod stochastic_round;
pub mod tanhf;

pub use bf16::{bf16_bits_to_f32, f32_to_bf16_bits, round_bf16};
pub use e2m1::{e2m1_to_f32, f32_to_e2m1, pack_e2m1, unpack_e2m1, E2M1_MAX, E2M1_VALUES};
pub use e4m3::{e4m3_bits_to_f32, f32_to_e4m3_bits, round_e4m3, Saturation, E4M3_MAX, E4M3_NAN};
pub use f16::{f16_bits_to_f32, f32_to_f16_bits, round_f16};
pub use philox::{philox4x32, philox_from_seed_offset, PHILOX_DEFAULT_ROUNDS};
pub use rcp_approx::{
    measured_table, rcp_approx_ftz, rcp_approx_ftz_correctly_rounded, rcp_approx_ftz_with_table,
    RcpTable, RcpTableError,
};
pub use stochastic_round::stochastic_round_f16_bits;
pub use tanhf::{duet_tanhf, sigmoid_tanh_f32};
