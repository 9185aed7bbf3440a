//! Norms, relu2 and their NVFP4 epilogues against hand-computed values and each other.

use proptest::prelude::*;
use reference::ops::fused_add_rmsnorm::fused_add_rmsnorm;
use reference::ops::gated_rmsnorm::{gated_rmsnorm, GateOrder};
use reference::ops::nvfp4_quantize::{dequantize, quantize, Nvfp4Mode, SfLayout};
use reference::ops::relu2::relu2;
use reference::ops::rmsnorm::rmsnorm;
use reference::ops::rmsnorm_nvfp4::{quantize_epilogue, rmsnorm_nvfp4, QuantCfg, RoundBeforeQuant};
use reference::{DType, Tensor, TensorMap};

fn close(what: &str, got: &[f32], want: &[f32], tol: f32) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= tol * (1.0 + w.abs()),
            "{what}[{i}]: got {g}, want {w}"
        );
    }
}

fn silu(v: f32) -> f32 {
    v / (1.0 + (-v).exp())
}

#[test]
fn rmsnorm_hand_computed() {
    // Row [3, 4]: mean(x^2) = 12.5; rstd = 1/sqrt(12.5 + eps).
    let eps = 1e-5f32;
    let r = 1.0 / (12.5f32 + eps).sqrt();
    let out = rmsnorm(&[3.0, 4.0, -1.0, 1.0], 2, &[2.0, 0.5], eps).unwrap();
    let r2 = 1.0 / (1.0f32 + eps).sqrt();
    close(
        "out",
        &out,
        &[3.0 * r * 2.0, 4.0 * r * 0.5, -2.0 * r2, 0.5 * r2],
        1e-6,
    );
}

#[test]
fn fused_add_hand_computed() {
    let o = fused_add_rmsnorm(&[1.0, 2.0], &[2.0, 2.0], 2, &[1.0, -1.0], 0.0).unwrap();
    close("residual", &o.residual, &[3.0, 4.0], 0.0);
    close(
        "out",
        &o.out,
        &[3.0 / 12.5f32.sqrt(), -4.0 / 12.5f32.sqrt()],
        1e-6,
    );
}

#[test]
fn gated_hand_computed_both_orders() {
    let (x, z, w) = (
        [1.0f32, -2.0, 0.5, 3.0],
        [0.5f32, 1.0, -1.0, 2.0],
        [1.0f32, 2.0, 0.5, -1.0],
    );
    // Two groups of 2, gate then norm.
    let g: Vec<f32> = x.iter().zip(&z).map(|(&a, &b)| a * silu(b)).collect();
    let mut want = vec![0f32; 4];
    for k in 0..2 {
        let s = &g[2 * k..2 * k + 2];
        let r = 1.0 / ((s[0] * s[0] + s[1] * s[1]) / 2.0 + 1e-5).sqrt();
        want[2 * k] = s[0] * r * w[2 * k];
        want[2 * k + 1] = s[1] * r * w[2 * k + 1];
    }
    let got = gated_rmsnorm(&x, &z, 4, &w, 2, GateOrder::GateThenNorm, 1e-5).unwrap();
    close("gate then norm", &got, &want, 1e-6);
    // One group, norm then gate.
    let r = 1.0 / (x.iter().map(|v| v * v).sum::<f32>() / 4.0 + 1e-5).sqrt();
    let want: Vec<f32> = (0..4).map(|i| x[i] * r * w[i] * silu(z[i])).collect();
    let got = gated_rmsnorm(&x, &z, 4, &w, 4, GateOrder::NormThenGate, 1e-5).unwrap();
    close("norm then gate", &got, &want, 1e-6);
}

#[test]
fn relu2_values() {
    assert_eq!(relu2(&[-3.0, -0.0, 0.5, 3.0]), vec![0.0, 0.0, 0.25, 9.0]);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// residual output == x + residual exactly in f32; out == rmsnorm(x + residual).
    #[test]
    fn fused_add_equals_add_then_norm(
        rows in 1usize..4, hidden in 1usize..40,
        x in prop::collection::vec(-4.0f32..4.0, 160),
        r in prop::collection::vec(-4.0f32..4.0, 160),
        w in prop::collection::vec(-2.0f32..2.0, 40),
    ) {
        let n = rows * hidden;
        let o = fused_add_rmsnorm(&x[..n], &r[..n], hidden, &w[..hidden], 1e-5).unwrap();
        let sum: Vec<f32> = x[..n].iter().zip(&r[..n]).map(|(a, b)| a + b).collect();
        prop_assert_eq!(&o.residual, &sum);
        prop_assert_eq!(o.out, rmsnorm(&sum, hidden, &w[..hidden], 1e-5).unwrap());
    }

    /// Gated norm with z large (silu(z) ~ z) and one group == rmsnorm of x*z; the per-row
    /// result is invariant to scaling x (the norm removes it).
    #[test]
    fn gated_scale_invariant(
        groups in 1usize..4, gs in 1usize..9,
        x in prop::collection::vec(-4.0f32..4.0, 36),
        z in prop::collection::vec(-3.0f32..3.0, 36),
        w in prop::collection::vec(-2.0f32..2.0, 36),
    ) {
        let d = groups * gs;
        let a = gated_rmsnorm(&x[..d], &z[..d], d, &w[..d], gs, GateOrder::GateThenNorm, 0.0).unwrap();
        let x2: Vec<f32> = x[..d].iter().map(|v| v * 4.0).collect();
        let b = gated_rmsnorm(&x2, &z[..d], d, &w[..d], gs, GateOrder::GateThenNorm, 0.0).unwrap();
        for (p, q) in a.iter().zip(&b) {
            prop_assert!((p - q).abs() <= 1e-4 * (1.0 + q.abs()), "{} {}", p, q);
        }
    }
}

fn cfg(round: RoundBeforeQuant) -> QuantCfg {
    QuantCfg {
        global_scale: None,
        round,
        mode: Nvfp4Mode::Kernel,
        layout: SfLayout::Linear,
    }
}

#[test]
fn nvfp4_epilogue_equals_quantizer_on_rounded_values() {
    let x: Vec<f32> = (0..64)
        .map(|i| ((i * 37 % 23) as f32 - 11.0) * 0.173)
        .collect();
    let w: Vec<f32> = (0..32).map(|i| 0.5 + i as f32 * 0.031).collect();
    let y = rmsnorm(&x, 32, &w, 1e-5).unwrap();
    let yb: Vec<f32> = y
        .iter()
        .map(|&v| Tensor::from_f32_as(&[1], &[v], DType::BF16).to_f32_vec()[0])
        .collect();
    let q = rmsnorm_nvfp4(&x, 32, &w, 1e-5, &cfg(RoundBeforeQuant::Bf16)).unwrap();
    let want = quantize(&yb, 2, 32, None, Nvfp4Mode::Kernel, SfLayout::Linear).unwrap();
    assert_eq!(q, want);
    let q = rmsnorm_nvfp4(&x, 32, &w, 1e-5, &cfg(RoundBeforeQuant::None)).unwrap();
    assert_eq!(
        q,
        quantize(&y, 2, 32, None, Nvfp4Mode::Kernel, SfLayout::Linear).unwrap()
    );
    // Dequantized values follow y within the NVFP4 step (1/4 of the block max, relative).
    let back = dequantize(&q, SfLayout::Linear);
    for (blk, (a, b)) in back.chunks(16).zip(y.chunks(16)).enumerate() {
        let m = b.iter().fold(0f32, |m, v| m.max(v.abs()));
        for (u, v) in a.iter().zip(b) {
            assert!((u - v).abs() <= 0.26 * m, "block {blk}: {u} vs {v}");
        }
    }
    let r = quantize_epilogue(vec![1.0; 16], 1, 16, &cfg(RoundBeforeQuant::Bf16)).unwrap();
    assert_eq!(r.global_scale, 448.0 * 6.0);
}

fn map(items: Vec<(&str, Tensor)>) -> TensorMap {
    items.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

#[test]
fn ops_run_with_dtypes_and_validate() {
    let x: Vec<f32> = (0..64).map(|i| (i as f32 * 0.37).sin() * 3.0).collect();
    let r: Vec<f32> = (0..64).map(|i| (i as f32 * 0.11).cos()).collect();
    let w: Vec<f32> = (0..32).map(|i| 1.0 + i as f32 * 0.01).collect();
    let m = map(vec![
        ("x", Tensor::from_f32_as(&[2, 32], &x, DType::BF16)),
        ("residual", Tensor::from_f32_as(&[2, 32], &r, DType::BF16)),
        ("weight", Tensor::from_f32(&[32], w.clone())),
    ]);
    let op = reference::ops::find("fused_add_rmsnorm").unwrap();
    let o = op.call(&m, &[]).unwrap();
    assert_eq!(o["out"].dtype(), DType::BF16);
    assert_eq!(o["residual"].dtype(), DType::BF16);
    let q = reference::ops::find("fused_add_rmsnorm_nvfp4").unwrap();
    let o = q
        .call(&m, &[("layout".into(), "swizzled128x4".into())])
        .unwrap();
    assert_eq!(o["x_fp4"].shape, vec![2, 16]);
    assert_eq!(o["sf"].shape, vec![128, 4]);
    assert_eq!(o["residual"].shape, vec![2, 32]);
    let g = reference::ops::find("gated_rmsnorm_nvfp4").unwrap();
    let mut mg = m.clone();
    let z = mg.remove("residual").unwrap();
    mg.insert("z".into(), z);
    let e = g
        .call(&mg, &[("group_size".into(), "5".into())])
        .unwrap_err()
        .to_string();
    assert!(e.contains("group_size"), "{e}");
    assert!(g.call(&mg, &[("group_size".into(), "16".into())]).is_ok());
    let rq = reference::ops::find("relu2_nvfp4").unwrap();
    let bad = map(vec![("x", Tensor::from_f32(&[2, 24], vec![1.0; 48]))]);
    let e = rq.call(&bad, &[]).unwrap_err().to_string();
    assert!(e.contains("multiple of 16"), "{e}");
    let rn = reference::ops::find("rmsnorm").unwrap();
    let e = rn
        .call(
            &map(vec![
                ("x", Tensor::from_f32(&[2, 32], x.clone())),
                ("weight", Tensor::from_f32(&[31], vec![1.0; 31])),
            ]),
            &[],
        )
        .unwrap_err()
        .to_string();
    assert!(e.contains("'weight'"), "{e}");
}
