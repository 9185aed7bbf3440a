//! Causal conv1d properties (SPEC.md "Causal conv1d"): prefill equals repeated decode steps,
//! ring buffer equals shift register, multi-token windows equal single-step states, pad slots,
//! hand-computed values, op-level validation.

use proptest::prelude::*;
use reference::ops::causal_conv1d_fn::{causal_conv1d_fn, Activation};
use reference::ops::causal_conv1d_update::{causal_conv1d_update, StateBuffer, UpdateDims};
use reference::{DType, Tensor, TensorMap};

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn vec(&mut self, n: usize) -> Vec<f32> {
        (0..n)
            .map(|_| (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0)
            .collect()
    }
}

fn act_of(silu: bool) -> Activation {
    if silu {
        Activation::Silu
    } else {
        Activation::None
    }
}

fn close(what: &str, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= 1e-5 + 1e-5 * w.abs(),
            "{what}[{i}]: got {g}, want {w}"
        );
    }
}

/// (batch, dim, L) -> column t as (batch, dim).
fn column(x: &[f32], bd: usize, l: usize, t: usize) -> Vec<f32> {
    (0..bd).map(|i| x[i * l + t]).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Prefill == one update per token, starting from the initial states; final_states ==
    /// the update's state.
    #[test]
    fn fn_equals_repeated_update(
        batch in 1usize..3, dim in 1usize..6, width in 1usize..5, l in 1usize..12,
        with_bias in any::<bool>(), with_init in any::<bool>(), silu in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let mut r = Rng(seed);
        let hist = width - 1;
        let x = r.vec(batch * dim * l);
        let w = r.vec(dim * width);
        let bias = with_bias.then(|| r.vec(dim));
        let init = with_init.then(|| r.vec(batch * dim * hist));
        let act = act_of(silu);
        let pre = causal_conv1d_fn(&x, (batch, dim, l), &w, width, bias.as_deref(), init.as_deref(), act).unwrap();
        let mut state = init.clone().unwrap_or_else(|| vec![0.0; batch * dim * hist]);
        let dims = UpdateDims { batch, dim, seqlen: 1, width, slots: batch, state_len: hist };
        for t in 0..l {
            let o = causal_conv1d_update(&column(&x, batch * dim, l, t), dims, &mut state, &w,
                bias.as_deref(), StateBuffer::Linear, None, act).unwrap();
            close(&format!("out t={t}"), &o.out, &column(&pre.out, batch * dim, l, t));
        }
        close("final_states", &pre.final_states, &state);
    }

    /// A ring buffer holding the same history gives the same outputs and, unrolled, the same
    /// state as the shift register; multi-token windows equal single-step states.
    #[test]
    fn circular_equals_linear_and_windows_equal_steps(
        batch in 1usize..3, dim in 1usize..5, width in 2usize..5, extra in 0usize..4,
        l in 1usize..7, seqlen0 in 0i64..20, silu in any::<bool>(), seed in any::<u64>(),
    ) {
        let mut r = Rng(seed);
        let hist = width - 1;
        let sl = hist + extra;
        let x = r.vec(batch * dim * l);
        let w = r.vec(dim * width);
        let bias = r.vec(dim);
        let lin0 = r.vec(batch * dim * sl);
        let cs: Vec<i64> = (0..batch as i64).map(|b| seqlen0 + 3 * b).collect();
        // ring[(cs - sl + i) mod sl] = linear[i]: the newest entry sits just before cs.
        let mut ring = vec![0f32; lin0.len()];
        for b in 0..batch {
            for d in 0..dim {
                for i in 0..sl {
                    let j = (cs[b] - sl as i64 + i as i64).rem_euclid(sl as i64) as usize;
                    ring[(b * dim + d) * sl + j] = lin0[(b * dim + d) * sl + i];
                }
            }
        }
        let act = act_of(silu);
        let dims = UpdateDims { batch, dim, seqlen: l, width, slots: batch, state_len: sl };
        let mut lin = lin0.clone();
        let a = causal_conv1d_update(&x, dims, &mut lin, &w, Some(&bias), StateBuffer::Linear, None, act).unwrap();
        let b = causal_conv1d_update(&x, dims, &mut ring, &w, Some(&bias), StateBuffer::Circular(&cs), None, act).unwrap();
        close("out", &b.out, &a.out);
        close("windows", &b.intermediate, &a.intermediate);
        if l <= sl {
            // Unroll the ring (newest before cs + l) and compare with the shift register.
            for bb in 0..batch {
                for d in 0..dim {
                    for i in 0..sl {
                        let j = (cs[bb] + l as i64 - sl as i64 + i as i64).rem_euclid(sl as i64) as usize;
                        let (got, want) = (ring[(bb * dim + d) * sl + j], lin[(bb * dim + d) * sl + i]);
                        prop_assert_eq!(got, want);
                    }
                }
            }
        }
        // Single steps: window after token t == the state's last width-1 columns after step t.
        let mut st = lin0.clone();
        let d1 = UpdateDims { seqlen: 1, ..dims };
        for t in 0..l {
            let o = causal_conv1d_update(&column(&x, batch * dim, l, t), d1, &mut st, &w, Some(&bias), StateBuffer::Linear, None, act).unwrap();
            close("step out", &o.out, &column(&a.out, batch * dim, l, t));
            for bb in 0..batch {
                for d in 0..dim {
                    let s = &st[(bb * dim + d) * sl + sl - hist..(bb * dim + d + 1) * sl];
                    let off = ((bb * l + t) * dim + d) * hist;
                    close("window", &a.intermediate[off..off + hist], s);
                }
            }
        }
    }
}

#[test]
fn pad_slot_gives_zero_output_and_leaves_slots_alone() {
    let mut r = Rng(1);
    let (batch, dim, width, sl, slots) = (3, 4, 4, 3, 5);
    let x = r.vec(batch * dim * 2);
    let w = r.vec(dim * width);
    let state0 = r.vec(slots * dim * sl);
    let mut state = state0.clone();
    let idx = [4i64, -1, 0];
    let dims = UpdateDims {
        batch,
        dim,
        seqlen: 2,
        width,
        slots,
        state_len: sl,
    };
    let o = causal_conv1d_update(
        &x,
        dims,
        &mut state,
        &w,
        None,
        StateBuffer::Linear,
        Some(&idx),
        Activation::Silu,
    )
    .unwrap();
    assert!(o.out[dim * 2..2 * dim * 2].iter().all(|&v| v == 0.0));
    assert!(o.out[..dim * 2].iter().all(|&v| v != 0.0));
    for s in [1, 2, 3] {
        assert_eq!(
            state[s * dim * sl..(s + 1) * dim * sl],
            state0[s * dim * sl..(s + 1) * dim * sl],
            "slot {s}"
        );
    }
    assert_ne!(state[4 * dim * sl..], state0[4 * dim * sl..]);
    // Row 0 used slot 4: same as running it alone on that slot.
    let mut alone = state0[4 * dim * sl..].to_vec();
    let d1 = UpdateDims {
        batch: 1,
        slots: 1,
        ..dims
    };
    let o1 = causal_conv1d_update(
        &x[..dim * 2],
        d1,
        &mut alone,
        &w,
        None,
        StateBuffer::Linear,
        None,
        Activation::Silu,
    )
    .unwrap();
    close("row 0", &o.out[..dim * 2], &o1.out);
}

#[test]
fn hand_computed_prefill() {
    // dim 1, width 3: out[t] = bias + w0 x[t-2] + w1 x[t-1] + w2 x[t].
    let x = [1.0f32, 2.0, -1.0, 0.5];
    let w = [0.5f32, -1.0, 2.0];
    let o = causal_conv1d_fn(
        &x,
        (1, 1, 4),
        &w,
        3,
        Some(&[0.25]),
        Some(&[3.0, -2.0]),
        Activation::None,
    )
    .unwrap();
    let wt = |a: f32, b: f32, c: f32| 0.25 + 0.5 * a - b + 2.0 * c;
    let want = [
        wt(3.0, -2.0, 1.0),
        wt(-2.0, 1.0, 2.0),
        wt(1.0, 2.0, -1.0),
        wt(2.0, -1.0, 0.5),
    ];
    close("out", &o.out, &want);
    close("final", &o.final_states, &[-1.0, 0.5]);
    // Short sequence without initial states: final_states is zero-padded on the left.
    let o = causal_conv1d_fn(&[7.0], (1, 1, 1), &w, 3, None, None, Activation::Silu).unwrap();
    let v: f32 = 14.0;
    close("silu", &o.out, &[v / (1.0 + (-v).exp())]);
    close("final short", &o.final_states, &[0.0, 7.0]);
}

fn map(items: Vec<(&str, Tensor)>) -> TensorMap {
    items.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

#[test]
fn ops_run_and_validate() {
    let mut r = Rng(2);
    let upd = reference::ops::find("causal_conv1d_update").unwrap();
    let pre = reference::ops::find("causal_conv1d_fn").unwrap();
    let m = map(vec![
        ("x", Tensor::from_f32_as(&[2, 3], &r.vec(6), DType::BF16)),
        ("conv_state", Tensor::from_f32(&[4, 3, 5], r.vec(60))),
        ("weight", Tensor::from_f32(&[3, 4], r.vec(12))),
        ("conv_state_indices", Tensor::from_i32(&[2], vec![3, -1])),
    ]);
    let o = upd
        .call(&m, &[("activation".into(), "silu".into())])
        .unwrap();
    assert_eq!(o["out"].shape, vec![2, 3]);
    assert_eq!(o["out"].dtype(), DType::BF16);
    assert_eq!(o["conv_state"].shape, vec![4, 3, 5]);
    assert!(!o.contains_key("intermediate_conv_window"));
    let mut bad = m.clone();
    bad.insert(
        "conv_state_indices".into(),
        Tensor::from_i32(&[2], vec![4, 0]),
    );
    let e = upd.call(&bad, &[]).unwrap_err().to_string();
    assert!(
        e.contains("conv_state_indices") && e.contains("4 slots"),
        "{e}"
    );
    let mut bad = m.clone();
    bad.insert("conv_state".into(), Tensor::from_f32(&[4, 3, 2], r.vec(24)));
    let e = upd.call(&bad, &[]).unwrap_err().to_string();
    assert!(e.contains("width - 1"), "{e}");
    let m3 = map(vec![
        ("x", Tensor::from_f32(&[1, 3, 5], r.vec(15))),
        ("weight", Tensor::from_f32(&[3, 4], r.vec(12))),
        ("bias", Tensor::from_f32(&[3], r.vec(3))),
    ]);
    let o = pre.call(&m3, &[]).unwrap();
    assert_eq!(o["final_states"].shape, vec![1, 3, 3]);
    let e = pre
        .call(&m3, &[("activation".into(), "relu".into())])
        .unwrap_err()
        .to_string();
    assert!(e.contains("activation"), "{e}");
}

/// `layout = channel_last`: x / out (batch, seqlen, dim) and the states (batch, width - 1,
/// dim) carry the channel-first op's values, transposed element for element (bit-equal), with
/// and without initial states, every width 1..=4; and a channel-first shape passed as
/// channel-last states is a shape error naming the layout.
#[test]
fn channel_last_layout_is_the_transposed_channel_first() {
    use reference::ops::causal_conv1d_fn::swap_last_two;
    let def = reference::ops::find("causal_conv1d_fn").expect("op");
    let mut r = Rng(41);
    for (batch, dim, seqlen, width, init) in [
        (1usize, 8usize, 5usize, 4usize, false),
        (2, 13, 9, 4, true),
        (3, 7, 2, 3, true),
        (1, 5, 1, 1, false),
        (2, 6, 17, 2, true),
    ] {
        let hist = width - 1;
        let x = r.vec(batch * dim * seqlen);
        let w = r.vec(dim * width);
        let b = r.vec(dim);
        let s0 = r.vec(batch * dim * hist);
        let mut cf = TensorMap::new();
        cf.insert(
            "x".into(),
            Tensor::from_f32(&[batch, dim, seqlen], x.clone()),
        );
        cf.insert("weight".into(), Tensor::from_f32(&[dim, width], w.clone()));
        cf.insert("bias".into(), Tensor::from_f32(&[dim], b.clone()));
        let mut cl = TensorMap::new();
        cl.insert(
            "x".into(),
            Tensor::from_f32(&[batch, seqlen, dim], swap_last_two(&x, batch, dim, seqlen)),
        );
        cl.insert("weight".into(), Tensor::from_f32(&[dim, width], w));
        cl.insert("bias".into(), Tensor::from_f32(&[dim], b));
        if init {
            cf.insert(
                "initial_states".into(),
                Tensor::from_f32(&[batch, dim, hist], s0.clone()),
            );
            cl.insert(
                "initial_states".into(),
                Tensor::from_f32(&[batch, hist, dim], swap_last_two(&s0, batch, dim, hist)),
            );
        }
        let sets = |layout: &str| {
            vec![
                ("activation".to_string(), "silu".to_string()),
                ("layout".to_string(), layout.to_string()),
            ]
        };
        let a = def
            .call(&cf, &sets("channel_first"))
            .expect("channel_first");
        let c = def.call(&cl, &sets("channel_last")).expect("channel_last");
        assert_eq!(c["out"].shape, vec![batch, seqlen, dim]);
        assert_eq!(c["final_states"].shape, vec![batch, hist, dim]);
        let want_out = swap_last_two(&a["out"].to_f32_vec(), batch, dim, seqlen);
        let want_fin = swap_last_two(&a["final_states"].to_f32_vec(), batch, dim, hist);
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(
            bits(&c["out"].to_f32_vec()),
            bits(&want_out),
            "{batch}x{dim}x{seqlen} w{width}"
        );
        assert_eq!(bits(&c["final_states"].to_f32_vec()), bits(&want_fin));
    }
    // Channel-first states with layout channel_last: a shape error that names the layout.
    let mut m = TensorMap::new();
    m.insert("x".into(), Tensor::from_f32(&[1, 6, 4], vec![0.5; 24]));
    m.insert("weight".into(), Tensor::from_f32(&[4, 4], vec![0.25; 16]));
    m.insert(
        "initial_states".into(),
        Tensor::from_f32(&[1, 4, 3], vec![0.1; 12]),
    );
    let e = def
        .call(&m, &[("layout".to_string(), "channel_last".to_string())])
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        e.contains("channel_last") && e.contains("initial_states"),
        "{e}"
    );
}

/// Channel-last edge shapes through the op: no tokens, no channels, no batch rows, width 1
/// (no states): valid calls with the layout's shapes and the right final states.
#[test]
fn channel_last_edge_shapes() {
    let def = reference::ops::find("causal_conv1d_fn").expect("op");
    let sets = [("layout".to_string(), "channel_last".to_string())];
    for (batch, seqlen, dim, width) in [
        (1usize, 0usize, 4usize, 4usize),
        (0, 3, 4, 2),
        (2, 3, 0, 3),
        (1, 5, 3, 1),
    ] {
        let mut m = TensorMap::new();
        m.insert(
            "x".into(),
            Tensor::from_f32(&[batch, seqlen, dim], vec![0.25; batch * seqlen * dim]),
        );
        m.insert(
            "weight".into(),
            Tensor::from_f32(&[dim, width], vec![0.5; dim * width]),
        );
        let o = def
            .call(&m, &sets)
            .unwrap_or_else(|e| panic!("{batch}x{seqlen}x{dim} w{width}: {e}"));
        assert_eq!(o["out"].shape, vec![batch, seqlen, dim]);
        assert_eq!(o["final_states"].shape, vec![batch, width - 1, dim]);
        // No tokens: the states are the zeros before them; otherwise the last tokens.
        let fin = o["final_states"].to_f32_vec();
        let want = if seqlen >= width - 1 { 0.25 } else { 0.0 };
        assert!(fin.iter().all(|&v| v == want), "{fin:?}");
    }
}
