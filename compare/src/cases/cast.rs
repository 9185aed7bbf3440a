//! Cases of `cast`: every target format on values spread over (and beyond) its range, so
//! rounding, subnormals and overflow all occur. Exact: formats are bit-defined.

use crate::case::{Case, CaseDef};
use crate::gen::Rng;
use crate::tolerance::Tolerance;
use reference::{Tensor, TensorMap};

fn case(to: &'static str, saturate: bool, lo: f32, hi: f32, n: usize) -> Box<dyn Case> {
    CaseDef::new("cast", move |seed| {
        let mut r = Rng::new(seed);
        let mut m = TensorMap::new();
        // Log-uniform magnitudes over [2^lo, 2^hi] with random signs.
        let x: Vec<f32> = (0..n)
            .map(|_| {
                let mag = 2f32.powf(r.uniform(lo, hi));
                if r.next_u32() & 1 == 0 {
                    mag
                } else {
                    -mag
                }
            })
            .collect();
        m.insert("x".into(), Tensor::from_f32(&[n], x));
        m
    })
    .var("n", n)
    .param("to", to)
    .param("saturate", saturate)
    .model("number formats (bf16 activations, f16 SSM state, FP8 / NVFP4 scales and elements)")
    .tol("out", Tolerance::Exact)
    .cost((n * 5) as u64, n as u64)
    .boxed()
}

pub fn cases() -> Vec<Box<dyn Case>> {
    vec![
        case("bf16", true, -135.0, 127.9, 65536),
        case("f16", true, -27.0, 17.0, 65536),
        case("e4m3", true, -12.0, 10.0, 65536),
        case("e4m3", false, -12.0, 10.0, 65536),
        case("e2m1", true, -4.0, 3.5, 4099),
    ]
}
