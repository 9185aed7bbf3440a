//! nvfp4_quantize / nvfp4_dequantize: random shapes (odd row counts, every layout, both modes,
//! f32/bf16/f16, given or derived global scale, NaN/inf/zero blocks) bit-exact vs the reference.

mod common;

use common::{diff, exact, sets};
use compare::gen::Rng;
use proptest::prelude::*;
use reference::{DType, Tensor, TensorMap};

fn x_input(rows: usize, cols: usize, seed: u64, dt: DType, specials: bool) -> Tensor {
    let mut r = Rng::new(seed);
    let mut v: Vec<f32> = (0..rows * cols)
        .map(|i| r.normal() * if (i / 16) % 3 == 0 { 100.0 } else { 0.01 })
        .collect();
    if specials && rows * cols >= 64 {
        v[3] = f32::NAN;
        v[20] = f32::INFINITY;
        v[37] = f32::NEG_INFINITY;
        for x in &mut v[48..64] {
            *x = 0.0; // an all-zero block
        }
    }
    Tensor::from_f32_as(&[rows, cols], &v, dt)
}

#[allow(clippy::too_many_arguments)]
fn quantize_case(
    rows: usize,
    cols: usize,
    seed: u64,
    dt: DType,
    mode: &str,
    layout: &str,
    given: bool,
    specials: bool,
) -> Result<(), String> {
    let mut m = TensorMap::new();
    m.insert("x".into(), x_input(rows, cols, seed, dt, specials));
    if given || specials {
        m.insert(
            "global_scale".into(),
            Tensor::from_f32(&[1], vec![37.5 + (seed % 100) as f32]),
        );
    }
    let s = sets(&[("mode", mode.into()), ("layout", layout.into())]);
    let name =
        format!("rows={rows},cols={cols},{dt},{mode},{layout},given={given},specials={specials}");
    for v in ["v8", "v7", "v6", "v5", "v4", "v3", "v2", "v1"] {
        diff("nvfp4_quantize", v, &name, &m, &s, &exact)?;
    }
    // Round trip: dequantize the reference's quantization on the GPU too.
    let q = reference::ops::find("nvfp4_quantize")
        .and_then(|d| d.call(&m, &s))
        .map_err(|e| e.to_string())?;
    let mut dq = TensorMap::new();
    for k in ["x_fp4", "sf", "global_scale"] {
        dq.insert(k.into(), q[k].clone());
    }
    diff(
        "nvfp4_dequantize",
        "v1",
        &format!("dequantize {name}"),
        &dq,
        &sets(&[("layout", layout.into())]),
        &exact,
    )
}

#[test]
#[ignore = "gpu"]
fn fixed_shapes_all_modes() {
    for (rows, cols) in [
        (1usize, 16usize),
        (3, 48),
        (130, 64),
        (257, 4096),
        (128, 80),
    ] {
        for mode in ["kernel", "exact"] {
            for layout in ["linear", "swizzled128x4"] {
                for (i, dt) in [DType::F32, DType::BF16, DType::F16]
                    .into_iter()
                    .enumerate()
                {
                    quantize_case(
                        rows,
                        cols,
                        (rows * 31 + cols + i) as u64,
                        dt,
                        mode,
                        layout,
                        i == 1,
                        rows > 100,
                    )
                    .unwrap_or_else(|e| panic!("{e}"));
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    #[ignore = "gpu"]
    fn random_shapes(rows in 1usize..300, kb in 1usize..40, seed in any::<u64>(), dsel in 0usize..3,
                     exact_mode in any::<bool>(), swz in any::<bool>(), given in any::<bool>()) {
        let dt = [DType::F32, DType::BF16, DType::F16][dsel];
        let r = quantize_case(rows, kb * 16, seed, dt, if exact_mode { "exact" } else { "kernel" },
                              if swz { "swizzled128x4" } else { "linear" }, given, seed % 4 == 0);
        if let Err(msg) = r {
            prop_assert!(false, "{}", msg);
        }
    }
}

#[test]
#[ignore = "gpu"]
fn fast_e2m1_encoder_equals_the_threshold_table_on_every_f32() {
    use cudarc::driver::{DevicePtr, PushKernelArg};
    let g = common::gpu();
    // Each kernel counts its mismatches over all 2^32 f32 inputs: the E2M1 encoders of v2 / v4
    // (e2m1_fast_check), v3 / v4 (e2m1_v3_check) and v7 (e2m1_v7_check, NaN skipped) against
    // the threshold table, and v7's hardware E4M3 conversions against the software ones
    // (e4m3_hw_check, non-NaN inputs, also all 256 codes back to f32).
    for kernel in [
        "e2m1_fast_check",
        "e2m1_v3_check",
        "e2m1_v7_check",
        "e4m3_hw_check",
    ] {
        let count = g.alloc_raw::<u64>(1).expect("alloc");
        let (cp, _c) = count.device_ptr(&g.stream);
        let f = g.function("nvfp4", kernel).expect("kernel");
        let (lo, n) = (0u64, 1u64 << 32);
        let mut a = g.stream.launch_builder(&f);
        a.arg(&lo).arg(&n).arg(&cp);
        // SAFETY: every check kernel has the signature (u64 lo, u64 n, u64* count) and only
        // adds to count.
        unsafe { a.launch(gpu::runtime::cfg(g.sm_count * 64, 256, 0)) }.expect("launch");
        let c: Vec<u64> = g.stream.clone_dtoh(&count).expect("download");
        assert_eq!(c[0], 0, "{kernel}: {} mismatching inputs", c[0]);
    }
}
