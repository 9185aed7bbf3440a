//! Cases of `rmsnorm` (and, via [`norm_inputs`], the other norms): Super hidden 4096, then
//! rows that each change one thing.

use crate::case::{Case, CaseDef};
use crate::gen::Rng;
use reference::{DType, TensorMap};

/// x (rows, cols) N(0, 2^2) plus a per-column offset, weight U(0.5, 1.5) in f32, and the
/// extra tensors `extra` (same shape as x) N(0, 1).
pub(crate) fn norm_inputs(
    seed: u64,
    rows: usize,
    cols: usize,
    dtype: DType,
    weight: bool,
    extra: &[&str],
) -> TensorMap {
    let mut r = Rng::new(seed);
    let mut m = TensorMap::new();
    m.insert("x".into(), r.normal_tensor(&[rows, cols], 2.0, dtype));
    if weight {
        m.insert(
            "weight".into(),
            r.uniform_tensor(&[cols], 0.5, 1.5, DType::F32),
        );
    }
    for name in extra {
        m.insert((*name).into(), r.normal_tensor(&[rows, cols], 1.0, dtype));
    }
    m
}

fn case(rows: usize, hidden: usize, dtype: DType, what: &str) -> Box<dyn Case> {
    let e = dtype.size() as u64;
    CaseDef::new("rmsnorm", move |seed| {
        norm_inputs(seed, rows, hidden, dtype, true, &[])
    })
    .var("what", what)
    .var("rows", rows)
    .var("hidden", hidden)
    .var("dtype", dtype)
    .model("Nemotron 3 Super RMSNorm (hidden 4096, eps 1e-5)")
    .cost(2 * e * (rows * hidden) as u64, 4 * (rows * hidden) as u64)
    .boxed()
}

pub fn cases() -> Vec<Box<dyn Case>> {
    vec![
        case(128, 4096, DType::BF16, "super"),
        case(128, 4096, DType::F32, "f32"),
        case(1, 4096, DType::BF16, "one_row"),
        case(7, 4096 + 16, DType::BF16, "odd"),
        case(3, 1, DType::F32, "hidden1"),
    ]
}
