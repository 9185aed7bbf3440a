//! Cases of the LatentMoE expert-layer ops (moe_permute, moe_expert_gemm1_relu2_nvfp4,
//! moe_expert_gemm2, moe_finalize). Shapes: Super routing (512 experts, top-22) for the
//! permutation; scaled-down expert widths for the CPU-run GEMMs (latent 1024 / width 2688 at
//! Super size are a GPU benchmark, not a CPU check).

use crate::case::{Case, CaseDef};
use crate::gen::Rng;
use crate::tolerance::Tolerance;
use reference::ops::moe_permute::permute;
use reference::ops::nvfp4_quantize::{quantize, Nvfp4Mode, SfLayout};
use reference::{DType, Tensor, TensorMap};

fn routing(r: &mut Rng, t: usize, k: usize, e: usize) -> Vec<i64> {
    // k distinct experts per token, skewed so some experts are empty and some hot.
    (0..t)
        .flat_map(|_| {
            let mut chosen: Vec<i64> = vec![];
            while chosen.len() < k {
                let c = (r.below(e as u64 * e as u64) as f64).sqrt() as i64;
                if !chosen.contains(&c) {
                    chosen.push(c);
                }
            }
            chosen
        })
        .collect()
}

#[allow(clippy::too_many_arguments)]
fn gemm_inputs(
    seed: u64,
    t: usize,
    k: usize,
    e: usize,
    kdim: usize,
    n: usize,
    nvfp4: bool,
    prefix: &str,
) -> TensorMap {
    let mut r = Rng::new(seed);
    let idx = routing(&mut r, t, k, e);
    let p = permute(&idx, k, e).unwrap_or_else(|_| unreachable!());
    let m = t * k;
    let mut out = TensorMap::new();
    out.insert(
        "expert_offsets".into(),
        Tensor::from_i32(&[e + 1], p.offsets.iter().map(|&o| o as i32).collect()),
    );
    let x = r.normal_vec(m * kdim, 1.0);
    let w = r.normal_vec(e * n * kdim, 1.0 / (kdim as f32).sqrt());
    if nvfp4 {
        let q = quantize(&x, m, kdim, None, Nvfp4Mode::Kernel, SfLayout::Linear)
            .unwrap_or_else(|_| unreachable!());
        out.insert("x_fp4".into(), Tensor::from_u8(&[m, kdim / 2], q.x_fp4));
        out.insert("sf".into(), Tensor::from_u8(&[m, kdim / 16], q.sf));
        out.insert(
            "global_scale".into(),
            Tensor::from_f32(&[1], vec![q.global_scale]),
        );
        let (mut c, mut s, mut g) = (vec![], vec![], vec![]);
        for ex in 0..e {
            let q = quantize(
                &w[ex * n * kdim..(ex + 1) * n * kdim],
                n,
                kdim,
                None,
                Nvfp4Mode::Kernel,
                SfLayout::Linear,
            )
            .unwrap_or_else(|_| unreachable!());
            c.extend(q.x_fp4);
            s.extend(q.sf);
            g.push(q.global_scale);
        }
        out.insert(
            format!("{prefix}_fp4"),
            Tensor::from_u8(&[e, n, kdim / 2], c),
        );
        out.insert(
            format!("{prefix}_sf"),
            Tensor::from_u8(&[e, n, kdim / 16], s),
        );
        out.insert(format!("{prefix}_global_scale"), Tensor::from_f32(&[e], g));
    } else {
        out.insert("x".into(), Tensor::from_f32_as(&[m, kdim], &x, DType::BF16));
        out.insert(
            prefix.into(),
            Tensor::from_f32_as(&[e, n, kdim], &w, DType::BF16),
        );
    }
    out
}

pub fn cases() -> Vec<Box<dyn Case>> {
    let mut v = vec![];
    for (t, k, e) in [(1usize, 22usize, 512usize), (64, 22, 512), (33, 6, 72)] {
        v.push(
            CaseDef::new("moe_permute", move |seed| {
                let mut r = Rng::new(seed);
                let idx = routing(&mut r, t, k, e);
                let mut m = TensorMap::new();
                m.insert(
                    "topk_indices".into(),
                    Tensor::from_i32(&[t, k], idx.iter().map(|&i| i as i32).collect()),
                );
                m
            })
            .var("T", t)
            .var("k", k)
            .param("num_experts", e)
            .model("Nemotron 3 Super MoE routing")
            .cost((t * k * 4 * 4 + e * 8) as u64, 0)
            .boxed(),
        );
    }
    for (t, k, e, kdim, n, fp4) in [
        (4usize, 4usize, 16usize, 64usize, 128usize, true),
        (4, 4, 16, 64, 128, false),
        (9, 3, 7, 48, 80, true),
    ] {
        let m = (t * k) as u64;
        v.push(
            CaseDef::new("moe_expert_gemm1_relu2_nvfp4", move |seed| {
                gemm_inputs(seed, t, k, e, kdim, n, fp4, "w1")
            })
            .var("T", t)
            .var("k", k)
            .var("E", e)
            .var("K", kdim)
            .var("N", n)
            .var("weights", if fp4 { "nvfp4" } else { "bf16" })
            .model("Nemotron 3 Super LatentMoE up-projection (scaled down)")
            .tol("x_fp4", Tolerance::Exact)
            .tol("sf", Tolerance::Exact)
            .cost(
                m * kdim as u64 / 2 + (e * n * kdim) as u64 / 2 + m * n as u64 / 2,
                2 * m * (kdim * n) as u64,
            )
            .boxed(),
        );
        v.push(
            CaseDef::new("moe_expert_gemm2", move |seed| {
                gemm_inputs(seed, t, k, e, n, kdim, fp4, "w2")
            })
            .var("T", t)
            .var("k", k)
            .var("E", e)
            .var("K", n)
            .var("N", kdim)
            .var("weights", if fp4 { "nvfp4" } else { "bf16" })
            .model("Nemotron 3 Super LatentMoE down-projection (scaled down)")
            .tol("out", Tolerance::Nmse { max: 1e-10 })
            .cost(
                m * n as u64 / 2 + (e * n * kdim) as u64 / 2 + m * kdim as u64 * 4,
                2 * m * (kdim * n) as u64,
            )
            .boxed(),
        );
    }
    // The whole block at tiny-golden dimensions (H 256, latent 64, 16 experts, top-4, width 128,
    // shared 192), reference modes of the router's normalisation compared.
    v.push(
        CaseDef::new("latent_moe", |seed| {
            let (t, h, l, e, i, s) = (6usize, 256usize, 64usize, 16usize, 128usize, 192usize);
            let mut r = Rng::new(seed);
            let mut m = TensorMap::new();
            let sc = |n: usize| 1.0 / (n as f32).sqrt();
            m.insert("hidden".into(), r.normal_tensor(&[t, h], 1.0, DType::F32));
            m.insert(
                "gate_weight".into(),
                r.normal_tensor(&[e, h], sc(h), DType::F32),
            );
            m.insert(
                "e_score_correction_bias".into(),
                r.normal_tensor(&[e], 0.1, DType::F32),
            );
            m.insert(
                "fc1_latent_proj".into(),
                r.normal_tensor(&[l, h], sc(h), DType::F32),
            );
            m.insert(
                "fc2_latent_proj".into(),
                r.normal_tensor(&[h, l], sc(l), DType::F32),
            );
            m.insert(
                "up_proj".into(),
                r.normal_tensor(&[e, i, l], sc(l), DType::F32),
            );
            m.insert(
                "down_proj".into(),
                r.normal_tensor(&[e, l, i], sc(i), DType::F32),
            );
            m.insert(
                "shared_up_proj".into(),
                r.normal_tensor(&[s, h], sc(h), DType::F32),
            );
            m.insert(
                "shared_down_proj".into(),
                r.normal_tensor(&[h, s], sc(s), DType::F32),
            );
            m
        })
        .var("T", 6)
        .var("H", 256)
        .var("L", 64)
        .var("E", 16)
        .param("top_k", 4)
        .param("routed_scaling_factor", 5.0)
        .model("Nemotron-H tiny LatentMoE block")
        .tol("topk_indices", Tolerance::Exact)
        .tol(
            "topk_weights",
            Tolerance::Close {
                atol: 1e-6,
                rtol: 1e-6,
            },
        )
        .variant(crate::case::Variant {
            label: "norm_mode=fp64".into(),
            params: vec![("norm_mode".into(), "fp64".into())],
            outputs: vec![
                ("topk_indices".into(), Tolerance::Exact),
                (
                    "out".into(),
                    Tolerance::Close {
                        atol: 1e-5,
                        rtol: 1e-5,
                    },
                ),
            ],
        })
        .cost(
            ((6 * 256 + 16 * 256 + 2 * 64 * 256 + 2 * 16 * 128 * 64 + 2 * 192 * 256) * 4) as u64,
            (2 * 6 * (16 * 256 + 2 * 64 * 256 + 4 * 2 * 128 * 64 + 2 * 192 * 256)) as u64,
        )
        .boxed(),
    );
    v.push(
        CaseDef::new("moe_finalize", |seed| {
            let (t, k, h) = (5usize, 22usize, 96usize);
            let mut r = Rng::new(seed);
            let perm: Vec<i32> = {
                let mut p: Vec<i32> = (0..(t * k) as i32).collect();
                for i in (1..p.len()).rev() {
                    p.swap(i, r.below(i as u64 + 1) as usize);
                }
                p
            };
            let mut m = TensorMap::new();
            m.insert(
                "expert_out".into(),
                r.normal_tensor(&[t * k, h], 1.0, DType::F32),
            );
            m.insert(
                "topk_weights".into(),
                r.uniform_tensor(&[t, k], 0.01, 0.5, DType::F32),
            );
            m.insert("inverse".into(), Tensor::from_i32(&[t, k], perm));
            m
        })
        .var("T", 5)
        .var("k", 22)
        .var("H", 96)
        .cost(
            (5 * 22 * 96 * 4 + 5 * 96 * 4) as u64,
            (2 * 5 * 22 * 96) as u64,
        )
        .boxed(),
    );
    v
}
