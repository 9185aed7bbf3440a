//! Cases of `stochastic_round_f16`: the SSU fp16 state size of one Super layer at batch 1
//! (128 heads x 64 x 128), values spread over the f16 range (including some that flush to
//! zero and some that overflow), random 32-bit words. Exact given the random bits.

use crate::case::{Case, CaseDef};
use crate::gen::Rng;
use crate::tolerance::Tolerance;
use reference::{Tensor, TensorMap};

fn case(shape: &'static [usize], model: &'static str) -> Box<dyn Case> {
    let n: usize = shape.iter().product();
    CaseDef::new("stochastic_round_f16", move |seed| {
        let mut r = Rng::new(seed);
        let mut m = TensorMap::new();
        // Log-uniform magnitudes from 2^-20 to 2^17 with random signs.
        let x: Vec<f32> = (0..n)
            .map(|_| {
                let mag = 2f32.powf(r.uniform(-20.0, 17.0));
                if r.next_u32() & 1 == 0 {
                    mag
                } else {
                    -mag
                }
            })
            .collect();
        m.insert("x".into(), Tensor::from_f32(shape, x));
        m.insert("rand".into(), r.u32_tensor(shape));
        m
    })
    .var("shape", format!("{shape:?}").replace(' ', ""))
    .model(model)
    .tol("out", Tolerance::Exact)
    .cost((n * 10) as u64, (n * 4) as u64)
    .boxed()
}

pub fn cases() -> Vec<Box<dyn Case>> {
    vec![
        case(
            &[128, 64, 128],
            "Nemotron 3 Super SSU fp16 state, one layer, batch 1",
        ),
        case(&[3, 5, 67], "odd shape"),
    ]
}
