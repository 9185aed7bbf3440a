//! nvfp4_quantize / nvfp4_dequantize: known answers, error bound, layouts, zero blocks,
//! NaN/Inf policy per mode, op wiring and validation.

use proptest::prelude::*;
use reference::num::{e2m1_to_f32, e4m3_bits_to_f32, unpack_e2m1};
use reference::ops::nvfp4_quantize::{dequantize, quantize, Nvfp4Mode, SfLayout};
use reference::{ops, DType, Tensor, TensorMap};

const MODES: [Nvfp4Mode; 2] = [Nvfp4Mode::Kernel, Nvfp4Mode::Exact];

fn lcg(seed: u64, n: usize, scale: f32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(99);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            // Heavy-ish tails: u^3 spreads magnitudes over a few decades.
            let u = (s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0;
            u * u * u * scale + u * 1e-3 * scale
        })
        .collect()
}

fn call(op: &str, m: TensorMap, sets: &[(&str, &str)]) -> Result<TensorMap, String> {
    let sets: Vec<(String, String)> = sets
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    ops::find(op)
        .unwrap()
        .call(&m, &sets)
        .map_err(|e| e.to_string())
}

#[test]
fn known_answer_block() {
    // global 1: vecMax 6 gives SF = 6 * rcp(6) = 1 (E4M3 0x38), outScale 1: codes are exact.
    let vals = [
        6.0, -6.0, 0.5, -0.5, 1.0, 1.5, 2.0, 3.0, 4.0, -4.0, 0.0, 0.25, 0.75, 2.5, 5.0, 5.5,
    ];
    for mode in MODES {
        let q = quantize(&vals, 1, 16, Some(1.0), mode, SfLayout::Linear).unwrap();
        assert_eq!(q.sf, vec![0x38], "{mode:?}");
        let codes = unpack_e2m1(&q.x_fp4, 16);
        // 0.25 ties to 0 (even), 0.75 to 1.0, 2.5 to 2.0, 5.0 to 4.0, 5.5 to 6.
        assert_eq!(
            codes,
            vec![7, 15, 1, 9, 2, 3, 4, 5, 6, 14, 0, 0, 2, 4, 6, 7],
            "{mode:?}"
        );
        // Element 0 in the low nibble.
        assert_eq!(q.x_fp4[0], 0xF7);
        let d = dequantize(&q, SfLayout::Linear);
        assert_eq!(&d[..4], &[6.0, -6.0, 0.5, -0.5]);
    }
}

#[test]
fn default_global_scale_is_2688_over_amax() {
    let x = lcg(3, 4 * 32, 3.0);
    let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    let q = quantize(&x, 4, 32, None, Nvfp4Mode::Kernel, SfLayout::Linear).unwrap();
    assert_eq!(q.global_scale, 2688.0f32 / amax);
    // The block holding amax gets the largest scale, 448 (0x7E) or just below it.
    let max_sf =
        q.sf.iter()
            .map(|&b| e4m3_bits_to_f32(b))
            .fold(0f32, f32::max);
    assert!((416.0..=448.0).contains(&max_sf), "{max_sf}");
}

/// |x - deq| <= half the E2M1 step at |x|'s scaled magnitude, times sf/global; saturated
/// elements dequantize to +-6*sf/global.
fn check_error_bound(x: &[f32], rows: usize, cols: usize, mode: Nvfp4Mode, layout: SfLayout) {
    let q = quantize(x, rows, cols, None, mode, layout).unwrap();
    let d = dequantize(&q, layout);
    let g = q.global_scale;
    for m in 0..rows {
        for j in 0..cols {
            let i = m * cols + j;
            let sf = e4m3_bits_to_f32(q.sf[layout.offset(m, j / 16, cols)]);
            let unit = sf / g;
            let scaled = x[i].abs() / unit;
            let err = (x[i] - d[i]).abs();
            if scaled > 6.0 * (1.0 + 1e-5) {
                assert_eq!(d[i].abs(), 6.0 * sf / g, "saturated element {i}");
                continue;
            }
            let half_step = if scaled < 2.0 {
                0.25
            } else if scaled < 4.0 {
                0.5
            } else {
                1.0
            };
            // A few ulps of slack for the reciprocal chain.
            let bound = half_step * unit * (1.0 + 1e-5) + x[i].abs() * 1e-6;
            assert!(
                err <= bound,
                "{mode:?} {layout:?} element ({m},{j}): x {} deq {} err {err} bound {bound}",
                x[i],
                d[i]
            );
        }
    }
}

#[test]
fn error_bound_at_odd_shape_both_layouts() {
    let (rows, cols) = (77, 160);
    let x = lcg(7, rows * cols, 10.0);
    for mode in MODES {
        for layout in [SfLayout::Linear, SfLayout::Swizzled128x4] {
            check_error_bound(&x, rows, cols, mode, layout);
        }
    }
}

#[test]
fn swizzle_offsets_and_padding() {
    let (rows, cols) = (77, 160); // 10 scale columns -> padded 12, rows -> 128
    assert_eq!(SfLayout::Swizzled128x4.shape(rows, cols), [128, 12]);
    assert_eq!(SfLayout::Linear.shape(rows, cols), [77, 10]);
    // mTile 0, kTile 1, m%32 = 1, (m%128)/32 = 1, k%4 = 1.
    assert_eq!(
        SfLayout::Swizzled128x4.offset(33, 5, cols),
        512 + 16 + 4 + 1
    );
    // Second row tile: kTiles = 3 -> 1536 per row tile.
    assert_eq!(SfLayout::Swizzled128x4.offset(130, 0, cols), 1536 + 2 * 16);
    let x: Vec<f32> = lcg(9, rows * cols, 5.0)
        .into_iter()
        .map(|v| v + 0.01)
        .collect();
    let lin = quantize(&x, rows, cols, None, Nvfp4Mode::Kernel, SfLayout::Linear).unwrap();
    let sw = quantize(
        &x,
        rows,
        cols,
        None,
        Nvfp4Mode::Kernel,
        SfLayout::Swizzled128x4,
    )
    .unwrap();
    assert_eq!(lin.x_fp4, sw.x_fp4);
    assert_eq!(sw.sf.len(), 128 * 12);
    let mut used = vec![false; sw.sf.len()];
    for m in 0..rows {
        for k in 0..10 {
            let o = SfLayout::Swizzled128x4.offset(m, k, cols);
            assert!(!used[o], "offset {o} used twice");
            used[o] = true;
            assert_eq!(sw.sf[o], lin.sf[m * 10 + k]);
        }
    }
    // Padding is written as 0, and every real scale is non-zero here.
    for (o, &u) in used.iter().enumerate() {
        if u {
            assert_ne!(sw.sf[o], 0);
        } else {
            assert_eq!(sw.sf[o], 0, "padding byte {o}");
        }
    }
    assert_eq!(
        dequantize(&lin, SfLayout::Linear),
        dequantize(&sw, SfLayout::Swizzled128x4)
    );
}

#[test]
fn zero_block_gets_zero_scale_in_both_modes() {
    let mut x = lcg(5, 48, 2.0);
    for v in &mut x[16..32] {
        *v = 0.0;
    }
    for mode in MODES {
        let q = quantize(&x, 1, 48, None, mode, SfLayout::Linear).unwrap();
        assert_eq!(q.sf[1], 0, "{mode:?}");
        assert_ne!(q.sf[0], 0);
        assert!(unpack_e2m1(&q.x_fp4, 48)[16..32].iter().all(|&c| c == 0));
        assert!(dequantize(&q, SfLayout::Linear)[16..32]
            .iter()
            .all(|&v| v == 0.0));
    }
}

#[test]
fn nan_and_inf_policy() {
    let base: Vec<f32> = (0..16).map(|i| (i as f32 - 7.5) * 0.4).collect();
    let g = Some(100.0f32);
    let clean = quantize(&base, 1, 16, g, Nvfp4Mode::Kernel, SfLayout::Linear).unwrap();
    // One NaN: the kernel's fmaxf drops it from vecMax; the NaN element gets 0x7.
    let mut x = base.clone();
    x[0] = 0.0;
    let ref0 = quantize(&x, 1, 16, g, Nvfp4Mode::Kernel, SfLayout::Linear).unwrap();
    x[0] = f32::NAN;
    let q = quantize(&x, 1, 16, g, Nvfp4Mode::Kernel, SfLayout::Linear).unwrap();
    assert_eq!(q.sf, ref0.sf);
    let c = unpack_e2m1(&q.x_fp4, 16);
    assert_eq!(c[0], 0x7);
    assert_eq!(&c[1..], &unpack_e2m1(&ref0.x_fp4, 16)[1..]);
    // Exact mode (torch.max propagates NaN): sf NaN, every code 0.
    let q = quantize(&x, 1, 16, g, Nvfp4Mode::Exact, SfLayout::Linear).unwrap();
    assert_eq!(q.sf, vec![0x7F]);
    assert!(unpack_e2m1(&q.x_fp4, 16).iter().all(|&c| c == 0));
    assert!(dequantize(&q, SfLayout::Linear).iter().all(|v| v.is_nan()));
    // All-NaN block in kernel mode: sf NaN, codes 0x7.
    let q = quantize(
        &[f32::NAN; 16],
        1,
        16,
        g,
        Nvfp4Mode::Kernel,
        SfLayout::Linear,
    )
    .unwrap();
    assert_eq!(q.sf, vec![0x7F]);
    assert!(unpack_e2m1(&q.x_fp4, 16).iter().all(|&c| c == 0x7));
    // +-inf: kernel saturates the scale to 448 and the infinities to +-6.
    let mut x = base.clone();
    x[3] = f32::NEG_INFINITY;
    let q = quantize(&x, 1, 16, g, Nvfp4Mode::Kernel, SfLayout::Linear).unwrap();
    assert_eq!(q.sf, vec![0x7E]);
    assert_eq!(unpack_e2m1(&q.x_fp4, 16)[3], 0xF);
    assert_ne!(q.sf, clean.sf);
    let q = quantize(&x, 1, 16, g, Nvfp4Mode::Exact, SfLayout::Linear).unwrap();
    assert_eq!(q.sf, vec![0x7F]);
    assert!(unpack_e2m1(&q.x_fp4, 16).iter().all(|&c| c == 0));
    // No explicit global scale: amax NaN/inf/0 is an error that says what to do.
    let e = quantize(&x, 1, 16, None, Nvfp4Mode::Kernel, SfLayout::Linear).unwrap_err();
    assert!(e.contains("pass global_scale"), "{e}");
    let e = quantize(&[0.0; 16], 1, 16, None, Nvfp4Mode::Kernel, SfLayout::Linear).unwrap_err();
    assert!(e.contains("all zeros"), "{e}");
}

#[test]
fn exact_mode_overflowing_scale_is_nan_kernel_saturates() {
    // global far above 448*6/amax: SF = 1000 * 6/6 = 1000 > 464.
    let x: Vec<f32> = (0..16).map(|i| 6.0 - i as f32 * 0.3).collect();
    let k = quantize(&x, 1, 16, Some(1000.0), Nvfp4Mode::Kernel, SfLayout::Linear).unwrap();
    assert_eq!(k.sf, vec![0x7E]);
    assert_eq!(unpack_e2m1(&k.x_fp4, 16)[0], 7);
    let e = quantize(&x, 1, 16, Some(1000.0), Nvfp4Mode::Exact, SfLayout::Linear).unwrap();
    assert_eq!(e.sf, vec![0x7F]);
}

#[test]
fn kernel_and_exact_agree_almost_everywhere() {
    let (rows, cols) = (64, 256);
    let x = lcg(21, rows * cols, 4.0);
    let k = quantize(&x, rows, cols, None, Nvfp4Mode::Kernel, SfLayout::Linear).unwrap();
    let e = quantize(&x, rows, cols, None, Nvfp4Mode::Exact, SfLayout::Linear).unwrap();
    assert_eq!(k.global_scale, e.global_scale);
    let diff = k.x_fp4.iter().zip(&e.x_fp4).filter(|(a, b)| a != b).count();
    // With the correctly rounded rcp model the two differ at most at a few boundaries.
    assert!(diff * 1000 <= k.x_fp4.len(), "{diff} bytes differ");
}

#[test]
fn ops_round_trip_and_validate() {
    let (rows, cols) = (5, 48);
    let x = lcg(4, rows * cols, 2.0);
    let mut m = TensorMap::new();
    m.insert(
        "x".into(),
        Tensor::from_f32_as(&[rows, cols], &x, DType::BF16),
    );
    for layout in ["linear", "swizzled128x4"] {
        let q = call("nvfp4_quantize", m.clone(), &[("layout", layout)]).unwrap();
        assert_eq!(q["x_fp4"].shape, vec![rows, cols / 2]);
        let want_sf = if layout == "linear" {
            vec![rows, 3]
        } else {
            vec![128, 4]
        };
        assert_eq!(q["sf"].shape, want_sf);
        let mut dm = TensorMap::new();
        for k in ["x_fp4", "sf", "global_scale"] {
            dm.insert(k.into(), q[k].clone());
        }
        let d = call("nvfp4_dequantize", dm.clone(), &[("layout", layout)]).unwrap();
        let dx = d["x"].as_f32().unwrap();
        let xb = m["x"].to_f32_vec();
        let g = q["global_scale"].as_f32().unwrap()[0];
        for (i, (&a, &b)) in xb.iter().zip(dx).enumerate() {
            let amax_blk = xb[i / 16 * 16..i / 16 * 16 + 16]
                .iter()
                .fold(0f32, |s, v| s.max(v.abs()));
            assert!(
                (a - b).abs() <= amax_blk / 6.0 * 1.07 + 1e-6 / g,
                "{i}: {a} {b}"
            );
        }
        // Flat sf accepted; wrong-layout sf rejected with a clear message.
        let n = q["sf"].numel();
        dm.insert(
            "sf".into(),
            Tensor::from_u8(&[n], q["sf"].as_u8().unwrap().to_vec()),
        );
        assert!(call("nvfp4_dequantize", dm.clone(), &[("layout", layout)]).is_ok());
        let other = if layout == "linear" {
            "swizzled128x4"
        } else {
            "linear"
        };
        let err = call("nvfp4_dequantize", dm, &[("layout", other)]).unwrap_err();
        assert!(err.contains("does not match"), "{err}");
    }
    // Given global scale is used and echoed.
    let mut m2 = m.clone();
    m2.insert("global_scale".into(), Tensor::from_f32(&[1], vec![123.5]));
    let q = call("nvfp4_quantize", m2.clone(), &[("mode", "exact")]).unwrap();
    assert_eq!(q["global_scale"].as_f32().unwrap(), &[123.5]);
    m2.insert("global_scale".into(), Tensor::from_f32(&[1], vec![-1.0]));
    let err = call("nvfp4_quantize", m2, &[]).unwrap_err();
    assert!(err.contains("finite and > 0"), "{err}");
    // cols % 16.
    let mut bad = TensorMap::new();
    bad.insert("x".into(), Tensor::from_f32(&[2, 24], lcg(1, 48, 1.0)));
    let err = call("nvfp4_quantize", bad, &[]).unwrap_err();
    assert!(err.contains("multiple of 16"), "{err}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn error_bound_random(
        seed in any::<u64>(), rows in 1usize..20, kb in 1usize..6, scale in 1e-3f32..1e3,
        exact in any::<bool>(), swz in any::<bool>()
    ) {
        let cols = kb * 16;
        let x = lcg(seed, rows * cols, scale);
        let mode = if exact { Nvfp4Mode::Exact } else { Nvfp4Mode::Kernel };
        let layout = if swz { SfLayout::Swizzled128x4 } else { SfLayout::Linear };
        check_error_bound(&x, rows, cols, mode, layout);
    }

    #[test]
    fn codes_are_nearest_given_the_scale(seed in any::<u64>(), g in 1.0f32..1e4) {
        // Exact mode: the code is the nearest E2M1 value to x*outScale (checked by brute force).
        let x = lcg(seed, 64, 3.0);
        let q = quantize(&x, 1, 64, Some(g), Nvfp4Mode::Exact, SfLayout::Linear).unwrap();
        let codes = unpack_e2m1(&q.x_fp4, 64);
        for i in 0..64 {
            let sf = e4m3_bits_to_f32(q.sf[i / 16]);
            prop_assume!(sf > 0.0);
            let s = x[i] * (1.0 / (sf * (1.0 / g)));
            let got = e2m1_to_f32(codes[i]);
            let best = (0u8..16).map(e2m1_to_f32).fold(f32::INFINITY, |b, v| {
                if (v - s.clamp(-6.0, 6.0)).abs() < (b - s.clamp(-6.0, 6.0)).abs() { v } else { b }
            });
            prop_assert_eq!((got - s.clamp(-6.0, 6.0)).abs(), (best - s.clamp(-6.0, 6.0)).abs());
        }
    }
}
