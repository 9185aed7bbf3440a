//! Cases of `gated_rmsnorm` (Mamba-2 output norm): d_inner 8192, group 1024, gate before norm,
//! then rows that each change one thing.

use super::rmsnorm::norm_inputs;
use crate::case::{Case, CaseDef};
use reference::DType;

fn case(rows: usize, d: usize, group: usize, nbg: bool, dtype: DType, what: &str) -> Box<dyn Case> {
    let e = dtype.size() as u64;
    CaseDef::new("gated_rmsnorm", move |seed| {
        norm_inputs(seed, rows, d, dtype, true, &["z"])
    })
    .var("what", what)
    .var("rows", rows)
    .var("d", d)
    .var("dtype", dtype)
    .param("group_size", group)
    .param("norm_before_gate", nbg)
    .model("Nemotron 3 Super Mamba-2 gated RMSNorm (d_inner 8192, 8 groups)")
    .cost(3 * e * (rows * d) as u64, 8 * (rows * d) as u64)
    .boxed()
}

pub fn cases() -> Vec<Box<dyn Case>> {
    vec![
        case(64, 8192, 1024, false, DType::BF16, "super"),
        case(64, 8192, 1024, true, DType::BF16, "norm_before_gate"),
        case(64, 8192, 8192, false, DType::BF16, "one_group"),
        case(64, 8192, 1024, false, DType::F32, "f32"),
        case(5, 48, 16, false, DType::BF16, "odd"),
    ]
}
