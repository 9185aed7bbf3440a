//! Every op of the reference, one module each; [`registry`] lists them for the CLI, the case
//! table and the GPU path.

use crate::op::{OpDef, OpError};

// (op modules are declared here, one line each)
pub mod nvfp4_dequantize;
pub mod nvfp4_quantize;

/// Every op, in the order `duet ops` prints them.
pub fn registry() -> Vec<OpDef> {
    let v: Vec<OpDef> = vec![
        // (one `module::def(),` line per op)
        nvfp4_quantize::def(),
        nvfp4_dequantize::def(),
    ];
    v
}

/// Looks an op up by name.
pub fn find(name: &str) -> Result<OpDef, OpError> {
    registry()
        .into_iter()
        .find(|d| d.name == name)
        .ok_or_else(|| OpError::UnknownOp(name.to_string()))
}
