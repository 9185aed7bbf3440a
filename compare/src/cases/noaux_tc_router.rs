//! Cases of `noaux_tc_router`: the Nemotron 3 Super router (E=512, top-22, one group, factor 5)
//! at decode and prefill token counts, plus rows that each change one thing: bf16 bias,
//! DeepSeek-V3 grouped routing, an odd expert count. Indices are deterministic (exact); the
//! other normalisation modes must agree on indices exactly and on weights to ~1e-6.

use crate::case::{Case, CaseDef, Variant};
use crate::gen::Rng;
use crate::tolerance::Tolerance;
use reference::{DType, TensorMap};

const WEIGHTS_TOL: Tolerance = Tolerance::Close {
    atol: 1e-6,
    rtol: 1e-6,
};

fn inputs(seed: u64, t: usize, e: usize, bias_dtype: DType) -> TensorMap {
    let mut r = Rng::new(seed);
    let mut m = TensorMap::new();
    // Router logits of a trained model spread over a few units; the correction bias is small.
    m.insert("logits".into(), r.normal_tensor(&[t, e], 2.0, DType::F32));
    m.insert("bias".into(), r.uniform_tensor(&[e], -0.1, 0.1, bias_dtype));
    m
}

fn norm_variant(mode: &str) -> Variant {
    Variant {
        label: format!("norm_mode={mode}"),
        params: vec![("norm_mode".into(), mode.into())],
        outputs: vec![
            ("topk_indices".into(), Tolerance::Exact),
            ("topk_weights".into(), WEIGHTS_TOL),
        ],
    }
}

#[allow(clippy::too_many_arguments)]
fn case(
    t: usize,
    e: usize,
    k: usize,
    n_group: usize,
    topk_group: usize,
    rsf: f64,
    bias_dtype: DType,
    model: &'static str,
) -> Box<dyn Case> {
    let bias_bytes = (e * bias_dtype.size()) as u64;
    CaseDef::new("noaux_tc_router", move |seed| {
        inputs(seed, t, e, bias_dtype)
    })
    .var("T", t)
    .var("E", e)
    .var("k", k)
    .var("bias", bias_dtype)
    .param("top_k", k)
    .param("n_group", n_group)
    .param("topk_group", topk_group)
    .param("routed_scaling_factor", rsf)
    .model(model)
    .tol("topk_indices", Tolerance::Exact)
    .tol("topk_weights", WEIGHTS_TOL)
    .cost(
        (t * e * 4) as u64 + bias_bytes + (t * k * 8) as u64,
        (t * e * 8 + t * k * 4) as u64,
    )
    .variant(norm_variant("fp32_divide_then_multiply"))
    .variant(norm_variant("fp32_no_eps"))
    .boxed()
}

pub fn cases() -> Vec<Box<dyn Case>> {
    let sup = "Nemotron 3 Super router (512 experts, top-22)";
    vec![
        case(4, 512, 22, 1, 1, 5.0, DType::F32, sup),
        case(64, 512, 22, 1, 1, 5.0, DType::F32, sup),
        case(4, 512, 22, 1, 1, 5.0, DType::BF16, sup),
        case(
            16,
            256,
            8,
            8,
            4,
            2.5,
            DType::F32,
            "DeepSeek-V3 grouped router (256 experts, 8 groups, top-4 groups, top-8)",
        ),
        case(7, 72, 6, 1, 1, 1.0, DType::F32, "odd expert count"),
    ]
}
