//! Cases of `fused_add_rmsnorm`: Super hidden 4096, then rows that each change one thing.

use super::rmsnorm::norm_inputs;
use crate::case::{Case, CaseDef};
use reference::DType;

fn case(rows: usize, hidden: usize, dtype: DType, what: &str) -> Box<dyn Case> {
    let e = dtype.size() as u64;
    CaseDef::new("fused_add_rmsnorm", move |seed| {
        norm_inputs(seed, rows, hidden, dtype, true, &["residual"])
    })
    .var("what", what)
    .var("rows", rows)
    .var("hidden", hidden)
    .var("dtype", dtype)
    .model("Nemotron 3 Super residual add + RMSNorm")
    .cost(4 * e * (rows * hidden) as u64, 5 * (rows * hidden) as u64)
    .boxed()
}

pub fn cases() -> Vec<Box<dyn Case>> {
    vec![
        case(128, 4096, DType::BF16, "super"),
        case(128, 4096, DType::F32, "f32"),
        case(7, 4096 + 16, DType::BF16, "odd"),
    ]
}
