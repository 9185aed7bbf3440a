//! Cases of `relu2` (MoE expert activation): routed expert intermediate 2688, shared 5376.

use super::rmsnorm::norm_inputs;
use crate::case::{Case, CaseDef};
use reference::DType;

fn case(rows: usize, cols: usize, dtype: DType, what: &str) -> Box<dyn Case> {
    let e = dtype.size() as u64;
    CaseDef::new("relu2", move |seed| {
        norm_inputs(seed, rows, cols, dtype, false, &[])
    })
    .var("what", what)
    .var("rows", rows)
    .var("cols", cols)
    .var("dtype", dtype)
    .model("Nemotron 3 Super MoE relu2 (routed 2688, shared 5376)")
    .cost(2 * e * (rows * cols) as u64, 2 * (rows * cols) as u64)
    .boxed()
}

pub fn cases() -> Vec<Box<dyn Case>> {
    vec![
        case(128, 2688, DType::BF16, "routed"),
        case(128, 5376, DType::BF16, "shared"),
        case(7, 2688, DType::F32, "f32_odd_rows"),
    ]
}
