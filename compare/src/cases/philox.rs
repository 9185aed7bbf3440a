//! Cases of `philox`: random counters and keys, 10 rounds (Random123 / cuRAND default) and 5
//! (Nemotron recipes), plus an odd row count. Exact: Philox is integer arithmetic.

use crate::case::{Case, CaseDef};
use crate::gen::Rng;
use crate::tolerance::Tolerance;
use reference::TensorMap;

fn case(n: usize, rounds: u32, model: &'static str) -> Box<dyn Case> {
    CaseDef::new("philox", move |seed| {
        let mut r = Rng::new(seed);
        let mut m = TensorMap::new();
        m.insert("counter".into(), r.u32_tensor(&[n, 4]));
        m.insert("key".into(), r.u32_tensor(&[n, 2]));
        m
    })
    .var("N", n)
    .param("rounds", rounds)
    .model(model)
    .tol("out", Tolerance::Exact)
    .cost((n * 40) as u64, (n as u64) * rounds as u64 * 8)
    .boxed()
}

pub fn cases() -> Vec<Box<dyn Case>> {
    vec![
        case(65536, 10, "Random123 / cuRAND default"),
        case(65536, 5, "Nemotron SSU stochastic rounding (5 rounds)"),
        case(1001, 7, "odd count, Random123 7-round vectors"),
    ]
}
