//! Cases of `relu2_nvfp4` (MoE expert epilogue): routed intermediate 2688, shared 5376, both
//! rounding modes.

use super::rmsnorm_nvfp4::nvfp4_case;
use crate::case::Case;

pub fn cases() -> Vec<Box<dyn Case>> {
    let m = "Nemotron 3 Super MoE relu2 + NVFP4";
    let f = |rows, cols, gs, p: &[(&str, &str)], what| {
        nvfp4_case("relu2_nvfp4", m, rows, cols, false, &[], gs, p, what)
    };
    vec![
        f(128, 2688, None, &[], "routed"),
        f(
            128,
            2688,
            None,
            &[("round_before_quant", "none")],
            "fp32_quant",
        ),
        f(
            128,
            5376,
            Some(300.0),
            &[("layout", "swizzled128x4")],
            "shared_swizzled_gs",
        ),
        f(7, 2688, None, &[], "odd_rows"),
    ]
}
