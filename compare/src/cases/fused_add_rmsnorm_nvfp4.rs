//! Cases of `fused_add_rmsnorm_nvfp4`: Super hidden 4096, then rows that each change one thing.

use super::rmsnorm_nvfp4::nvfp4_case;
use crate::case::Case;

pub fn cases() -> Vec<Box<dyn Case>> {
    let m = "Nemotron 3 Super residual add + RMSNorm + NVFP4";
    let f = |rows, cols, gs, p: &[(&str, &str)], what| {
        nvfp4_case(
            "fused_add_rmsnorm_nvfp4",
            m,
            rows,
            cols,
            true,
            &["residual"],
            gs,
            p,
            what,
        )
    };
    vec![
        f(128, 4096, None, &[], "super"),
        f(
            128,
            4096,
            None,
            &[("round_before_quant", "none")],
            "fp32_quant",
        ),
        f(
            128,
            4096,
            Some(700.0),
            &[("layout", "swizzled128x4")],
            "swizzled_given_gs",
        ),
        f(7, 4096 + 16, None, &[], "odd"),
    ]
}
