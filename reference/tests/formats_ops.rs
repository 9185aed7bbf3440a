//! The format ops (`philox`, `stochastic_round_f16`, `cast`) through the op interface: known
//! answers, stochastic rounding properties, cast targets and validation.

use proptest::prelude::*;
use reference::num::{f16_bits_to_f32, f32_to_f16_bits};
use reference::{ops, DType, Tensor, TensorMap};

fn call(op: &str, items: Vec<(&str, Tensor)>, sets: &[(&str, &str)]) -> Result<TensorMap, String> {
    let m: TensorMap = items.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
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
fn philox_random123_known_answers_via_op() {
    // Random123 kat_vectors, philox4x32 with 10 and 7 rounds: zeros, ones, pi digits.
    let counter = Tensor::from_u32(
        &[3, 4],
        vec![
            0,
            0,
            0,
            0, //
            u32::MAX,
            u32::MAX,
            u32::MAX,
            u32::MAX, //
            0x243f6a88,
            0x85a308d3,
            0x13198a2e,
            0x03707344,
        ],
    );
    let key = Tensor::from_u32(
        &[3, 2],
        vec![0, 0, u32::MAX, u32::MAX, 0xa4093822, 0x299f31d0],
    );
    let out = call(
        "philox",
        vec![("counter", counter.clone()), ("key", key.clone())],
        &[],
    )
    .unwrap();
    assert_eq!(
        out["out"].as_u32().unwrap(),
        &[
            0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8, //
            0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd, //
            0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1,
        ]
    );
    let out = call(
        "philox",
        vec![("counter", counter.clone()), ("key", key.clone())],
        &[("rounds", "7")],
    )
    .unwrap();
    assert_eq!(
        &out["out"].as_u32().unwrap()[..4],
        &[0x5f6fb709, 0x0d893f64, 0x4f121f81, 0x4f730a48]
    );
    // Shape errors name the tensor.
    let err = call(
        "philox",
        vec![
            ("counter", counter),
            ("key", Tensor::from_u32(&[2, 2], vec![0; 4])),
        ],
        &[],
    )
    .unwrap_err();
    assert!(err.contains("'key'") && err.contains("[3, 2]"), "{err}");
    let err = call(
        "philox",
        vec![
            ("counter", Tensor::from_i64(&[1, 4], vec![-1, 0, 0, 0])),
            ("key", Tensor::from_u32(&[1, 2], vec![0; 2])),
        ],
        &[],
    )
    .unwrap_err();
    assert!(err.contains("element 0 = -1"), "{err}");
}

#[test]
fn stochastic_round_specials_via_op() {
    let x = Tensor::from_f32(
        &[2, 3],
        vec![f32::NAN, f32::INFINITY, -f32::INFINITY, 1e-6, -70000.0, 1.0],
    );
    let rand = Tensor::from_u32(&[2, 3], vec![0x1FFF, 0x1FFF, 0, 0x1FFF, 0, 0x1FFF]);
    let out = call("stochastic_round_f16", vec![("x", x), ("rand", rand)], &[]).unwrap();
    assert_eq!(out["out"].dtype(), DType::F16);
    assert_eq!(out["out"].shape, vec![2, 3]);
    // NaN, +inf, -inf, flush below 2^-14, overflow to -inf (no saturation), 1 + (2^13-1)/2^23 -> 1.
    assert_eq!(
        out["out"].as_u16_bits().unwrap(),
        &[0x7E00, 0x7C00, 0xFC00, 0x0000, 0xFC00, 0x3C00]
    );
    let err = call(
        "stochastic_round_f16",
        vec![
            ("x", Tensor::from_f32(&[3], vec![1.0; 3])),
            ("rand", Tensor::from_u32(&[4], vec![0; 4])),
        ],
        &[],
    )
    .unwrap_err();
    assert!(err.contains("does not match x's shape"), "{err}");
}

#[test]
fn stochastic_round_is_unbiased_over_all_13_bit_draws() {
    // For each x, run all 8192 draws through the op: the result is one of the two f16
    // neighbours and the mean is exactly x.
    let xs = [1.0f32 + 1.0 / 3.0, -0.1, 1234.567, 3.0e-4];
    for &x in &xs {
        let n = 8192;
        let out = call(
            "stochastic_round_f16",
            vec![
                ("x", Tensor::from_f32(&[n], vec![x; n])),
                ("rand", Tensor::from_u32(&[n], (0..n as u32).collect())),
            ],
            &[],
        )
        .unwrap();
        let lo = f16_bits_to_f32(f32_to_f16_bits(x));
        let vals: Vec<f64> = out["out"].to_f64_vec();
        let mut distinct = vals.clone();
        distinct.sort_by(|a, b| a.partial_cmp(b).unwrap());
        distinct.dedup();
        assert_eq!(distinct.len(), 2, "x {x}: {distinct:?}");
        assert!(distinct
            .iter()
            .all(|&v| (v - x as f64).abs() < (lo as f64).abs() * 2e-3));
        let mean = vals.iter().sum::<f64>() / n as f64;
        assert!(
            (mean - x as f64).abs() <= (x as f64).abs() * 1e-12,
            "x {x}: mean {mean}"
        );
    }
}

#[test]
fn cast_targets() {
    let vals = vec![
        1.0f32,
        -2.75,
        1000.0,
        500.0,
        f32::INFINITY,
        0.3,
        -0.0,
        f32::NAN,
    ];
    let x = Tensor::from_f32(&[2, 4], vals.clone());
    let run =
        |sets: &[(&str, &str)]| call("cast", vec![("x", x.clone())], sets).unwrap()["out"].clone();
    let bf = run(&[("to", "bf16")]);
    assert_eq!(bf.dtype(), DType::BF16);
    assert_eq!(bf.shape, vec![2, 4]);
    assert_eq!(
        &bf.as_u16_bits().unwrap()[..4],
        &[0x3F80, 0xC030, 0x447A, 0x43FA]
    );
    let h = run(&[("to", "f16")]);
    assert_eq!(h.dtype(), DType::F16);
    assert_eq!(
        &h.as_u16_bits().unwrap()[..5],
        &[0x3C00, 0xC180, 0x63D0, 0x5FD0, 0x7C00]
    );
    let e = run(&[("to", "e4m3")]);
    assert_eq!(e.dtype(), DType::U8);
    // 1, -2.75, 1000 -> 448 (sat), 500 -> 448, inf -> 448, 0.3 -> 0.3125, -0 -> 0x80, NaN -> 0x7F.
    assert_eq!(
        e.as_u8().unwrap(),
        &[0x38, 0xC3, 0x7E, 0x7E, 0x7E, 0x2A, 0x80, 0x7F]
    );
    let e = run(&[("to", "e4m3"), ("saturate", "false")]);
    assert_eq!(
        e.as_u8().unwrap(),
        &[0x38, 0xC3, 0x7F, 0x7F, 0x7F, 0x2A, 0x80, 0x7F]
    );
    let f4 = run(&[("to", "e2m1")]);
    // One code per byte: 1 -> 2, -2.75 -> -3 (0xD), big -> 6 (7), 0.3 -> 0.5 (1), -0 -> 0x8, NaN -> 7.
    assert_eq!(f4.as_u8().unwrap(), &[2, 0xD, 7, 7, 7, 1, 8, 7]);
    // Validation.
    let err = call("cast", vec![("x", x.clone())], &[("to", "e5m2")]).unwrap_err();
    assert!(err.contains("one of bf16, f16, e4m3, e2m1"), "{err}");
    let err = call("cast", vec![("x", x.clone())], &[]).unwrap_err();
    assert!(err.contains("'to'"), "{err}");
    let err = call(
        "cast",
        vec![("x", Tensor::from_f64(&[1], vec![1.0]))],
        &[("to", "f16")],
    )
    .unwrap_err();
    assert!(err.contains("f64"), "{err}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn stochastic_round_lands_on_a_neighbour(x in -60000.0f32..60000.0, r in any::<u32>()) {
        prop_assume!(x.abs() >= 6.2e-5); // f16 normal range (the algorithm flushes below)
        let out = call(
            "stochastic_round_f16",
            vec![("x", Tensor::from_f32(&[1], vec![x])), ("rand", Tensor::from_u32(&[1], vec![r]))],
            &[],
        ).unwrap();
        let y = out["out"].to_f64_vec()[0];
        // Truncation toward zero, and the next f16 away from zero.
        let t = f32::from_bits(x.to_bits() & !0x1FFF) as f64;
        let ulp = (f32::from_bits((x.abs().to_bits() & !0x1FFF) + 0x2000) - f32::from_bits(x.abs().to_bits() & !0x1FFF)) as f64;
        prop_assert!(y == t || y == t + ulp * (x.signum() as f64), "x {} y {} t {}", x, y, t);
    }

    #[test]
    fn cast_f16_round_trips_exact_values(b in any::<u16>()) {
        let v = f16_bits_to_f32(b);
        prop_assume!(!v.is_nan());
        let out = call("cast", vec![("x", Tensor::from_f32(&[1], vec![v]))], &[("to", "f16")]).unwrap();
        prop_assert_eq!(out["out"].as_u16_bits().unwrap()[0], b);
    }
}
