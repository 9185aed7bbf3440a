//! Cases of `selective_state_update_multi_token` (MTP verification: T decode steps with every
//! intermediate state) and `mamba_cache_promote` (accepting j tokens). Base rows at the Nemotron
//! 3 Super mixer shape (batch 2, T 4); others change one thing: state dtype, odd sizes, EAGLE
//! parents, pad rows, disable_state_update, stochastic rounding.

use super::selective_state_update::{cost, finish, make_inputs, state_tol, Spec, SCALE_TOL, SUPER};
use crate::case::{Case, CaseDef, Variant};
use crate::gen::Rng;
use crate::tolerance::Tolerance;
use reference::{DType, Tensor, TensorMap};

const OP: &str = "selective_state_update_multi_token";
const MODEL: &str = "Nemotron 3 Super Mamba-2 mixer (MTP verify)";

fn case(spec: Spec, what: &str, parents: bool) -> CaseDef {
    let (bytes, flops) = cost(spec, true);
    let c = CaseDef::new(OP, move |seed| {
        let mut m = make_inputs(spec, seed, true);
        if parents {
            // A tree: step t's parent is a random earlier step (or -1 = t-1).
            let mut r = Rng::new(seed ^ 0x7A3E);
            let p: Vec<i64> = (0..spec.batch * spec.t)
                .map(|i| {
                    let t = (i % spec.t) as u64;
                    if t == 0 {
                        -1
                    } else {
                        r.below(t + 1) as i64 - 1
                    }
                })
                .collect();
            m.insert(
                "parent_indices".into(),
                Tensor::from_i64(&[spec.batch, spec.t], p),
            );
        }
        m
    })
    .var("batch", spec.batch)
    .var("T", spec.t)
    .var("nheads", spec.nheads)
    .var("ngroups", spec.ngroups)
    .var("dim", spec.dim)
    .var("dstate", spec.dstate)
    .var("state", spec.state.name());
    finish(c, spec, what, MODEL)
        .tol("intermediate_states", state_tol(spec.state))
        .tol("intermediate_state_scale", SCALE_TOL)
        .cost(bytes, flops)
}

pub fn cases() -> Vec<Box<dyn Case>> {
    let exact = Tolerance::Exact;
    let base = Spec { t: 4, ..SUPER };
    let mut v = vec![];
    v.push(
        case(base, "", false)
            .variant(Variant::new(
                "chain_from=stored_state (f32: same)",
                &[("chain_from", "stored_state"), ("out_from", "stored_state")],
                &[
                    ("out", exact),
                    ("intermediate_states", exact),
                    ("state", exact),
                ],
            ))
            .variant(Variant::new(
                "disable_state_update (same out and intermediates)",
                &[("disable_state_update", "true")],
                &[("out", exact), ("intermediate_states", exact)],
            ))
            .boxed(),
    );
    let bf16 = Spec {
        state: DType::BF16,
        t: 3,
        ..SUPER
    };
    v.push(
        case(bf16, "", false)
            .variant(Variant::new(
                "chain_from=stored_state (T single-token calls)",
                &[("chain_from", "stored_state")],
                // Rounding drift over 128 state columns and 3 steps: NMSE (see the
                // single-token bf16 row).
                &[
                    ("out", Tolerance::Nmse { max: 2e-5 }),
                    ("intermediate_states", Tolerance::for_dtype(DType::BF16)),
                ],
            ))
            .boxed(),
    );
    v.push(
        case(
            Spec {
                state: DType::I16,
                t: 2,
                ..SUPER
            },
            "",
            false,
        )
        .boxed(),
    );
    v.push(
        case(
            Spec {
                state: DType::F16,
                t: 3,
                ..SUPER
            },
            "sr",
            false,
        )
        .param("rounding", "stochastic")
        .param("philox_rounds", 5)
        .param("seed", 77)
        .boxed(),
    );
    let odd = Spec {
        batch: 3,
        t: 5,
        nheads: 6,
        ngroups: 2,
        dim: 9,
        dstate: 21,
        a_full: true,
        dt_per_head: true,
        extra_slots: 1,
        ..SUPER
    };
    v.push(case(odd, "A_full,dt_per_head,tree", true).boxed());
    v.push(
        case(
            Spec {
                batch: 4,
                pad_rows: 1,
                t: 3,
                ..odd
            },
            "pad",
            false,
        )
        .param("disable_state_update", "true")
        .variant(Variant::new(
            "pad_mode=compute_from_zero_state (state never written)",
            &[("pad_mode", "compute_from_zero_state")],
            &[("state", exact)],
        ))
        .boxed(),
    );
    v.extend(promote_cases());
    v
}

#[derive(Clone, Copy)]
struct PromoteSpec {
    batch: usize,
    t: usize,
    slots: usize,
    nheads: usize,
    dim: usize,
    dstate: usize,
    conv_dim: usize,
    width: usize,
    state: DType,
}

fn promote_inputs(s: PromoteSpec, seed: u64) -> TensorMap {
    let mut r = Rng::new(seed);
    let mut m = TensorMap::new();
    let (sh, ish) = (
        [s.slots, s.nheads, s.dim, s.dstate],
        [s.batch, s.t, s.nheads, s.dim, s.dstate],
    );
    if s.state == DType::I16 {
        let q = |r: &mut Rng, n: usize| -> Vec<i16> {
            (0..n)
                .map(|_| (r.below(65535) as i32 - 32767) as i16)
                .collect()
        };
        let ns: usize = sh.iter().product();
        let ni: usize = ish.iter().product();
        m.insert("state".into(), Tensor::from_i16(&sh, q(&mut r, ns)));
        m.insert(
            "intermediate_states".into(),
            Tensor::from_i16(&ish, q(&mut r, ni)),
        );
        m.insert(
            "state_scale".into(),
            r.uniform_tensor(&sh[..3], 1e-5, 1e-4, DType::F32),
        );
        m.insert(
            "intermediate_state_scale".into(),
            r.uniform_tensor(&ish[..4], 1e-5, 1e-4, DType::F32),
        );
    } else {
        m.insert("state".into(), r.normal_tensor(&sh, 1.0, s.state));
        m.insert(
            "intermediate_states".into(),
            r.normal_tensor(&ish, 1.0, s.state),
        );
    }
    let w1 = s.width - 1;
    m.insert(
        "conv_state".into(),
        r.normal_tensor(&[s.slots, s.conv_dim, w1], 1.0, DType::BF16),
    );
    m.insert(
        "intermediate_conv_window".into(),
        r.normal_tensor(&[s.batch, s.t, s.conv_dim, w1], 1.0, DType::BF16),
    );
    // j = 0 on row 0 (slot untouched), j = T on the last row, random in between.
    let acc: Vec<i32> = (0..s.batch)
        .map(|b| match b {
            0 => 0,
            b if b == s.batch - 1 => s.t as i32,
            _ => r.below(s.t as u64 + 1) as i32,
        })
        .collect();
    m.insert("num_accepted".into(), Tensor::from_i32(&[s.batch], acc));
    let mut perm: Vec<i64> = (0..s.slots as i64).collect();
    for i in (1..s.slots).rev() {
        perm.swap(i, r.below(i as u64 + 1) as usize);
    }
    m.insert(
        "state_batch_indices".into(),
        Tensor::from_i64(&[s.batch], perm[..s.batch].to_vec()),
    );
    m
}

fn promote_cases() -> Vec<Box<dyn Case>> {
    // Super: conv dim = d_inner + 2 * ngroups * dstate = 8192 + 2048, kernel width 4.
    let sup = PromoteSpec {
        batch: 3,
        t: 4,
        slots: 5,
        nheads: 128,
        dim: 64,
        dstate: 128,
        conv_dim: 10240,
        width: 4,
        state: DType::F32,
    };
    let odd = PromoteSpec {
        batch: 4,
        t: 3,
        slots: 7,
        nheads: 3,
        dim: 5,
        dstate: 9,
        conv_dim: 11,
        width: 2,
        state: DType::BF16,
    };
    let i16s = PromoteSpec {
        state: DType::I16,
        width: 3,
        ..odd
    };
    [(sup, MODEL), (odd, ""), (i16s, "")]
        .into_iter()
        .map(|(s, model)| {
            let per_row = (s.nheads * s.dim * s.dstate * s.state.size()
                + s.conv_dim * (s.width - 1) * 2) as u64;
            CaseDef::new("mamba_cache_promote", move |seed| promote_inputs(s, seed))
                .var("batch", s.batch)
                .var("T", s.t)
                .var("nheads", s.nheads)
                .var("dim", s.dim)
                .var("dstate", s.dstate)
                .var("conv_dim", s.conv_dim)
                .var("width", s.width)
                .var("state", s.state.name())
                .model(model)
                .tol("state", Tolerance::Exact)
                .tol("conv_state", Tolerance::Exact)
                .tol("state_scale", Tolerance::Exact)
                .cost(2 * per_row * s.batch as u64, 0)
                .boxed()
        })
        .collect()
}
