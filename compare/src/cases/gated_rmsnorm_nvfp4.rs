//! Cases of `gated_rmsnorm_nvfp4`: Mamba-2 d_inner 8192, group 1024, then rows that each
//! change one thing.

use super::rmsnorm_nvfp4::nvfp4_case;
use crate::case::Case;

pub fn cases() -> Vec<Box<dyn Case>> {
    let m = "Nemotron 3 Super Mamba-2 gated RMSNorm + NVFP4 (d_inner 8192, group 1024)";
    let f = |rows, cols, gs, p: &[(&str, &str)], what| {
        nvfp4_case(
            "gated_rmsnorm_nvfp4",
            m,
            rows,
            cols,
            true,
            &["z"],
            gs,
            p,
            what,
        )
    };
    vec![
        f(64, 8192, None, &[("group_size", "1024")], "super"),
        f(
            64,
            8192,
            None,
            &[("group_size", "1024"), ("round_before_quant", "none")],
            "fp32_quant",
        ),
        f(
            64,
            8192,
            None,
            &[("group_size", "1024"), ("norm_before_gate", "true")],
            "norm_before_gate",
        ),
        f(
            5,
            48,
            None,
            &[("group_size", "16"), ("layout", "swizzled128x4")],
            "odd_swizzled",
        ),
    ]
}
