//! LatentMoE expert-layer ops: permute -> gemm1 (+relu^2 +NVFP4) -> gemm2 -> finalize against a
//! direct per-token computation.

use reference::ops::nvfp4_quantize::{dequantize, quantize, Nvfp4, Nvfp4Mode, SfLayout};
use reference::ops::{find, moe_permute::permute};
use reference::{Tensor, TensorMap};

struct Lcg(u64);
impl Lcg {
    fn f(&mut self) -> f32 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
    fn v(&mut self, n: usize, s: f32) -> Vec<f32> {
        (0..n).map(|_| self.f() * s).collect()
    }
}

fn call(op: &str, items: Vec<(&str, Tensor)>, sets: &[(&str, &str)]) -> TensorMap {
    let m: TensorMap = items.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
    let s: Vec<(String, String)> = sets
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    find(op)
        .unwrap()
        .call(&m, &s)
        .unwrap_or_else(|e| panic!("{op}: {e}"))
}

/// Direct computation: for each token and slot, relu(x W1_e^T)^2 W2_e^T, weighted.
fn direct(
    x: &[f32],
    t: usize,
    h: usize,
    idx: &[i64],
    w: &[f32],
    k: usize,
    w1: &[f32],
    n: usize,
    w2: &[f32],
) -> Vec<f32> {
    let mut out = vec![0.0f32; t * h];
    for tok in 0..t {
        for j in 0..k {
            let e = idx[tok * k + j] as usize;
            let mut mid = vec![0.0f32; n];
            for (c, m) in mid.iter_mut().enumerate() {
                let a: f32 = (0..h)
                    .map(|i| x[tok * h + i] * w1[(e * n + c) * h + i])
                    .sum();
                *m = a.max(0.0).powi(2);
            }
            for o in 0..h {
                let b: f32 = (0..n).map(|c| mid[c] * w2[(e * h + o) * n + c]).sum();
                out[tok * h + o] += w[tok * k + j] * b;
            }
        }
    }
    out
}

#[test]
fn float_chain_matches_direct_computation_including_empty_experts() {
    let (t, k, e, h, n) = (7usize, 3usize, 6usize, 32usize, 48usize);
    let mut r = Lcg(3);
    let x = r.v(t * h, 1.0);
    // Expert 5 never chosen; expert 0 chosen often.
    let idx: Vec<i64> = (0..t * k).map(|i| [0, 2, 1, 0, 3, 4, 0][i % 7]).collect();
    let wts = r
        .v(t * k, 1.0)
        .iter()
        .map(|v| v.abs() + 0.1)
        .collect::<Vec<_>>();
    let w1 = r.v(e * n * h, 0.3);
    let w2 = r.v(e * h * n, 0.3);
    let perm = permute(&idx, k, e).unwrap();
    assert_eq!(perm.counts[5], 0);
    let xp: Vec<f32> = perm
        .token
        .iter()
        .flat_map(|&tk| x[tk * h..(tk + 1) * h].to_vec())
        .collect();
    let offs = Tensor::from_i32(&[e + 1], perm.offsets.iter().map(|&o| o as i32).collect());
    let g1 = call(
        "moe_expert_gemm1_relu2_nvfp4",
        vec![
            ("x", Tensor::from_f32(&[t * k, h], xp)),
            ("w1", Tensor::from_f32(&[e, n, h], w1.clone())),
            ("expert_offsets", offs.clone()),
        ],
        &[("emit_h", "true")],
    );
    assert_eq!(g1["x_fp4"].shape, vec![t * k, n / 2]);
    // The quantized h dequantizes to within half an E2M1 step x block scale of h.
    let q = Nvfp4 {
        x_fp4: g1["x_fp4"].as_u8().unwrap().to_vec(),
        sf: g1["sf"].as_u8().unwrap().to_vec(),
        global_scale: g1["global_scale"].to_f32_vec()[0],
        rows: t * k,
        cols: n,
    };
    let hq = dequantize(&q, SfLayout::Linear);
    let hh = g1["h"].to_f32_vec();
    for (i, (a, b)) in hh.iter().zip(&hq).enumerate() {
        let blk_max = hh[(i / 16) * 16..(i / 16) * 16 + 16]
            .iter()
            .fold(0.0f32, |m, v| m.max(v.abs()));
        assert!(
            (a - b).abs() <= blk_max / 6.0 * 1.0 * 1.07 + 1e-6,
            "elem {i}: h {a} deq {b}"
        );
    }
    let g2 = call(
        "moe_expert_gemm2",
        vec![
            ("x_fp4", g1["x_fp4"].clone()),
            ("sf", g1["sf"].clone()),
            ("global_scale", g1["global_scale"].clone()),
            ("w2", Tensor::from_f32(&[e, h, n], w2.clone())),
            ("expert_offsets", offs),
        ],
        &[],
    );
    let inv = Tensor::from_i32(&[t, k], perm.inverse.iter().map(|&o| o as i32).collect());
    let fin = call(
        "moe_finalize",
        vec![
            ("expert_out", g2["out"].clone()),
            ("topk_weights", Tensor::from_f32(&[t, k], wts.clone())),
            ("inverse", inv),
        ],
        &[],
    );
    let got = fin["out"].to_f32_vec();
    // Exactly what the chain should compute: the dequantized NVFP4 h through W2, weighted.
    let mut want_q = vec![0.0f32; t * h];
    for tok in 0..t {
        for j in 0..k {
            let row = perm.inverse[tok * k + j];
            let ex = idx[tok * k + j] as usize;
            for o in 0..h {
                let b: f32 = (0..n)
                    .map(|c| hq[row * n + c] * w2[(ex * h + o) * n + c])
                    .sum();
                want_q[tok * h + o] += wts[tok * k + j] * b;
            }
        }
    }
    for (i, (a, b)) in want_q.iter().zip(&got).enumerate() {
        assert!(
            (a - b).abs() <= 1e-4 * (1.0 + a.abs()),
            "elem {i}: want {a} got {b}"
        );
    }
    // Against the unquantized chain: NVFP4 noise (about 2^-4 relative per element) only.
    let want = direct(&x, t, h, &idx, &wts, k, &w1, n, &w2);
    let num: f64 = want
        .iter()
        .zip(&got)
        .map(|(a, b)| ((a - b) as f64).powi(2))
        .sum();
    let den: f64 = want.iter().map(|a| (*a as f64).powi(2)).sum();
    assert!(num / den < 2e-2, "nmse {}", num / den);
    assert!(num / den > 0.0, "quantization must be visible");
}

#[test]
fn nvfp4_weights_equal_dequantized_float_weights() {
    let (m, e, kdim, n) = (5usize, 2usize, 64usize, 32usize);
    let mut r = Lcg(11);
    let x = r.v(m * kdim, 1.0);
    let w = r.v(e * n * kdim, 0.5);
    let mut codes = vec![];
    let mut sfs = vec![];
    let mut gs = vec![];
    let mut wdq = vec![];
    for ex in 0..e {
        let q = quantize(
            &w[ex * n * kdim..(ex + 1) * n * kdim],
            n,
            kdim,
            None,
            Nvfp4Mode::Kernel,
            SfLayout::Linear,
        )
        .unwrap();
        wdq.extend(dequantize(&q, SfLayout::Linear));
        codes.extend(q.x_fp4);
        sfs.extend(q.sf);
        gs.push(q.global_scale);
    }
    let offs = Tensor::from_i32(&[e + 1], vec![0, 2, 5]);
    let a = call(
        "moe_expert_gemm2",
        vec![
            ("x", Tensor::from_f32(&[m, kdim], x.clone())),
            ("w2_fp4", Tensor::from_u8(&[e, n, kdim / 2], codes)),
            ("w2_sf", Tensor::from_u8(&[e, n, kdim / 16], sfs)),
            ("w2_global_scale", Tensor::from_f32(&[e], gs)),
            ("expert_offsets", offs.clone()),
        ],
        &[],
    );
    let b = call(
        "moe_expert_gemm2",
        vec![
            ("x", Tensor::from_f32(&[m, kdim], x)),
            ("w2", Tensor::from_f32(&[e, n, kdim], wdq)),
            ("expert_offsets", offs),
        ],
        &[],
    );
    for (i, (p, q)) in a["out"]
        .to_f32_vec()
        .iter()
        .zip(b["out"].to_f32_vec())
        .enumerate()
    {
        assert!(
            (p - q).abs() <= 1e-4 * (1.0 + q.abs()),
            "elem {i}: {p} vs {q}"
        );
    }
}

#[test]
fn bad_offsets_and_shapes_are_clear_errors() {
    let m: TensorMap = [
        ("x".to_string(), Tensor::from_f32(&[3, 16], vec![0.5; 48])),
        (
            "w2".to_string(),
            Tensor::from_f32(&[2, 16, 16], vec![0.25; 512]),
        ),
        (
            "expert_offsets".to_string(),
            Tensor::from_i32(&[3], vec![0, 2, 4]),
        ),
    ]
    .into_iter()
    .collect();
    let e = find("moe_expert_gemm2")
        .unwrap()
        .call(&m, &[])
        .unwrap_err()
        .to_string();
    assert!(e.contains("expert_offsets") && e.contains("M = 3"), "{e}");
    let m2: TensorMap = [(
        "topk_indices".to_string(),
        Tensor::from_i32(&[1, 2], vec![0, 9]),
    )]
    .into_iter()
    .collect();
    let e = find("moe_permute")
        .unwrap()
        .call(&m2, &[("num_experts".into(), "4".into())])
        .unwrap_err()
        .to_string();
    assert!(e.contains("= 9") && e.contains("0..4"), "{e}");
}
