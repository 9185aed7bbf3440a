//! Cases of `nvfp4_quantize`: the Super hidden size (128 x 4096) in both scale layouts, odd
//! rows (77 x 160: 77 rows pad to 128, 10 scale columns pad to 12), bf16 input and a given
//! global scale. Codes and scales are exact by construction (the GPU emulates E2M1/E4M3 and
//! rcp.approx with the same algorithm). The `exact` mode (FlashInfer's reference quantizer)
//! may round a few codes differently; it must agree on the global scale and the block scales.

use crate::case::{Case, CaseDef, Variant};
use crate::gen::Rng;
use crate::tolerance::Tolerance;
use reference::{DType, Tensor, TensorMap};

fn case(
    rows: usize,
    cols: usize,
    layout: &'static str,
    dtype: DType,
    given_global: bool,
    model: &'static str,
) -> Box<dyn Case> {
    let mut c = CaseDef::new("nvfp4_quantize", move |seed| {
        let mut r = Rng::new(seed);
        let mut m = TensorMap::new();
        // Activations with outliers: a normal bulk plus a few large values, so blocks get
        // different scales and the global amax is not typical.
        let mut x = r.normal_vec(rows * cols, 1.0);
        for _ in 0..(rows * cols / 97).max(1) {
            let i = r.below((rows * cols) as u64) as usize;
            x[i] *= 20.0;
        }
        m.insert("x".into(), Tensor::from_f32_as(&[rows, cols], &x, dtype));
        if given_global {
            m.insert("global_scale".into(), Tensor::from_f32(&[1], vec![2.0]));
        }
        m
    })
    .var("rows", rows)
    .var("cols", cols)
    .var("dtype", dtype)
    .param("layout", layout)
    .model(model)
    .tol("x_fp4", Tolerance::Exact)
    .tol("sf", Tolerance::Exact)
    .tol("global_scale", Tolerance::Exact)
    .cost(
        (rows * cols * dtype.size() + rows * cols / 2 + rows * cols / 16 + 4) as u64,
        (rows * cols * 4) as u64,
    )
    .variant(Variant {
        label: "mode=exact".into(),
        params: vec![("mode".into(), "exact".into())],
        outputs: vec![
            ("global_scale".into(), Tolerance::Exact),
            ("sf".into(), Tolerance::Exact),
        ],
    });
    if given_global {
        c = c.var("global_scale", "given");
    }
    c.boxed()
}

pub fn cases() -> Vec<Box<dyn Case>> {
    let sup = "Nemotron 3 Super hidden 4096 (MoE input / fused add+RMSNorm+NVFP4 output)";
    vec![
        case(128, 4096, "linear", DType::F32, false, sup),
        case(128, 4096, "swizzled128x4", DType::F32, false, sup),
        case(128, 4096, "swizzled128x4", DType::BF16, false, sup),
        case(
            77,
            160,
            "linear",
            DType::F32,
            false,
            "odd rows and scale columns",
        ),
        case(
            77,
            160,
            "swizzled128x4",
            DType::F32,
            false,
            "odd rows and scale columns",
        ),
        case(77, 160, "linear", DType::F32, true, "given global scale"),
    ]
}
