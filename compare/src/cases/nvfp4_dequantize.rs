//! Cases of `nvfp4_dequantize`: random codes and positive E4M3 scales (never NaN) at the Super
//! hidden size and at odd sizes, both layouts. `x = e2m1 * sf / global`: the product is exact
//! and the division correctly rounded, so an implementation that multiplies by a reciprocal
//! is allowed one ulp.

use crate::case::{Case, CaseDef};
use crate::gen::Rng;
use crate::tolerance::Tolerance;
use reference::ops::nvfp4_quantize::SfLayout;
use reference::{Tensor, TensorMap};

fn case(rows: usize, cols: usize, layout: SfLayout, model: &'static str) -> Box<dyn Case> {
    CaseDef::new("nvfp4_dequantize", move |seed| {
        let mut r = Rng::new(seed);
        let mut m = TensorMap::new();
        let codes: Vec<u8> = (0..rows * cols / 2).map(|_| r.next_u32() as u8).collect();
        let [sr, sc] = layout.shape(rows, cols);
        // E4M3 bytes 0x08..=0x7E: positive normal scales from 2^-6 up to 448.
        let mut sf = vec![0u8; sr * sc];
        for mm in 0..rows {
            for k in 0..cols / 16 {
                sf[layout.offset(mm, k, cols)] = 0x08 + r.below(0x77) as u8;
            }
        }
        m.insert("x_fp4".into(), Tensor::from_u8(&[rows, cols / 2], codes));
        m.insert("sf".into(), Tensor::from_u8(&[sr, sc], sf));
        m.insert(
            "global_scale".into(),
            Tensor::from_f32(&[1], vec![r.uniform(10.0, 3000.0)]),
        );
        m
    })
    .var("rows", rows)
    .var("cols", cols)
    .param("layout", layout.name())
    .model(model)
    .tol(
        "x",
        Tolerance::Close {
            atol: 0.0,
            rtol: 1.2e-7,
        },
    )
    .cost(
        (rows * cols / 2 + layout.len(rows, cols) + 4 + rows * cols * 4) as u64,
        (rows * cols * 2) as u64,
    )
    .boxed()
}

pub fn cases() -> Vec<Box<dyn Case>> {
    let sup = "Nemotron 3 Super hidden 4096";
    vec![
        case(128, 4096, SfLayout::Linear, sup),
        case(128, 4096, SfLayout::Swizzled128x4, sup),
        case(77, 160, SfLayout::Linear, "odd rows and scale columns"),
        case(
            77,
            160,
            SfLayout::Swizzled128x4,
            "odd rows and scale columns",
        ),
    ]
}
