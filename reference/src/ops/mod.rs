//! Every op of the reference, one module each; [`registry`] lists them for the CLI, the case
//! table and the GPU path.

use crate::op::{OpDef, OpError};

// (op modules are declared here, one line each)
pub mod cast;
pub mod causal_conv1d_fn;
pub mod causal_conv1d_update;
pub mod fused_add_rmsnorm;
pub mod fused_add_rmsnorm_nvfp4;
pub mod gated_rmsnorm;
pub mod gated_rmsnorm_nvfp4;
pub mod latent_moe;
pub mod mamba_cache_promote;
pub mod moe_expert_gemm1_relu2_nvfp4;
pub mod moe_expert_gemm2;
pub mod moe_finalize;
pub mod moe_gemm;
pub mod moe_permute;
pub mod noaux_tc_router;
pub mod nvfp4_dequantize;
pub mod nvfp4_quantize;
pub mod philox;
pub mod relu2;
pub mod relu2_nvfp4;
pub mod rmsnorm;
pub mod rmsnorm_nvfp4;
pub mod selective_scan;
pub mod selective_state_update;
pub mod selective_state_update_multi_token;
pub mod ssd_chunk_scan;
pub mod ssd_twin;
pub mod stochastic_round_f16;

/// Every op, in the order `duet ops` prints them.
pub fn registry() -> Vec<OpDef> {
    let v: Vec<OpDef> = vec![
        // (one `module::def(),` line per op)
        causal_conv1d_fn::def(),
        causal_conv1d_update::def(),
        ssd_chunk_scan::def(),
        selective_scan::def(),
        rmsnorm::def(),
        fused_add_rmsnorm::def(),
        gated_rmsnorm::def(),
        relu2::def(),
        rmsnorm_nvfp4::def(),
        fused_add_rmsnorm_nvfp4::def(),
        gated_rmsnorm_nvfp4::def(),
        relu2_nvfp4::def(),
        noaux_tc_router::def(),
        nvfp4_quantize::def(),
        nvfp4_dequantize::def(),
        selective_state_update::def(),
        selective_state_update_multi_token::def(),
        mamba_cache_promote::def(),
        philox::def(),
        stochastic_round_f16::def(),
        cast::def(),
        moe_permute::def(),
        moe_expert_gemm1_relu2_nvfp4::def(),
        moe_expert_gemm2::def(),
        moe_finalize::def(),
        latent_moe::def(),
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
