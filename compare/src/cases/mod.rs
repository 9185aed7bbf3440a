//! Every case of the table, one module per op (the same name as the op).

use crate::case::Case;

// (case modules are declared here, one line each)
pub mod cast;
pub mod causal_conv1d_fn;
pub mod causal_conv1d_update;
pub mod fused_add_rmsnorm;
pub mod fused_add_rmsnorm_nvfp4;
pub mod gated_rmsnorm;
pub mod gated_rmsnorm_nvfp4;
pub mod moe;
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
pub mod stochastic_round_f16;

/// Every case, in table order.
pub fn all() -> Vec<Box<dyn Case>> {
    let mut v: Vec<Box<dyn Case>> = Vec::new();
    // (one `v.extend(module::cases());` line per op)
    v.extend(causal_conv1d_fn::cases());
    v.extend(causal_conv1d_update::cases());
    v.extend(ssd_chunk_scan::cases());
    v.extend(selective_scan::cases());
    v.extend(rmsnorm::cases());
    v.extend(fused_add_rmsnorm::cases());
    v.extend(gated_rmsnorm::cases());
    v.extend(relu2::cases());
    v.extend(rmsnorm_nvfp4::cases());
    v.extend(fused_add_rmsnorm_nvfp4::cases());
    v.extend(gated_rmsnorm_nvfp4::cases());
    v.extend(relu2_nvfp4::cases());
    v.extend(selective_state_update::cases());
    v.extend(selective_state_update_multi_token::cases());
    v.extend(noaux_tc_router::cases());
    v.extend(nvfp4_quantize::cases());
    v.extend(nvfp4_dequantize::cases());
    v.extend(philox::cases());
    v.extend(stochastic_round_f16::cases());
    v.extend(cast::cases());
    v.extend(moe::cases());
    v.retain(|_| true);
    v
}
