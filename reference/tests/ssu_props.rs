//! Properties of selective_state_update, its multi-token form and mamba_cache_promote, run
//! through the op entry points (`ops::find(..).call`) as `duet run` does.

use proptest::prelude::*;
use reference::ops;
use reference::ops::selective_state_update::{sr_random_word, SrMapping};
use reference::{DType, Tensor, TensorMap};

/// SplitMix64 for test data.
struct Rng(u64);
impl Rng {
    fn u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn unif(&mut self, lo: f32, hi: f32) -> f32 {
        lo + (hi - lo) * ((self.u64() >> 40) as f32 / (1u64 << 24) as f32)
    }
    fn normal(&mut self) -> f32 {
        let u1 = self.unif(1e-7, 1.0);
        let u2 = self.unif(0.0, 1.0);
        (-2.0 * u1.ln()).sqrt() * (std::f32::consts::TAU * u2).cos()
    }
    fn vec(&mut self, n: usize, f: impl Fn(&mut Rng) -> f32) -> Vec<f32> {
        (0..n).map(|_| f(self)).collect()
    }
}

#[derive(Clone, Copy, Debug)]
struct Sh {
    batch: usize,
    t: usize,
    nheads: usize,
    ngroups: usize,
    dim: usize,
    dstate: usize,
    extra_slots: usize,
}

fn shapes() -> impl Strategy<Value = Sh> {
    (
        1usize..4,
        1usize..5,
        1usize..4,
        1usize..4,
        1usize..6,
        1usize..20,
        0usize..3,
    )
        .prop_map(|(batch, t, g, hpg, dim, dstate, extra)| Sh {
            batch,
            t,
            nheads: g * hpg,
            ngroups: g,
            dim,
            dstate,
            extra_slots: extra,
        })
}

fn f32t(shape: &[usize], v: Vec<f32>) -> Tensor {
    Tensor::from_f32(shape, v)
}

/// Multi-token inputs (x (batch, T, nheads, dim), ...), a state cache of `state_dtype` and
/// shuffled state_batch_indices.
fn gen(sh: Sh, seed: u64, state_dtype: DType) -> TensorMap {
    let mut r = Rng(seed);
    let Sh {
        batch,
        t,
        nheads,
        ngroups,
        dim,
        dstate,
        ..
    } = sh;
    let slots = batch + sh.extra_slots;
    let mut m = TensorMap::new();
    let sn = slots * nheads * dim * dstate;
    let state = r.vec(sn, |r| r.normal());
    if state_dtype == DType::I16 {
        // A valid int16 cache: quantize rows with the SPEC scale.
        let mut q = vec![0i16; sn];
        let mut sc = vec![0f32; sn / dstate];
        for (row, (qs, s)) in q.chunks_mut(dstate).zip(state.chunks(dstate)).enumerate() {
            let amax = s.iter().fold(0f32, |m, x| m.max(x.abs()));
            let enc = 32767.0 / amax;
            sc[row] = 1.0 / enc;
            for (o, &x) in qs.iter_mut().zip(s) {
                *o = (x * enc).round_ties_even() as i16;
            }
        }
        m.insert(
            "state".into(),
            Tensor::from_i16(&[slots, nheads, dim, dstate], q),
        );
        m.insert("state_scale".into(), f32t(&[slots, nheads, dim], sc));
    } else {
        m.insert(
            "state".into(),
            Tensor::from_f32_as(&[slots, nheads, dim, dstate], &state, state_dtype),
        );
    }
    let xs = [batch, t, nheads, dim];
    let n = batch * t * nheads * dim;
    m.insert("x".into(), f32t(&xs, r.vec(n, |r| r.normal())));
    m.insert("dt".into(), f32t(&xs, r.vec(n, |r| r.unif(0.0, 1.0))));
    m.insert("z".into(), f32t(&xs, r.vec(n, |r| r.normal())));
    m.insert(
        "A".into(),
        f32t(&[nheads], r.vec(nheads, |r| -r.unif(0.2, 3.0))),
    );
    let bs = [batch, t, ngroups, dstate];
    let bn = batch * t * ngroups * dstate;
    m.insert("B".into(), f32t(&bs, r.vec(bn, |r| r.normal())));
    m.insert("C".into(), f32t(&bs, r.vec(bn, |r| r.normal())));
    m.insert(
        "D".into(),
        f32t(&[nheads, dim], r.vec(nheads * dim, |r| r.normal())),
    );
    m.insert(
        "dt_bias".into(),
        f32t(&[nheads], r.vec(nheads, |r| r.unif(-0.2, 0.5))),
    );
    // A random injective map batch -> slots.
    let mut perm: Vec<i64> = (0..slots as i64).collect();
    for i in (1..slots).rev() {
        perm.swap(i, (r.u64() % (i as u64 + 1)) as usize);
    }
    m.insert(
        "state_batch_indices".into(),
        Tensor::from_i64(&[batch], perm[..batch].to_vec()),
    );
    m
}

/// Token t of a multi-token input map, as single-token inputs.
fn token(m: &TensorMap, t: usize, t_len: usize) -> TensorMap {
    let mut s = TensorMap::new();
    for (k, v) in m {
        if ["x", "dt", "z", "B", "C"].contains(&k.as_str()) {
            let inner: usize = v.shape[2..].iter().product();
            let d = v.to_f32_vec();
            let batch = v.shape[0];
            let mut o = Vec::with_capacity(batch * inner);
            for b in 0..batch {
                o.extend_from_slice(&d[(b * t_len + t) * inner..][..inner]);
            }
            let mut shape = vec![batch];
            shape.extend_from_slice(&v.shape[2..]);
            s.insert(k.clone(), f32t(&shape, o));
        } else {
            s.insert(k.clone(), v.clone());
        }
    }
    s
}

fn call(op: &str, m: &TensorMap, sets: &[(&str, String)]) -> TensorMap {
    let sets: Vec<(String, String)> = sets
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    ops::find(op).unwrap().call(m, &sets).unwrap()
}

fn sets(pairs: &[(&str, &str)]) -> Vec<(&'static str, String)> {
    pairs
        .iter()
        .map(|(k, v)| (&*Box::leak(k.to_string().into_boxed_str()), v.to_string()))
        .collect()
}

/// Rows `[b, t]` of a (batch, T, rest...) tensor as f32.
fn at_bt(v: &Tensor, b: usize, t: usize) -> Vec<f32> {
    let inner: usize = v.shape[2..].iter().product();
    v.to_f32_vec()[(b * v.shape[1] + t) * inner..][..inner].to_vec()
}
/// Slot `s` of a (slots, rest...) tensor as f32.
fn at_slot(v: &Tensor, s: usize) -> Vec<f32> {
    let inner: usize = v.shape[1..].iter().product();
    v.to_f32_vec()[s * inner..][..inner].to_vec()
}

fn slot_of(m: &TensorMap, b: usize) -> usize {
    m["state_batch_indices"].to_i64_vec().unwrap()[b] as usize
}

/// Runs T single-token calls (step t with seed + t), returning per-step (out, state map).
fn run_singles(m: &TensorMap, t_len: usize, extra: &[(&str, &str)]) -> Vec<TensorMap> {
    let mut cur = m.clone();
    let mut res = vec![];
    let seed0: u64 = extra
        .iter()
        .find(|(k, _)| *k == "seed")
        .map(|(_, v)| v.parse().unwrap())
        .unwrap_or(0);
    for t in 0..t_len {
        let mut inp = token(&cur, t, t_len);
        inp.retain(|k, _| k != "parent_indices");
        let mut s = sets(extra);
        s.retain(|(k, _)| *k != "seed" && *k != "chain_from");
        s.push(("seed", (seed0 + t as u64).to_string()));
        let o = call("selective_state_update", &inp, &s);
        cur.insert("state".into(), o["state"].clone());
        if let Some(sc) = o.get("state_scale") {
            cur.insert("state_scale".into(), sc.clone());
        }
        res.push(o);
    }
    res
}

fn check_multi_equals_singles(sh: Sh, seed: u64, dt: DType, extra: &[(&str, &str)]) {
    let m = gen(sh, seed, dt);
    let mut s = sets(extra);
    s.push(("dt_softplus", "true".into()));
    let mut e2: Vec<(&str, &str)> = extra.to_vec();
    e2.push(("dt_softplus", "true"));
    let multi = call("selective_state_update_multi_token", &m, &s);
    let singles = run_singles(&m, sh.t, &e2);
    for (t, o) in singles.iter().enumerate() {
        for b in 0..sh.batch {
            let slot = slot_of(&m, b);
            assert_eq!(
                at_bt(&multi["intermediate_states"], b, t),
                at_slot(&o["state"], slot),
                "intermediate state b={b} t={t} {sh:?} {dt}"
            );
            if let Some(sc) = o.get("state_scale") {
                assert_eq!(
                    at_bt(&multi["intermediate_state_scale"], b, t),
                    at_slot(sc, slot)
                );
            }
            let inner = sh.nheads * sh.dim;
            assert_eq!(
                at_bt(&multi["out"], b, t),
                o["out"].to_f32_vec()[b * inner..][..inner].to_vec(),
                "out b={b} t={t}"
            );
        }
    }
    assert_eq!(multi["state"], singles[sh.t - 1]["state"]);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn ssu_multi_token_equals_single_steps_f32(sh in shapes(), seed in any::<u64>()) {
        check_multi_equals_singles(sh, seed, DType::F32, &[]);
    }

    #[test]
    fn ssu_multi_token_stored_chain_equals_single_steps(sh in shapes(), seed in any::<u64>(),
            which in 0usize..3) {
        let dt = [DType::BF16, DType::F16, DType::I16][which];
        check_multi_equals_singles(sh, seed, dt,
            &[("chain_from", "stored_state"), ("out_from", "stored_state")]);
    }

    #[test]
    fn ssu_multi_token_sr_equals_single_steps(sh in shapes(), seed in any::<u64>(),
            group in any::<bool>()) {
        let map = if group { "group_of_4" } else { "word_per_element" };
        check_multi_equals_singles(sh, seed, DType::F16, &[("chain_from", "stored_state"),
            ("rounding", "stochastic"), ("sr_mapping", map), ("seed", "12345"),
            ("philox_rounds", "5")]);
    }

    #[test]
    fn ssu_disable_state_update_keeps_state(sh in shapes(), seed in any::<u64>()) {
        let m = gen(sh, seed, DType::BF16);
        let on = call("selective_state_update_multi_token", &m, &[]);
        let off = call("selective_state_update_multi_token", &m,
            &sets(&[("disable_state_update", "true")]));
        prop_assert_eq!(&off["state"], &m["state"]);
        prop_assert_eq!(&off["intermediate_states"], &on["intermediate_states"]);
        prop_assert_eq!(&off["out"], &on["out"]);
        prop_assert_ne!(&on["state"], &m["state"]);
    }

    #[test]
    fn ssu_promote_equals_running_accepted_tokens(sh in shapes(), seed in any::<u64>(),
            which in 0usize..3, width in 2usize..5) {
        let dt = [DType::F32, DType::BF16, DType::I16][which];
        let m = gen(sh, seed, dt);
        let verify = call("selective_state_update_multi_token", &m,
            &sets(&[("disable_state_update", "true")]));
        let mut r = Rng(seed ^ 0xABCD);
        let accepted: Vec<i64> = (0..sh.batch).map(|_| (r.u64() % (sh.t as u64 + 1)) as i64).collect();
        // Conv caches: conv_state (slots, cdim, w1); the window after token t is the last w1
        // columns of cat(conv_state, xc[..=t]) (built here by sliding).
        let (cdim, w1) = (3usize, width - 1);
        let slots = m["state"].shape[0];
        let conv = r.vec(slots * cdim * w1, |r| r.normal());
        let xc = r.vec(sh.batch * sh.t * cdim, |r| r.normal()); // (batch, T, cdim)
        let mut win = vec![0f32; sh.batch * sh.t * cdim * w1];
        for b in 0..sh.batch {
            let slot = slot_of(&m, b);
            for c in 0..cdim {
                let mut w: Vec<f32> = conv[(slot * cdim + c) * w1..][..w1].to_vec();
                for t in 0..sh.t {
                    w.remove(0);
                    w.push(xc[(b * sh.t + t) * cdim + c]);
                    win[((b * sh.t + t) * cdim + c) * w1..][..w1].copy_from_slice(&w);
                }
            }
        }
        let mut pm = TensorMap::new();
        pm.insert("state".into(), m["state"].clone());
        pm.insert("intermediate_states".into(), verify["intermediate_states"].clone());
        pm.insert("conv_state".into(), f32t(&[slots, cdim, w1], conv.clone()));
        pm.insert("intermediate_conv_window".into(), f32t(&[sh.batch, sh.t, cdim, w1], win));
        pm.insert("num_accepted".into(), Tensor::from_i32(&[sh.batch],
            accepted.iter().map(|&j| j as i32).collect()));
        pm.insert("state_batch_indices".into(), m["state_batch_indices"].clone());
        if dt == DType::I16 {
            pm.insert("state_scale".into(), m["state_scale"].clone());
            pm.insert("intermediate_state_scale".into(),
                verify["intermediate_state_scale"].clone());
        }
        let promoted = call("mamba_cache_promote", &pm, &[]);
        for b in 0..sh.batch {
            let slot = slot_of(&m, b);
            let j = accepted[b] as usize;
            // Expected SSM state: run only the first j tokens of row b (with state update).
            let expect = if j == 0 {
                at_slot(&m["state"], slot)
            } else {
                let mut sub = TensorMap::new();
                for (k, v) in &m {
                    if ["x", "dt", "z", "B", "C"].contains(&k.as_str()) {
                        let inner: usize = v.shape[2..].iter().product();
                        let d = v.to_f32_vec();
                        let mut shape = v.shape.clone();
                        shape[1] = j;
                        let mut o = vec![];
                        for bb in 0..sh.batch {
                            o.extend_from_slice(&d[bb * sh.t * inner..][..j * inner]);
                        }
                        sub.insert(k.clone(), f32t(&shape, o));
                    } else {
                        sub.insert(k.clone(), v.clone());
                    }
                }
                let run = call("selective_state_update_multi_token", &sub, &[]);
                if dt == DType::I16 {
                    prop_assert_eq!(at_slot(&promoted["state_scale"], slot),
                        at_slot(&run["state_scale"], slot));
                }
                at_slot(&run["state"], slot)
            };
            prop_assert_eq!(at_slot(&promoted["state"], slot), expect, "b={} j={}", b, j);
            // Expected conv window: last w1 columns of cat(conv_state, xc[b, ..j]).
            let pc = at_slot(&promoted["conv_state"], slot);
            for c in 0..cdim {
                let mut full: Vec<f32> = conv[(slot * cdim + c) * w1..][..w1].to_vec();
                full.extend((0..j).map(|t| xc[(b * sh.t + t) * cdim + c]));
                prop_assert_eq!(&pc[c * w1..][..w1], &full[full.len() - w1..]);
            }
        }
        // Slots no row points at are untouched.
        let used: Vec<usize> = (0..sh.batch).map(|b| slot_of(&m, b)).collect();
        for s in (0..slots).filter(|s| !used.contains(s)) {
            prop_assert_eq!(at_slot(&promoted["state"], s), at_slot(&m["state"], s));
        }
    }

    #[test]
    fn ssu_int16_error_bounded_by_scale(sh in shapes(), seed in any::<u64>()) {
        // The same starting values as an f32 cache and an int16 cache: s' is computed
        // identically, so the stored int16 value is within half a quantization step.
        let m16 = gen(sh, seed, DType::I16);
        let mut m32 = m16.clone();
        let deq: Vec<f32> = m16["state"].to_f32_vec().chunks(sh.dstate)
            .zip(m16["state_scale"].to_f32_vec())
            .flat_map(|(q, s)| q.iter().map(move |v| v * s).collect::<Vec<_>>())
            .collect();
        m32.insert("state".into(), f32t(&m16["state"].shape, deq));
        m32.remove("state_scale");
        let one16 = call("selective_state_update", &token(&m16, 0, sh.t), &[]);
        let one32 = call("selective_state_update", &token(&m32, 0, sh.t), &[]);
        // out comes from the unrounded state: identical.
        prop_assert_eq!(&one16["out"], &one32["out"]);
        let q = one16["state"].to_f32_vec();
        let sc = one16["state_scale"].to_f32_vec();
        let f = one32["state"].to_f32_vec();
        for (i, (&qv, &fv)) in q.iter().zip(&f).enumerate() {
            let dec = sc[i / sh.dstate];
            let err = (qv * dec - fv).abs();
            prop_assert!(err <= dec * 0.5 + 1e-6 * fv.abs() + 1e-30,
                "element {}: |{} - {}| = {} > decode/2 = {}", i, qv * dec, fv, err, dec / 2.0);
            prop_assert!(qv.abs() <= 32767.0);
        }
    }

    #[test]
    fn ssu_pad_modes(sh in shapes(), seed in any::<u64>(), pad_row in 0usize..3) {
        let mut m = token(&gen(sh, seed, DType::F32), 0, sh.t);
        let pad_row = pad_row % sh.batch;
        let mut idx = m["state_batch_indices"].to_i64_vec().unwrap();
        let pad_slot = idx[pad_row] as usize;
        idx[pad_row] = -1;
        m.insert("state_batch_indices".into(), Tensor::from_i64(&[sh.batch], idx));
        let inner = sh.nheads * sh.dim;
        let z = call("selective_state_update", &m, &[]);
        prop_assert!(z["out"].to_f32_vec()[pad_row * inner..][..inner].iter().all(|&v| v == 0.0));
        prop_assert_eq!(at_slot(&z["state"], pad_slot), at_slot(&m["state"], pad_slot));
        let c = call("selective_state_update", &m,
            &sets(&[("pad_mode", "compute_from_zero_state")]));
        prop_assert_eq!(at_slot(&c["state"], pad_slot), at_slot(&m["state"], pad_slot));
        prop_assert_eq!(&c["state"], &z["state"]);
        // Expected: the same row run against an explicitly zeroed slot.
        let mut mz = m.clone();
        let mut st = m["state"].to_f32_vec();
        let per = inner * sh.dstate;
        st[pad_slot * per..][..per].fill(0.0);
        mz.insert("state".into(), f32t(&m["state"].shape, st));
        let mut idx = m["state_batch_indices"].to_i64_vec().unwrap();
        idx[pad_row] = pad_slot as i64;
        mz.insert("state_batch_indices".into(), Tensor::from_i64(&[sh.batch], idx));
        let e = call("selective_state_update", &mz, &[]);
        prop_assert_eq!(&c["out"], &e["out"]);
        prop_assert!(c["out"].to_f32_vec()[pad_row * inner..][..inner].iter().any(|&v| v != 0.0));
        // Multi-token: zero_output gives zero out rows; compute_from_zero_state matches.
        let mut mm = gen(sh, seed, DType::F32);
        mm.insert("state_batch_indices".into(), m["state_batch_indices"].clone());
        let mz_ = call("selective_state_update_multi_token", &mm, &[]);
        for t in 0..sh.t {
            prop_assert!(at_bt(&mz_["out"], pad_row, t).iter().all(|&v| v == 0.0));
        }
        prop_assert_eq!(at_slot(&mz_["state"], pad_slot), at_slot(&m["state"], pad_slot));
    }

    #[test]
    fn ssu_out_from_modes_differ_only_by_state_rounding(sh in shapes(), seed in any::<u64>()) {
        let stored = sets(&[("out_from", "stored_state")]);
        let m = token(&gen(sh, seed, DType::F32), 0, sh.t);
        let a = call("selective_state_update", &m, &[]);
        let b = call("selective_state_update", &m, &stored);
        prop_assert_eq!(&a, &b);
        let m = token(&gen(sh, seed, DType::BF16), 0, sh.t);
        let mut m32 = m.clone();
        m32.insert("state".into(), f32t(&m["state"].shape, m["state"].to_f32_vec()));
        let a = call("selective_state_update", &m, &[]);
        let b = call("selective_state_update", &m, &stored);
        let f = call("selective_state_update", &m32, &[]);
        prop_assert_eq!(&a["state"], &b["state"]);
        // Default mode: out from the unrounded state, so identical to an f32 cache.
        prop_assert_eq!(&a["out"], &f["out"]);
        // stored_state: differs by at most |gate| * sum_n |s' - bf16(s')| |C_n| (+ slack).
        let (oa, ob) = (a["out"].to_f32_vec(), b["out"].to_f32_vec());
        let (sf, sb) = (f["state"].to_f32_vec(), b["state"].to_f32_vec());
        let (z, c) = (m["z"].to_f32_vec(), m["C"].to_f32_vec());
        let mut differ = 0;
        for bb in 0..sh.batch {
            let slot = slot_of(&m, bb);
            for h in 0..sh.nheads {
                let g = h / (sh.nheads / sh.ngroups);
                for d in 0..sh.dim {
                    let i = (bb * sh.nheads + h) * sh.dim + d;
                    let row = ((slot * sh.nheads + h) * sh.dim + d) * sh.dstate;
                    let gate = (z[i] / (1.0 + (-z[i]).exp())).abs();
                    let err: f32 = (0..sh.dstate)
                        .map(|n| (sf[row + n] - sb[row + n]).abs() * c[(bb * sh.ngroups + g) * sh.dstate + n].abs())
                        .sum();
                    let bound = gate * err * 1.001 + 1e-5 * (1.0 + oa[i].abs());
                    prop_assert!((oa[i] - ob[i]).abs() <= bound, "{} vs {} > {}", oa[i], ob[i], bound);
                    differ += (oa[i] != ob[i]) as usize;
                }
            }
        }
        prop_assert!(differ > 0 || sh.batch * sh.nheads * sh.dim < 4);
    }

    #[test]
    fn ssu_parent_indices_follow_the_tree(sh in shapes(), seed in any::<u64>()) {
        prop_assume!(sh.t >= 3);
        // Tree: 0 <- 1, 0 <- 2 (2's parent is 0, skipping 1). Step 2 must equal step 1 of a
        // linear run over tokens (0, 2).
        let m = gen(sh, seed, DType::F32);
        let mut tree = m.clone();
        let mut par = vec![-1i64; sh.batch * sh.t];
        for b in 0..sh.batch { par[b * sh.t + 2] = 0; }
        tree.insert("parent_indices".into(), Tensor::from_i64(&[sh.batch, sh.t], par));
        let got = call("selective_state_update_multi_token", &tree, &[]);
        let mut lin = TensorMap::new();
        for (k, v) in &m {
            if ["x", "dt", "z", "B", "C"].contains(&k.as_str()) {
                let inner: usize = v.shape[2..].iter().product();
                let d = v.to_f32_vec();
                let mut o = vec![];
                for b in 0..sh.batch {
                    for t in [0, 2] {
                        o.extend_from_slice(&d[(b * sh.t + t) * inner..][..inner]);
                    }
                }
                let mut shape = v.shape.clone();
                shape[1] = 2;
                lin.insert(k.clone(), f32t(&shape, o));
            } else {
                lin.insert(k.clone(), v.clone());
            }
        }
        let want = call("selective_state_update_multi_token", &lin, &[]);
        for b in 0..sh.batch {
            prop_assert_eq!(at_bt(&got["out"], b, 2), at_bt(&want["out"], b, 1));
            prop_assert_eq!(at_bt(&got["intermediate_states"], b, 2),
                at_bt(&want["intermediate_states"], b, 1));
        }
    }

    #[test]
    fn ssu_broadcast_forms_agree(sh in shapes(), seed in any::<u64>()) {
        // A (nheads,) == A (nheads, dim, dstate) broadcast; dt (batch, nheads) == broadcast;
        // dt_bias (nheads,) == (nheads, dim).
        let mut m = token(&gen(sh, seed, DType::F32), 0, sh.t);
        let mut r = Rng(seed);
        let dth = r.vec(sh.batch * sh.nheads, |r| r.unif(-2.0, 1.0));
        m.insert("dt".into(), f32t(&[sh.batch, sh.nheads], dth.clone()));
        let a = call("selective_state_update", &m, &sets(&[("dt_softplus", "true")]));
        let mut full = m.clone();
        let av = m["A"].to_f32_vec();
        let per = sh.dim * sh.dstate;
        full.insert("A".into(), f32t(&[sh.nheads, sh.dim, sh.dstate],
            (0..sh.nheads * per).map(|i| av[i / per]).collect()));
        full.insert("dt".into(), f32t(&[sh.batch, sh.nheads, sh.dim],
            (0..sh.batch * sh.nheads * sh.dim).map(|i| dth[i / sh.dim]).collect()));
        let bv = m["dt_bias"].to_f32_vec();
        full.insert("dt_bias".into(), f32t(&[sh.nheads, sh.dim],
            (0..sh.nheads * sh.dim).map(|i| bv[i / sh.dim]).collect()));
        let b = call("selective_state_update", &full, &sets(&[("dt_softplus", "true")]));
        prop_assert_eq!(a, b);
    }
}

#[test]
fn ssu_hand_computed_1x1x2x2() {
    // state [[0.5, -1], [2, 0.25]], x [1, -2], dt [0.5, 0.25] + dt_bias [0.1, -0.05] = [0.6, 0.2],
    // A = -1, B [1, 2], C [0.5, -1], D [1, 0.5], z [0.3, -0.7]; no softplus.
    // d=0: dA = e^-0.6 = 0.548811636; s' = [0.5*dA + 0.6*1*1, -dA + 0.6*2*1]
    //      = [0.874405818, 0.651188364]; y = 0.437202909 - 0.651188364 + 1*1 = 0.786014545;
    //      silu(0.3) = 0.3/(1+e^-0.3) = 0.172332755 -> out 0.135456052
    // d=1: dA = e^-0.2 = 0.818730753; s' = [2*dA + 0.2*1*(-2), 0.25*dA + 0.2*2*(-2)]
    //      = [1.237461506, -0.595317312]; y = 0.618730753 + 0.595317312 - 1 = 0.214048065;
    //      silu(-0.7) = -0.7/(1+e^0.7) = -0.232268559 -> out -0.049716636
    let mut m = TensorMap::new();
    m.insert(
        "state".into(),
        f32t(&[1, 1, 2, 2], vec![0.5, -1.0, 2.0, 0.25]),
    );
    m.insert("x".into(), f32t(&[1, 1, 2], vec![1.0, -2.0]));
    m.insert("dt".into(), f32t(&[1, 1, 2], vec![0.5, 0.25]));
    m.insert("dt_bias".into(), f32t(&[1, 2], vec![0.1, -0.05]));
    m.insert("A".into(), f32t(&[1], vec![-1.0]));
    m.insert("B".into(), f32t(&[1, 1, 2], vec![1.0, 2.0]));
    m.insert("C".into(), f32t(&[1, 1, 2], vec![0.5, -1.0]));
    m.insert("D".into(), f32t(&[1, 2], vec![1.0, 0.5]));
    m.insert("z".into(), f32t(&[1, 1, 2], vec![0.3, -0.7]));
    let o = call("selective_state_update", &m, &[]);
    let want_s: [f64; 4] = [0.874405818, 0.651188364, 1.237461506, -0.595317312];
    let want_o: [f64; 2] = [0.135456052, -0.049716636];
    for (g, w) in o["state"].to_f32_vec().iter().zip(want_s) {
        assert!((*g as f64 - w).abs() < 2e-6, "state {g} vs {w}");
    }
    for (g, w) in o["out"].to_f32_vec().iter().zip(want_o) {
        assert!((*g as f64 - w).abs() < 2e-6, "out {g} vs {w}");
    }
    // Softplus: dt' = log1p(exp(0.6)) = 1.037488..., different result.
    let s = call(
        "selective_state_update",
        &m,
        &sets(&[("dt_softplus", "true")]),
    );
    assert!((s["out"].to_f32_vec()[0] as f64 - want_o[0]).abs() > 1e-3);
}

#[test]
fn ssu_headless_form_equals_one_head() {
    let sh = Sh {
        batch: 3,
        t: 1,
        nheads: 1,
        ngroups: 1,
        dim: 5,
        dstate: 7,
        extra_slots: 0,
    };
    let m = token(&gen(sh, 9, DType::F32), 0, 1);
    let mut h = TensorMap::new();
    let drop_head = |t: &Tensor, axis: usize| {
        let mut s = t.shape.clone();
        s.remove(axis);
        f32t(&s, t.to_f32_vec())
    };
    h.insert("state".into(), drop_head(&m["state"], 1));
    for k in ["x", "dt", "z", "B", "C"] {
        h.insert(k.into(), drop_head(&m[k], 1));
    }
    h.insert("A".into(), f32t(&[5, 7], vec![m["A"].to_f32_vec()[0]; 35]));
    h.insert("D".into(), drop_head(&m["D"], 0));
    let mut m2 = m.clone();
    m2.remove("dt_bias");
    m2.remove("state_batch_indices");
    let a = call("selective_state_update", &m2, &[]);
    let b = call("selective_state_update", &h, &[]);
    assert_eq!(a["out"].to_f32_vec(), b["out"].to_f32_vec());
    assert_eq!(a["state"].to_f32_vec(), b["state"].to_f32_vec());
    assert_eq!(b["out"].shape, vec![3, 5]);
}

#[test]
fn ssu_sr_lands_on_neighbours_and_is_unbiased() {
    // 4096 state elements; each seed gives one SR draw per element. Over 256 seeds the mean of
    // (stored - s') / ulp must be ~0 (|mean| < 4 sigma), and every stored value is one of the
    // two f16 neighbours of the fp32 s'.
    let sh = Sh {
        batch: 2,
        t: 1,
        nheads: 4,
        ngroups: 2,
        dim: 4,
        dstate: 128,
        extra_slots: 0,
    };
    let m = token(&gen(sh, 3, DType::F16), 0, 1);
    let exact = {
        let mut m32 = m.clone();
        m32.insert(
            "state".into(),
            f32t(&m["state"].shape, m["state"].to_f32_vec()),
        );
        call("selective_state_update", &m32, &[])["state"].to_f32_vec()
    };
    for map in ["group_of_4", "word_per_element"] {
        let mut sum_frac = 0f64;
        let mut sum_var = 0f64;
        let mut n = 0f64;
        let mut up = 0usize;
        for seed in 0..256u64 {
            let o = call(
                "selective_state_update",
                &m,
                &sets(&[
                    ("rounding", "stochastic"),
                    ("sr_mapping", map),
                    ("seed", &seed.to_string()),
                ]),
            );
            for (&g, &e) in o["state"].to_f32_vec().iter().zip(&exact) {
                if e.abs() < 6.2e-5 || e.abs() > 65000.0 {
                    continue; // outside the f16 normal range SR is not unbiased (SPEC.md)
                }
                let lo = half::f16::from_f32(e);
                let lo = if lo.to_f32().abs() > e.abs() {
                    half::f16::from_bits(lo.to_bits() - 1)
                } else {
                    lo
                };
                let hi = half::f16::from_bits(lo.to_bits() + 1);
                assert!(
                    g == lo.to_f32() || g == hi.to_f32(),
                    "{g} not a neighbour of {e}"
                );
                let ulp = (hi.to_f32() - lo.to_f32()).abs() as f64;
                let p = (e - lo.to_f32()).abs() as f64 / ulp;
                let got = (g - lo.to_f32()).abs() as f64 / ulp;
                if got > 0.5 {
                    up += 1;
                }
                sum_frac += got - p;
                assert!(p.is_finite() && got.is_finite(), "{e} {g} {lo} {hi}");
                sum_var += p * (1.0 - p);
                n += 1.0;
            }
        }
        let bias = sum_frac / n;
        let sigma = sum_var.sqrt() / n;
        assert!(
            bias.abs() < 4.0 * sigma,
            "{map}: bias {bias} sigma {sigma} n {n} var {sum_var}"
        );
        assert!(up > 1000, "{map}: never rounded up?");
    }
}

#[test]
fn ssu_sr_uses_documented_philox_words() {
    // One element: the stored bits equal stochastic_round_f16_bits(s', word) with the word
    // named by the mapping.
    let sh = Sh {
        batch: 1,
        t: 1,
        nheads: 2,
        ngroups: 1,
        dim: 3,
        dstate: 5,
        extra_slots: 2,
    };
    let m = token(&gen(sh, 77, DType::F16), 0, 1);
    let mut m32 = m.clone();
    m32.insert(
        "state".into(),
        f32t(&m["state"].shape, m["state"].to_f32_vec()),
    );
    let exact = call("selective_state_update", &m32, &[])["state"].to_f32_vec();
    for (name, map) in [
        ("group_of_4", SrMapping::GroupOf4),
        ("word_per_element", SrMapping::WordPerElement),
    ] {
        let o = call(
            "selective_state_update",
            &m,
            &sets(&[
                ("rounding", "stochastic"),
                ("sr_mapping", name),
                ("seed", "987654321987"),
                ("philox_rounds", "7"),
            ]),
        );
        let bits = o["state"].as_u16_bits().unwrap().to_vec();
        let slot = slot_of(&m, 0);
        let per = 2 * 3 * 5;
        for i in slot * per..(slot + 1) * per {
            let w = sr_random_word(987654321987, 7, map, i as u64);
            let want = reference::num::stochastic_round_f16_bits(exact[i], w);
            assert_eq!(bits[i], want, "{name} element {i}");
        }
    }
}

#[test]
fn ssu_rejects_bad_inputs_with_clear_errors() {
    let sh = Sh {
        batch: 2,
        t: 1,
        nheads: 2,
        ngroups: 1,
        dim: 3,
        dstate: 4,
        extra_slots: 0,
    };
    let m = token(&gen(sh, 1, DType::F32), 0, 1);
    let op = ops::find("selective_state_update").unwrap();
    let mut bad = m.clone();
    bad.insert(
        "state_batch_indices".into(),
        Tensor::from_i64(&[2], vec![0, 0]),
    );
    let e = op.call(&bad, &[]).unwrap_err().to_string();
    assert!(e.contains("repeats a slot"), "{e}");
    let mut bad = m.clone();
    bad.insert(
        "state_batch_indices".into(),
        Tensor::from_i64(&[2], vec![0, 5]),
    );
    let e = op.call(&bad, &[]).unwrap_err().to_string();
    assert!(e.contains("state_batch_indices[1] = 5"), "{e}");
    let mut bad = m.clone();
    bad.insert("B".into(), f32t(&[2, 3, 4], vec![1.0; 24]));
    let e = op.call(&bad, &[]).unwrap_err().to_string();
    assert!(e.contains("'C'") || e.contains("ngroups"), "{e}");
    let e = op
        .call(&m, &[("rounding".into(), "stochastic".into())])
        .unwrap_err()
        .to_string();
    assert!(e.contains("f16 state only"), "{e}");
    let mut bad = m.clone();
    bad.insert("state".into(), Tensor::from_i16(&[2, 2, 3, 4], vec![1; 48]));
    let e = op.call(&bad, &[]).unwrap_err().to_string();
    assert!(e.contains("state_scale"), "{e}");
}
