//! The Nemotron-H model (Nemotron 3 Super architecture) on the CPU reference: config parsing,
//! weight loading by hub names, prefill, token-by-token decode with SSM / conv / KV caches,
//! the MTP head and speculative decoding with MTP drafts.
//!
//! Every op the production engine runs as a kernel (RMSNorm, gated RMSNorm, ReLU², causal
//! conv1d, the SSD chunked scan, the selective state update, the noaux_tc router) is called
//! from [`crate::ops`] through [`kernels`]; what is left here is the wiring: projections,
//! residuals, attention and expert dispatch. All compute goes through the backend trait
//! [`kernels::ModelKernels`] held by the [`Model`] ([`kernels::CpuKernels`] by default; the
//! GPU crate's `gpu::model::GpuKernels` runs the same network on the GPU).
//!
//! Numerics: f32 throughout (weights are converted to f32 when loaded).

pub mod config;
pub mod engine;
pub mod floor;
pub mod kernels;
pub mod linear;
pub mod nemotron;
pub mod timed;
pub mod weights;

pub use config::{parse_pattern, Config, LayerKind};
pub use floor::{decode_step_bytes, DecodeBytes, Dtypes, StepBytes};
pub use kernels::{AttnGeometry, CpuKernels, ModelKernels};
pub use nemotron::{Cache, ForwardOut, Model, Pass, SpecStats};
pub use timed::{OpTime, TimedKernels};
pub use weights::{Mat, WeightStore};

use std::path::PathBuf;

/// What went wrong building or running the model.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("config: {0}")]
    Config(String),
    #[error("weights: {0}")]
    Weights(String),
    #[error("weights: tensor '{name}' is missing from {dir} (expected shape {shape:?}); the config and the checkpoint disagree: check the layer pattern and the tensor names (`duet e2e` expects hub names such as backbone.layers.0.mixer.in_proj.weight)")]
    MissingWeight {
        name: String,
        shape: Vec<usize>,
        dir: PathBuf,
    },
    #[error("weights: tensor '{name}' in {file} has shape {found:?} but the config implies {expected:?}; fix config.json or the checkpoint")]
    WeightShape {
        name: String,
        expected: Vec<usize>,
        found: Vec<usize>,
        file: PathBuf,
    },
    #[error(transparent)]
    Io(#[from] crate::io::IoError),
    #[error("input: {0}")]
    Input(String),
    #[error("op: {0}")]
    Op(String),
}

#[cfg(test)]
mod tests;
