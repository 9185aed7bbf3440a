//! noaux_tc_router: ordering, ties, NaN policy, normalisation, permutation invariance, grouped
//! routing, validation errors (through the op and the pure function).

use proptest::prelude::*;
use reference::ops::noaux_tc_router::{
    order_bits, packed_key, route, sigmoid, GroupMask, NormMode, RouterConfig, SigmoidMode,
};
use reference::{ops, DType, Tensor, TensorMap};

fn cfg(top_k: usize) -> RouterConfig {
    RouterConfig {
        top_k,
        n_group: 1,
        topk_group: 1,
        routed_scaling_factor: 1.0,
        norm_topk_prob: true,
        norm_mode: NormMode::Fp64,
        sigmoid: SigmoidMode::Tanh,
        group_mask: GroupMask::NegInf,
    }
}

fn lcg(seed: u64, n: usize, scale: f32) -> Vec<f32> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 2.0 * scale
        })
        .collect()
}

/// Independent model: stable sort by f64 key descending (ties keep the lower index first).
fn model_topk(logits: &[f32], bias: &[f32], k: usize) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..logits.len()).collect();
    // f32 sum, as the reference (and kernels) compute the key.
    let key32 = |e: usize| (sigmoid(logits[e], SigmoidMode::Tanh) + bias[e]) as f64;
    idx.sort_by(|&a, &b| key32(b).partial_cmp(&key32(a)).unwrap());
    idx.truncate(k);
    idx
}

fn call(sets: &[(&str, &str)], logits: Tensor, bias: Tensor) -> Result<TensorMap, String> {
    let mut m = TensorMap::new();
    m.insert("logits".into(), logits);
    m.insert("bias".into(), bias);
    let sets: Vec<(String, String)> = sets
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    ops::find("noaux_tc_router")
        .unwrap()
        .call(&m, &sets)
        .map_err(|e| e.to_string())
}

#[test]
fn matches_independent_sort_at_super_shape() {
    let (t, e) = (4, 512);
    let logits = lcg(1, t * e, 3.0);
    let bias = lcg(2, e, 0.5);
    let mut c = cfg(22);
    c.routed_scaling_factor = 5.0;
    let r = route(&logits, &bias, t, e, &c).unwrap();
    for tok in 0..t {
        let want = model_topk(&logits[tok * e..(tok + 1) * e], &bias, 22);
        let got: Vec<usize> = r.topk_indices[tok * 22..(tok + 1) * 22]
            .iter()
            .map(|&i| i as usize)
            .collect();
        assert_eq!(got, want, "token {tok}");
        let s: f32 = r.topk_weights[tok * 22..(tok + 1) * 22].iter().sum();
        assert!((s - 5.0).abs() < 5e-5, "sum {s}");
    }
}

#[test]
fn ties_go_to_the_lowest_index_and_keep_order() {
    // Every key equal: the winners are 0..k in order.
    let e = 12;
    let logits = vec![0.3f32; e];
    let bias = vec![0.125f32; e];
    let r = route(&logits, &bias, 1, e, &cfg(5)).unwrap();
    assert_eq!(r.topk_indices, vec![0, 1, 2, 3, 4]);
    // Two tied maxima at 7 and 3, then 9: order 3, 7, 9.
    let mut logits = vec![-2.0f32; e];
    logits[7] = 1.5;
    logits[3] = 1.5;
    logits[9] = 1.0;
    let bias = vec![0.0f32; e];
    let r = route(&logits, &bias, 1, e, &cfg(3)).unwrap();
    assert_eq!(r.topk_indices, vec![3, 7, 9]);
}

#[test]
fn packed_key_order() {
    // -0 < +0; +inf < positive NaN; larger value wins; equal value: lower index wins.
    assert!(packed_key(-0.0, 0) < packed_key(0.0, 0));
    assert!(packed_key(f32::INFINITY, 0) < packed_key(f32::NAN, 5));
    assert!(packed_key(-f32::NAN, 5) > packed_key(f32::INFINITY, 0)); // canonicalised to +NaN
    assert!(packed_key(1.0, 3) > packed_key(1.0, 4));
    assert!(packed_key(1.0, 65535) > packed_key(0.99999994, 0));
    assert!(packed_key(-1.0, 0) < packed_key(-0.5, 9));
    assert!(order_bits(-f32::INFINITY) < order_bits(-1e30));
    assert!(order_bits(f32::MIN_POSITIVE) > order_bits(0.0));
}

#[test]
fn nan_policy() {
    let e = 8;
    let mut logits: Vec<f32> = (0..e).map(|i| i as f32 * 0.25).collect();
    let mut bias = vec![0.0f32; e];
    // NaN bias on expert 1: it wins (positive NaN key beats everything), weights stay finite.
    bias[1] = f32::NAN;
    let r = route(&logits, &bias, 1, e, &cfg(3)).unwrap();
    assert_eq!(r.topk_indices, vec![1, 7, 6]);
    assert!(r.topk_weights.iter().all(|w| w.is_finite()));
    // +inf bias on expert 2 ranks below the NaN but above finite keys.
    bias[2] = f32::INFINITY;
    let r = route(&logits, &bias, 1, e, &cfg(3)).unwrap();
    assert_eq!(r.topk_indices, vec![1, 2, 7]);
    // A NaN logit: selected first, and every weight of the token is NaN.
    bias = vec![0.0; e];
    logits[4] = f32::NAN;
    let r = route(&logits, &bias, 1, e, &cfg(3)).unwrap();
    assert_eq!(r.topk_indices, vec![4, 7, 6]);
    assert!(r.topk_weights.iter().all(|w| w.is_nan()));
    // -NaN (sign bit set) is canonicalised the same way.
    logits[4] = -f32::NAN;
    let r = route(&logits, &bias, 1, e, &cfg(3)).unwrap();
    assert_eq!(r.topk_indices[0], 4);
    // Infinite logits are ordinary: sigmoid(+inf) = 1, sigmoid(-inf) = 0.
    logits[4] = f32::INFINITY;
    logits[0] = f32::NEG_INFINITY;
    let r = route(&logits, &bias, 1, e, &cfg(8)).unwrap();
    assert_eq!(r.topk_indices[0], 4);
    assert_eq!(r.topk_indices[7], 0);
    assert_eq!(r.topk_weights[7], 0.0);
    assert!(r.topk_weights.iter().all(|w| w.is_finite()));
}

#[test]
fn sigmoid_formulas_differ_by_at_most_an_ulp_of_one_half() {
    let mut differ = 0;
    for i in 0..20000 {
        let x = (i as f32 - 10000.0) * 1.3e-3;
        let a = sigmoid(x, SigmoidMode::Tanh);
        let b = sigmoid(x, SigmoidMode::Exp);
        // The tanh form rounds near 0.5 (absolute error <= ulp(0.5)); for x << 0 that is many
        // ulps of the small result, for x >= 0 at most one.
        assert!((a - b).abs() <= 6e-8, "x {x}: {a} {b}");
        if x >= 0.0 {
            assert!(
                (a.to_bits() as i64 - b.to_bits() as i64).abs() <= 1,
                "x {x}: {a} {b}"
            );
        }
        differ += (a != b) as usize;
    }
    assert!(
        differ > 0,
        "the two formulas never differ: the mode would be pointless"
    );
    assert_eq!(sigmoid(0.0, SigmoidMode::Tanh), 0.5);
}

#[test]
fn norm_modes_and_no_norm() {
    let (t, e) = (3, 64);
    let logits = lcg(5, t * e, 2.0);
    let bias = lcg(6, e, 0.2);
    let mut c = cfg(6);
    c.routed_scaling_factor = 2.5;
    let base = route(&logits, &bias, t, e, &c).unwrap();
    for m in [NormMode::Fp32DivideThenMultiply, NormMode::Fp32NoEps] {
        c.norm_mode = m;
        let r = route(&logits, &bias, t, e, &c).unwrap();
        assert_eq!(r.topk_indices, base.topk_indices);
        for (a, b) in r.topk_weights.iter().zip(&base.topk_weights) {
            assert!((a - b).abs() <= 1e-6 * b.abs(), "{m:?}: {a} vs {b}");
        }
    }
    c.norm_topk_prob = false;
    c.norm_mode = NormMode::Fp64;
    let r = route(&logits, &bias, t, e, &c).unwrap();
    for (i, &ix) in r.topk_indices.iter().enumerate() {
        let tok = i / 6;
        let s = sigmoid(logits[tok * e + ix as usize], SigmoidMode::Tanh);
        assert_eq!(r.topk_weights[i], (s as f64 * 2.5) as f32);
    }
}

#[test]
fn grouped_deepseek_shape() {
    let (t, e, ng, tg, k) = (16, 256, 8, 4, 8);
    let logits = lcg(11, t * e, 2.0);
    let bias = lcg(12, e, 0.3);
    let c = RouterConfig {
        top_k: k,
        n_group: ng,
        topk_group: tg,
        routed_scaling_factor: 2.5,
        ..cfg(k)
    };
    let r = route(&logits, &bias, t, e, &c).unwrap();
    let per = e / ng;
    for tok in 0..t {
        let row = &logits[tok * e..(tok + 1) * e];
        let key: Vec<f32> = (0..e)
            .map(|i| sigmoid(row[i], SigmoidMode::Tanh) + bias[i])
            .collect();
        // Independent group scores and kept groups.
        let mut gs: Vec<(f32, usize)> = (0..ng)
            .map(|g| {
                let mut v: Vec<f32> = key[g * per..(g + 1) * per].to_vec();
                v.sort_by(|a, b| b.partial_cmp(a).unwrap());
                (v[0] + v[1], g)
            })
            .collect();
        gs.sort_by(|a, b| b.0.partial_cmp(&a.0).unwrap().then(a.1.cmp(&b.1)));
        let kept: Vec<usize> = gs[..tg].iter().map(|x| x.1).collect();
        let got = &r.topk_indices[tok * k..(tok + 1) * k];
        let mut groups: Vec<usize> = got.iter().map(|&i| i as usize / per).collect();
        assert!(groups.iter().all(|g| kept.contains(g)), "token {tok}");
        groups.dedup();
        // Top-k of the kept experts.
        let mut cand: Vec<usize> = kept.iter().flat_map(|&g| g * per..(g + 1) * per).collect();
        cand.sort_by(|&a, &b| key[b].partial_cmp(&key[a]).unwrap().then(a.cmp(&b)));
        let want: Vec<i32> = cand[..k].iter().map(|&i| i as i32).collect();
        assert_eq!(got, &want[..], "token {tok}");
    }
    // The grouped result can differ from ungrouped top-k (otherwise the test proves nothing).
    let flat = route(&logits, &bias, t, e, &cfg(k)).unwrap();
    assert_ne!(flat.topk_indices, r.topk_indices);
}

#[test]
fn op_accepts_bf16_and_validates() {
    let e = 16;
    let logits = Tensor::from_f32_as(&[2, e], &lcg(3, 2 * e, 1.0), DType::BF16);
    let bias = Tensor::from_f32_as(&[e], &lcg(4, e, 0.1), DType::BF16);
    let out = call(&[("top_k", "4")], logits.clone(), bias.clone()).unwrap();
    assert_eq!(out["topk_indices"].shape, vec![2, 4]);
    assert_eq!(out["topk_indices"].dtype(), DType::I32);
    assert_eq!(out["topk_weights"].dtype(), DType::F32);

    let bad_bias = Tensor::from_f32(&[8], vec![0.0; 8]);
    let err = call(&[("top_k", "4")], logits.clone(), bad_bias).unwrap_err();
    assert!(
        err.contains("noaux_tc_router: 'bias' has 8 entries but 'logits' has 16 experts"),
        "{err}"
    );
    let err = call(&[("top_k", "17")], logits.clone(), bias.clone()).unwrap_err();
    assert!(err.contains("top_k = 17"), "{err}");
    let err = call(
        &[("top_k", "2"), ("n_group", "3")],
        logits.clone(),
        bias.clone(),
    )
    .unwrap_err();
    assert!(err.contains("n_group = 3 must divide"), "{err}");
    let err = call(
        &[("top_k", "2"), ("n_group", "4"), ("topk_group", "5")],
        logits.clone(),
        bias.clone(),
    )
    .unwrap_err();
    assert!(err.contains("topk_group = 5"), "{err}");
    let err = call(
        &[("top_k", "9"), ("n_group", "4"), ("topk_group", "2")],
        logits.clone(),
        bias.clone(),
    )
    .unwrap_err();
    assert!(err.contains("exceeds"), "{err}");
    let err = call(&[], logits, bias).unwrap_err();
    assert!(err.contains("top_k"), "{err}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn weights_sum_to_the_scaling_factor(
        seed in any::<u64>(), e in 8usize..96, k in 1usize..8, rsf in 0.5f64..8.0
    ) {
        let logits = lcg(seed, 2 * e, 4.0);
        let bias = lcg(seed ^ 1, e, 0.5);
        let c = RouterConfig { routed_scaling_factor: rsf, ..cfg(k.min(e)) };
        let r = route(&logits, &bias, 2, e, &c).unwrap();
        for tok in 0..2 {
            let s: f64 = r.topk_weights[tok * c.top_k..(tok + 1) * c.top_k].iter().map(|&w| w as f64).sum();
            prop_assert!((s - rsf).abs() <= 1e-6 * rsf * c.top_k as f64, "sum {} vs {}", s, rsf);
        }
    }

    #[test]
    fn selection_follows_a_permutation_of_experts(seed in any::<u64>(), e in 8usize..80, k in 1usize..8) {
        let k = k.min(e);
        let logits = lcg(seed, e, 3.0);
        let bias = lcg(seed ^ 7, e, 0.3);
        let keys: Vec<u32> = (0..e).map(|i| (sigmoid(logits[i], SigmoidMode::Tanh) + bias[i]).to_bits()).collect();
        let mut uniq = keys.clone();
        uniq.sort();
        uniq.dedup();
        prop_assume!(uniq.len() == e); // no ties
        // perm[i] = new position of expert i.
        let mut perm: Vec<usize> = (0..e).collect();
        let mut s = seed;
        for i in (1..e).rev() {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1);
            perm.swap(i, (s >> 33) as usize % (i + 1));
        }
        let mut pl = vec![0f32; e];
        let mut pb = vec![0f32; e];
        for i in 0..e {
            pl[perm[i]] = logits[i];
            pb[perm[i]] = bias[i];
        }
        let a = route(&logits, &bias, 1, e, &cfg(k)).unwrap();
        let b = route(&pl, &pb, 1, e, &cfg(k)).unwrap();
        let mapped: Vec<i32> = a.topk_indices.iter().map(|&i| perm[i as usize] as i32).collect();
        prop_assert_eq!(mapped, b.topk_indices);
        prop_assert_eq!(a.topk_weights, b.topk_weights);
    }

    #[test]
    fn grouped_routing_uses_at_most_topk_group_groups(
        seed in any::<u64>(), ng in 2usize..9, per in 2usize..12, tg_frac in 0.0f64..1.0, k in 1usize..6
    ) {
        let e = ng * per;
        let tg = 1 + ((ng - 1) as f64 * tg_frac) as usize;
        let k = k.min(tg * per);
        let logits = lcg(seed, e, 2.0);
        let bias = lcg(seed ^ 3, e, 0.2);
        let c = RouterConfig { n_group: ng, topk_group: tg, ..cfg(k) };
        let r = route(&logits, &bias, 1, e, &c).unwrap();
        let mut groups: Vec<usize> = r.topk_indices.iter().map(|&i| i as usize / per).collect();
        groups.sort();
        groups.dedup();
        prop_assert!(groups.len() <= tg);
        // Sorted by key descending.
        let key = |i: i32| sigmoid(logits[i as usize], SigmoidMode::Tanh) + bias[i as usize];
        for w in r.topk_indices.windows(2) {
            prop_assert!(key(w[0]) >= key(w[1]));
        }
    }
}

/// transformers' grouped noaux_tc (masked_fill(0.0) for dropped groups), written independently:
/// returns each token's chosen set and its weights by expert.
fn transformers_grouped(
    logits: &[f32],
    bias: &[f32],
    t: usize,
    e: usize,
    ng: usize,
    tg: usize,
    k: usize,
    rsf: f32,
) -> Vec<Vec<(usize, f32)>> {
    let per = e / ng;
    (0..t)
        .map(|tok| {
            let s: Vec<f32> = logits[tok * e..(tok + 1) * e]
                .iter()
                .map(|&x| 1.0 / (1.0 + (-x).exp()))
                .collect();
            let sfc: Vec<f32> = s.iter().zip(bias).map(|(a, b)| a + b).collect();
            let mut gs: Vec<(f32, usize)> = (0..ng)
                .map(|g| {
                    let mut v: Vec<f32> = sfc[g * per..(g + 1) * per].to_vec();
                    v.sort_by(|a, b| b.total_cmp(a));
                    (v[0] + v[1], g)
                })
                .collect();
            gs.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
            let kept: Vec<usize> = gs[..tg].iter().map(|x| x.1).collect();
            let mut masked: Vec<(f32, usize)> = (0..e)
                .map(|x| {
                    (
                        if kept.contains(&(x / per)) {
                            sfc[x]
                        } else {
                            0.0
                        },
                        x,
                    )
                })
                .collect();
            masked.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
            let chosen: Vec<usize> = masked[..k].iter().map(|x| x.1).collect();
            let sum: f32 = chosen.iter().map(|&x| s[x]).sum();
            chosen
                .iter()
                .map(|&x| (x, s[x] / (sum + 1e-20) * rsf))
                .collect()
        })
        .collect()
}

#[test]
fn group_mask_zero_matches_transformers_when_kept_keys_are_negative() {
    // 4 groups of 8; strongly negative biases make most kept-group keys negative, so
    // transformers' 0.0 fill lets dropped-group experts win; neg_inf never picks them.
    let (t, e, ng, tg, k) = (12usize, 32usize, 4usize, 2usize, 6usize);
    let logits = lcg(31, t * e, 3.0);
    let bias: Vec<f32> = lcg(32, e, 0.2).iter().map(|b| b - 0.9).collect();
    let want = transformers_grouped(&logits, &bias, t, e, ng, tg, k, 2.0);
    let c = RouterConfig {
        top_k: k,
        n_group: ng,
        topk_group: tg,
        routed_scaling_factor: 2.0,
        norm_mode: NormMode::Fp32DivideThenMultiply,
        sigmoid: SigmoidMode::Exp,
        group_mask: GroupMask::Zero,
        ..cfg(k)
    };
    let r = route(&logits, &bias, t, e, &c).unwrap();
    let mut dropped_group_wins = 0;
    for tok in 0..t {
        let mut got: Vec<(usize, f32)> = (0..k)
            .map(|j| {
                (
                    r.topk_indices[tok * k + j] as usize,
                    r.topk_weights[tok * k + j],
                )
            })
            .collect();
        got.sort_by_key(|x| x.0);
        let mut w = want[tok].clone();
        w.sort_by_key(|x| x.0);
        assert_eq!(
            got.iter().map(|x| x.0).collect::<Vec<_>>(),
            w.iter().map(|x| x.0).collect::<Vec<_>>(),
            "token {tok}"
        );
        for (a, b) in got.iter().zip(&w) {
            assert!(
                (a.1 - b.1).abs() <= 1e-6 * b.1.abs().max(1.0),
                "token {tok}: {a:?} vs {b:?}"
            );
        }
        // neg_inf mode only ever picks kept-group experts.
        let strict = route(
            &logits,
            &bias,
            t,
            e,
            &RouterConfig {
                group_mask: GroupMask::NegInf,
                ..c
            },
        )
        .unwrap();
        let strict_set: Vec<i32> = strict.topk_indices[tok * k..(tok + 1) * k].to_vec();
        if got.iter().any(|x| !strict_set.contains(&(x.0 as i32))) {
            dropped_group_wins += 1;
        }
    }
    assert!(
        dropped_group_wins > 0,
        "the case must exercise the difference between the modes"
    );
}
