//! duet's CPU reference: the executable form of SPEC.md.
//!
//! - [`tensor`]: the tensor type and dtypes;
//! - [`io`]: safetensors / npy / npz reading and writing;
//! - [`num`]: number formats (bf16, fp16, E4M3, E2M1, rcp.approx, Philox, stochastic rounding);
//! - [`op`]: op descriptions, params and input validation shared by every op;
//! - [`ops`]: the ops themselves, and [`ops::registry`] listing them.

pub mod io;
pub mod model;
pub mod num;
pub mod op;
pub mod ops;
pub mod tensor;

pub use tensor::{DType, Data, Tensor, TensorMap};
