//! noaux_tc_router: random shapes (odd E, grouped, every norm/sigmoid mode, bf16 inputs, ties
//! and NaNs) through every kernel version, bit-exact indices (in order) and weights.

mod common;

use common::{diff, exact, sets};
use compare::gen::Rng;
use proptest::prelude::*;
use reference::{DType, Tensor, TensorMap};

fn inputs(t: usize, e: usize, seed: u64, dt: DType, ties: bool, nan: bool) -> TensorMap {
    let mut r = Rng::new(seed);
    let mut l = r.normal_vec(t * e, 2.0);
    if ties {
        // Coarse values: many exactly equal keys (ties must go to the lowest index).
        for v in &mut l {
            *v = (*v * 2.0).round() / 2.0;
        }
    }
    if nan && t * e > 3 {
        l[t * e / 2] = f32::NAN;
        l[1] = f32::INFINITY;
        l[2] = f32::NEG_INFINITY;
    }
    let b: Vec<f32> = if ties {
        vec![0.0; e]
    } else {
        r.normal_vec(e, 0.1)
    };
    let mut m = TensorMap::new();
    m.insert("logits".into(), Tensor::from_f32_as(&[t, e], &l, dt));
    m.insert("bias".into(), Tensor::from_f32_as(&[e], &b, dt));
    m
}

fn run_all(m: &TensorMap, s: &[(String, String)], name: &str) -> Result<(), String> {
    let op = gpu::ops::find("noaux_tc_router").map_err(|e| e.to_string())?;
    let def = reference::ops::find("noaux_tc_router").map_err(|e| e.to_string())?;
    let p = reference::op::Params::resolve(&def, s).map_err(|e| e.to_string())?;
    for &v in op.versions {
        if (op.applicable)(v, m, &p).is_some() {
            continue;
        }
        diff("noaux_tc_router", v, name, m, s, &exact)?;
    }
    Ok(())
}

#[test]
#[ignore = "gpu"]
fn super_shape_every_token_count() {
    for t in [1usize, 7, 64, 1000, 4096] {
        let m = inputs(t, 512, t as u64, DType::F32, false, false);
        let s = sets(&[
            ("top_k", "22".into()),
            ("routed_scaling_factor", "5.0".into()),
        ]);
        run_all(&m, &s, &format!("T={t},E=512,k=22")).unwrap_or_else(|e| panic!("{e}"));
    }
}

#[test]
#[ignore = "gpu"]
fn ties_nans_and_modes() {
    for (i, (norm, sig)) in [
        ("fp64", "tanh"),
        ("fp32_divide_then_multiply", "exp"),
        ("fp32_no_eps", "tanh"),
    ]
    .iter()
    .enumerate()
    {
        for (ties, nan) in [(true, false), (false, true)] {
            let m = inputs(33, 256, 100 + i as u64, DType::BF16, ties, nan);
            let s = sets(&[
                ("top_k", "8".into()),
                ("norm_mode", norm.to_string()),
                ("sigmoid", sig.to_string()),
                ("routed_scaling_factor", "2.5".into()),
            ]);
            run_all(&m, &s, &format!("ties={ties},nan={nan},{norm},{sig}"))
                .unwrap_or_else(|e| panic!("{e}"));
        }
    }
    let m = inputs(5, 64, 9, DType::F16, false, false);
    let s = sets(&[("top_k", "4".into()), ("norm_topk_prob", "false".into())]);
    run_all(&m, &s, "no-norm").unwrap_or_else(|e| panic!("{e}"));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    #[ignore = "gpu"]
    fn random_shapes(t in 1usize..200, e_sel in 0usize..8, k_frac in 0.0f64..1.0, seed in any::<u64>(),
                     grouped in any::<bool>(), bf16 in any::<bool>()) {
        let e = [32usize, 64, 96, 160, 256, 512, 33, 257][e_sel];
        let (n_group, topk_group) = if grouped && e.is_multiple_of(8) { (8usize, 3usize) } else { (1, 1) };
        let max_k = if n_group > 1 { topk_group * (e / n_group) } else { e }.min(40);
        let k = 1 + ((max_k - 1) as f64 * k_frac) as usize;
        let m = inputs(t, e, seed, if bf16 { DType::BF16 } else { DType::F32 }, seed % 5 == 0, seed % 7 == 0);
        let s = sets(&[("top_k", k.to_string()), ("n_group", n_group.to_string()),
                       ("topk_group", topk_group.to_string()), ("routed_scaling_factor", "5.0".into())]);
        let name = format!("T={t},E={e},k={k},groups={n_group}/{topk_group}");
        if let Err(msg) = run_all(&m, &s, &name) {
            prop_assert!(false, "{}", msg);
        }
    }
}
