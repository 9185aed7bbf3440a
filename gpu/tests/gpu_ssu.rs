//! selective_state_update v1 on the GPU against the reference: random odd shapes over every
//! state dtype, pad mode and out_from mode; stochastic rounding of an f16 state bit-exact for
//! both Philox mappings; a state cache whose element offsets pass 2^31. `#[ignore = "gpu"]`.

mod common;

use compare::gen::Rng;
use compare::Tolerance;
use reference::{DType, Tensor, TensorMap};

struct Shape {
    batch: usize,
    slots: usize,
    nheads: usize,
    dim: usize,
    dstate: usize,
    ngroups: usize,
}

fn inputs(r: &mut Rng, s: &Shape, state_dt: DType, with_opts: bool, pads: bool) -> TensorMap {
    let mut m = TensorMap::new();
    let st = r.normal_tensor(
        &[s.slots, s.nheads, s.dim, s.dstate],
        1.0,
        if state_dt == DType::I16 {
            DType::F32
        } else {
            state_dt
        },
    );
    if state_dt == DType::I16 {
        // Quantize the f32 draw row by row into q + scale (what a cache would hold).
        let v = st.to_f32_vec();
        let (mut q, mut sc) = (vec![], vec![]);
        for row in v.chunks(s.dstate) {
            let amax = row.iter().fold(0f32, |a, x| a.max(x.abs()));
            let enc = 32767.0 / amax;
            sc.push(1.0 / enc);
            q.extend(row.iter().map(|x| (x * enc).round_ties_even() as i16));
        }
        m.insert(
            "state".into(),
            Tensor::from_i16(&[s.slots, s.nheads, s.dim, s.dstate], q),
        );
        m.insert(
            "state_scale".into(),
            Tensor::from_f32(&[s.slots, s.nheads, s.dim], sc),
        );
    } else {
        m.insert("state".into(), st);
    }
    m.insert(
        "x".into(),
        r.normal_tensor(&[s.batch, s.nheads, s.dim], 1.0, DType::BF16),
    );
    m.insert(
        "dt".into(),
        r.uniform_tensor(&[s.batch, s.nheads, s.dim], -3.0, 1.0, DType::F32),
    );
    m.insert(
        "A".into(),
        r.uniform_tensor(&[s.nheads], -4.0, -0.5, DType::F32),
    );
    m.insert(
        "B".into(),
        r.normal_tensor(&[s.batch, s.ngroups, s.dstate], 1.0, DType::BF16),
    );
    m.insert(
        "C".into(),
        r.normal_tensor(&[s.batch, s.ngroups, s.dstate], 1.0, DType::BF16),
    );
    if with_opts {
        m.insert(
            "D".into(),
            r.normal_tensor(&[s.nheads, s.dim], 1.0, DType::F32),
        );
        m.insert(
            "z".into(),
            r.normal_tensor(&[s.batch, s.nheads, s.dim], 1.0, DType::BF16),
        );
        m.insert(
            "dt_bias".into(),
            r.uniform_tensor(&[s.nheads], -2.0, 0.5, DType::F32),
        );
    }
    if pads || s.slots != s.batch {
        // A permutation of distinct slots; row 1 padded when asked.
        let mut idx: Vec<i64> = (0..s.slots as i64).collect();
        for i in (1..idx.len()).rev() {
            idx.swap(i, r.below(i as u64 + 1) as usize);
        }
        idx.truncate(s.batch);
        if pads && s.batch > 1 {
            idx[1] = -1;
        }
        m.insert(
            "state_batch_indices".into(),
            Tensor::from_i64(&[s.batch], idx),
        );
    }
    m
}

/// The comma-separated versions in env `var` (None when unset); a name not in `known` fails
/// the test rather than leaving nothing to test.
fn env_versions(var: &str, known: &[&str]) -> Option<Vec<String>> {
    let only: Vec<String> = std::env::var(var)
        .ok()?
        .split(',')
        .map(|v| v.trim().to_string())
        .collect();
    for v in &only {
        assert!(
            known.contains(&v.as_str()),
            "{var}: {v} is not one of {known:?}"
        );
    }
    Some(only)
}

/// The walk tests' inputs: random state / x / B / C / z with pad slots, dt / D / dt_bias per
/// head (the Super decode's layout, so v11 hoists the heads' values).
fn walk_inputs(r: &mut Rng, s: &Shape, state_dt: DType) -> TensorMap {
    let mut inp = inputs(r, s, state_dt, true, true);
    inp.insert(
        "dt".into(),
        r.uniform_tensor(&[s.batch, s.nheads], -3.0, 1.0, DType::F32),
    );
    inp.insert("D".into(), r.normal_tensor(&[s.nheads], 1.0, DType::F32));
    inp.insert(
        "dt_bias".into(),
        r.uniform_tensor(&[s.nheads], -2.0, 0.5, DType::F32),
    );
    inp
}

/// `common::diff` of one version against the reference with `tol(state_dt)`; a failure's report
/// goes into `fails` (the tests report every failing case, not the first).
fn diff_into(
    fails: &mut Vec<String>,
    version: &str,
    name: &str,
    inp: &TensorMap,
    sets: &[(String, String)],
    state_dt: DType,
) {
    if let Err(e) = common::diff(
        "selective_state_update",
        version,
        name,
        inp,
        sets,
        &tol(state_dt),
    ) {
        fails.push(e);
    }
}

fn tol(state_dt: DType) -> impl Fn(&str, &Tensor) -> Tolerance {
    move |name: &str, t: &Tensor| match name {
        // The stored state is bit-exact by construction (same fp32 operation order, exp in f64).
        "state" | "state_scale" => Tolerance::Exact,
        _ => {
            let _ = state_dt;
            Tolerance::for_dtype(t.dtype())
        }
    }
}

#[test]
#[ignore = "gpu"]
fn ssu_random_shapes_every_mode() {
    let mut r = Rng::new(2024);
    let mut fails = vec![];
    let mut n = 0;
    let mut n_v3 = 0;
    let mut n_v9 = 0;
    for i in 0..36 {
        let ngroups = [1usize, 2, 4][i % 3];
        let s = Shape {
            batch: 1 + r.below(7) as usize,
            slots: 0,
            nheads: ngroups * (1 + r.below(3) as usize),
            dim: 1 + r.below(70) as usize,
            // Every ninth case at the Super dstate (128), so v9 always runs.
            dstate: match [1usize, 16, 33, 64, 128, 200, 256][r.below(7) as usize] {
                _ if i % 9 == 0 => 128,
                d => d,
            },
            ngroups,
        };
        let s = Shape {
            slots: s.batch + r.below(3) as usize,
            ..s
        };
        let state_dt = [DType::F32, DType::BF16, DType::F16, DType::I16][i % 4];
        let pads = i % 5 == 1;
        let inp = inputs(&mut r, &s, state_dt, i % 2 == 0, pads);
        let pad_mode = if i % 3 == 0 {
            "compute_from_zero_state"
        } else {
            "zero_output"
        };
        let out_from = if i % 4 == 1 {
            "stored_state"
        } else {
            "unrounded_state"
        };
        let sets = common::sets(&[
            ("dt_softplus", (i % 2 == 0).to_string()),
            ("pad_mode", pad_mode.into()),
            ("out_from", out_from.into()),
        ]);
        let name = format!(
            "case {i}: b{} slots{} h{} d{} n{} g{} {state_dt} pads={pads} {pad_mode} {out_from}",
            s.batch, s.slots, s.nheads, s.dim, s.dstate, s.ngroups
        );
        // Every version; v3-v8 only where their layout conditions hold (A is per head here,
        // which v6 requires).
        for v in [
            "v1", "v2", "v3", "v4", "v5", "v6", "v7", "v8", "v9", "v10", "v11",
        ] {
            if !["v1", "v2"].contains(&v)
                && gpu::ops::selective_state_update::v3_ok(s.dstate, state_dt).is_some()
            {
                continue;
            }
            // v11: dstate 128, dim <= 64 in whole chunks, no int16 (ssu_v11_bit_exact covers it).
            if v == "v11"
                && gpu::ops::selective_state_update::v11_ok(v, s.dim, s.dstate, state_dt).is_some()
            {
                continue;
            }
            // v9: dstate 128 only (its lanes per row are compiled in).
            if v == "v9" && s.dstate != gpu::ops::selective_state_update::V9_DSTATE {
                continue;
            }
            n_v9 += (v == "v9") as usize;
            n += 1;
            n_v3 += (!["v1", "v2"].contains(&v)) as usize;
            diff_into(&mut fails, v, &name, &inp, &sets, state_dt);
        }
    }
    eprintln!(
        "{n} random cases ({n_v3} on v3-v9, {n_v9} on v9), {} failed",
        fails.len()
    );
    assert!(
        n_v3 > 0,
        "no random shape met v3's layout conditions: v3-v8 untested"
    );
    assert!(n_v9 > 0, "no random shape had dstate 128: v9 untested");
    assert!(fails.is_empty(), "{}", fails.join("\n"));
}

#[test]
#[ignore = "gpu"]
fn ssu_stochastic_rounding_is_bit_exact() {
    let mut r = Rng::new(77);
    let mut fails = vec![];
    // (mapping, Philox rounds, dim, pad rows): both mappings with 10 and 5 rounds (the kernels
    // compile those counts in for group_of_4) and 7 (the run-time round loop).
    for (i, (mapping, rounds, dim, pads)) in [
        ("group_of_4", 10, 64, false),
        ("word_per_element", 5, 50, false), // 50: a partial v3 row tile
        ("group_of_4", 10, 64, true),
        ("word_per_element", 5, 50, true),
        ("group_of_4", 5, 64, false),
        ("group_of_4", 7, 50, true),
        ("word_per_element", 10, 64, false),
    ]
    .into_iter()
    .enumerate()
    {
        let s = Shape {
            batch: 3,
            slots: 5,
            nheads: 8,
            dim,
            dstate: 128,
            ngroups: 2,
        };
        let inp = inputs(&mut r, &s, DType::F16, true, pads);
        let sets = common::sets(&[
            ("rounding", "stochastic".into()),
            ("sr_mapping", mapping.to_string()),
            ("seed", (12345 + i as u64 * 7919).to_string()),
            ("philox_rounds", rounds.to_string()),
            ("dt_softplus", "true".into()),
        ]);
        for v in [
            "v1", "v2", "v3", "v4", "v5", "v6", "v7", "v8", "v9", "v10", "v11",
        ] {
            // v11: whole 16-row chunks only (dim 64 here; 50 is not).
            if v == "v11"
                && gpu::ops::selective_state_update::v11_ok(v, dim, 128, DType::F16).is_some()
            {
                continue;
            }
            if let Err(e) = common::diff(
                "selective_state_update",
                v,
                &format!("sr {mapping} #{i} {v}"),
                &inp,
                &sets,
                &tol(DType::F16),
            ) {
                fails.push(e);
            }
        }
    }
    assert!(fails.is_empty(), "{}", fails.join("\n"));
}

#[test]
#[ignore = "gpu"]
fn ssu_state_offsets_beyond_2_pow_31() {
    // f16 cache of 32770 slots x 8 heads x 64 x 128 = 2,147,614,720 elements (4.3 GB): slot
    // 32769's elements sit past 2^31. Three rows update slots 32769, 7 and 16384.
    let (nheads, dim, dstate, slots) = (8usize, 64usize, 128usize, 32770usize);
    let per = nheads * dim * dstate;
    assert!((slots * per) as u64 > (1u64 << 31));
    let mut r = Rng::new(5);
    let small = Shape {
        batch: 3,
        slots: 3,
        nheads,
        dim,
        dstate,
        ngroups: 2,
    };
    let mut compact = inputs(&mut r, &small, DType::F16, true, false);
    compact.insert(
        "state_batch_indices".into(),
        Tensor::from_i64(&[3], vec![0, 1, 2]),
    );
    let want = reference::ops::find("selective_state_update")
        .unwrap()
        .call(&compact, &[])
        .unwrap();
    let cs = compact["state"].as_u16_bits().unwrap().to_vec();
    let targets = [32769usize, 7, 16384];
    let mut big = vec![0x3C00u16; slots * per]; // 1.0 everywhere else
    for (j, &t) in targets.iter().enumerate() {
        big[t * per..(t + 1) * per].copy_from_slice(&cs[j * per..(j + 1) * per]);
    }
    let mut inp = compact.clone();
    inp.insert(
        "state".into(),
        Tensor::from_f16_bits(&[slots, nheads, dim, dstate], big),
    );
    inp.insert(
        "state_batch_indices".into(),
        Tensor::from_i64(&[3], targets.iter().map(|&t| t as i64).collect()),
    );
    let g = common::gpu();
    let op = gpu::ops::find("selective_state_update").unwrap();
    // DUET_SSU_2POW31_VERSIONS=v11,...: only these (each version costs ~16 s of upload); a name
    // that is not one of the list fails rather than leaving nothing to test.
    let all = [
        "v1", "v2", "v3", "v4", "v5", "v6", "v7", "v8", "v9", "v10", "v11", "v12",
    ];
    let only = env_versions("DUET_SSU_2POW31_VERSIONS", &all);
    let versions: Vec<&str> = all
        .iter()
        .copied()
        .filter(|v| only.as_ref().is_none_or(|o| o.iter().any(|x| x == v)))
        .collect();
    assert!(!versions.is_empty());
    for v in versions {
        let got =
            gpu::ops::run_version(&g, &op, v, &inp, &[], &gpu::ops::RunOpts::default()).unwrap();
        let rep = compare::compare(
            "out",
            &want["out"],
            &got["out"],
            Tolerance::for_dtype(DType::BF16),
        );
        assert!(rep.passed, "{}", rep.render());
        let gs = got["state"].as_u16_bits().unwrap();
        let ws = want["state"].as_u16_bits().unwrap();
        for (j, &t) in targets.iter().enumerate() {
            assert!(
                gs[t * per..(t + 1) * per] == ws[j * per..(j + 1) * per],
                "slot {t} differs from the reference"
            );
        }
        // Untouched slots keep their contents, including the last elements of the cache.
        assert!(gs[100 * per..101 * per].iter().all(|&b| b == 0x3C00));
        assert!(gs[32768 * per..32769 * per].iter().all(|&b| b == 0x3C00));
        eprintln!(
            "2^31 test {v}: slot 32769 (offsets {}..{}) matches the reference",
            32769 * per,
            32770 * per
        );
    }
}

/// Every compare case of the multi-token op and of the promotion (dtypes, odd sizes, EAGLE
/// parents, pad rows, disable_state_update, stochastic rounding), 3 seeds: stored states and
/// scales bit-exact, `out` within the dtype tolerance.
#[test]
#[ignore = "gpu"]
fn ssu_multi_token_and_promote_cases_bit_exact() {
    let mut fails = vec![];
    let mut n = 0;
    for c in compare::cases::all() {
        if c.op() != "selective_state_update_multi_token" && c.op() != "mamba_cache_promote" {
            continue;
        }
        for seed in [1u64, 2, 3] {
            n += 1;
            let tol = |name: &str, t: &Tensor| match name {
                "state"
                | "state_scale"
                | "intermediate_states"
                | "intermediate_state_scale"
                | "conv_state" => Tolerance::Exact,
                _ => Tolerance::for_dtype(t.dtype()),
            };
            if let Err(e) = common::diff(
                c.op(),
                "v1",
                &format!("{} seed={seed}", c.name()),
                &c.inputs(seed),
                &c.params(),
                &tol,
            ) {
                fails.push(e);
            }
        }
    }
    eprintln!("{n} multi-token / promote runs, {} failed", fails.len());
    assert!(
        n >= 20,
        "expected the case table's multi-token and promote rows, ran {n}"
    );
    assert!(fails.is_empty(), "{}", fails.join("\n"));
}

/// One case of the v11 / v12 bit-exact tests: case `i` cycles the state format (f32, bf16, f16
/// nearest, f16 stochastic), ngroups, `(batch, heads a group)` from `bh`, pads (every third
/// case), dt / D / dt_bias per head (even cases) or per dim, D / z / dt_bias present (all but
/// every fourth case), both pad modes, both out_from modes, softplus on two cases of three, and
/// for stochastic rounding seed `seed0 + i` and Philox 10 / 5 / 7.
struct ModeCase {
    shape: Shape,
    state_dt: DType,
    inp: TensorMap,
    sets: Vec<(String, String)>,
    label: String,
}

fn mode_case(r: &mut Rng, i: usize, bh: &[(usize, usize)], dim: usize, seed0: usize) -> ModeCase {
    let formats = [
        (DType::F32, false),
        (DType::BF16, false),
        (DType::F16, false),
        (DType::F16, true),
    ];
    let (state_dt, sr) = formats[i % 4];
    let ngroups = [1usize, 2, 4, 8][(i / 4) % 4];
    let (batch, heads_per_group) = bh[i % bh.len()];
    let s = Shape {
        batch,
        slots: batch + (i % 3),
        nheads: ngroups * heads_per_group,
        dim,
        dstate: 128,
        ngroups,
    };
    let pads = i % 3 == 1;
    let mut inp = inputs(r, &s, state_dt, i % 4 != 3, pads);
    let per_head = i % 2 == 0;
    if per_head {
        inp.insert(
            "dt".into(),
            r.uniform_tensor(&[s.batch, s.nheads], -3.0, 1.0, DType::F32),
        );
        if inp.contains_key("D") {
            inp.insert("D".into(), r.normal_tensor(&[s.nheads], 1.0, DType::F32));
        }
    } else if inp.contains_key("dt_bias") {
        inp.insert(
            "dt_bias".into(),
            r.uniform_tensor(&[s.nheads, s.dim], -2.0, 0.5, DType::F32),
        );
    }
    let pad_mode = if i % 6 == 1 {
        "compute_from_zero_state"
    } else {
        "zero_output"
    };
    let out_from = if i % 5 == 2 {
        "stored_state"
    } else {
        "unrounded_state"
    };
    let mut sets = vec![
        ("dt_softplus", (i % 3 != 2).to_string()),
        ("pad_mode", pad_mode.to_string()),
        ("out_from", out_from.to_string()),
    ];
    if sr {
        sets.push(("rounding", "stochastic".into()));
        sets.push(("seed", (seed0 + i).to_string()));
        sets.push(("philox_rounds", ["10", "5", "7"][i % 3].into()));
    }
    let label = format!(
        "b{} slots{} h{} d{} g{} {state_dt} sr={sr} per_head={per_head} pads={pads} {pad_mode} {out_from}",
        s.batch, s.slots, s.nheads, s.dim, s.ngroups
    );
    ModeCase {
        shape: s,
        state_dt,
        inp,
        sets: common::sets(&sets),
        label,
    }
}

/// v11 (persistent warps, the state streamed into registers) and its sweep forms: every state
/// format it takes (f32, bf16, f16 nearest and stochastic), dim 16 / 32 / 48 / 64 (one to four
/// chunks a tile), dt / D / dt_bias per head (the hoisted B * dt) and per dim, with and without
/// D / z / dt_bias, pad rows in both pad modes, both out_from modes, batch x heads from 1 tile
/// (fewer chunks than warps) to more tiles than resident warps: the state bit-exact, `out`
/// within tolerance; v9 on the same inputs as a control.
#[test]
#[ignore = "gpu"]
fn ssu_v11_bit_exact() {
    use gpu::ops::selective_state_update::{v11_ok, V11_SWEEP};
    // DUET_SSU_V11_VERSIONS=x11_bf16_c8_m3_s3,...: only these forms (for racecheck on one form;
    // v9 then does not run either). A name that is not v11 or a sweep form fails.
    let known: Vec<&str> = std::iter::once("v11")
        .chain(V11_SWEEP.iter().copied())
        .chain(XB.iter().copied())
        .collect();
    let only = env_versions("DUET_SSU_V11_VERSIONS", &known);
    let mut r = Rng::new(1111);
    let mut fails = vec![];
    let mut n = 0;
    for i in 0..16 {
        let bh = [(1usize, 1usize), (3, 2), (7, 3), (40, 4)];
        let c = mode_case(&mut r, i, &bh, [64usize, 16, 48, 32][(i / 2) % 4], 777);
        let (s, state_dt) = (&c.shape, c.state_dt);
        let (inp, sets) = (&c.inp, &c.sets);
        let mut versions = vec!["v9", "v11", "v11_xb"];
        if state_dt == DType::BF16 {
            versions.extend(V11_SWEEP.iter().copied());
            versions.extend(XB[1..].iter().copied());
        }
        versions.retain(|v| only.as_ref().is_none_or(|o| o.iter().any(|x| x == v)));
        for v in versions {
            let base = v.strip_suffix("_xb").unwrap_or(v);
            if v != "v9" && v11_ok(base, s.dim, s.dstate, state_dt).is_some() {
                continue;
            }
            n += (v != "v9") as usize;
            let name = format!("v11 case {i} {v}: {}", c.label);
            diff_into(&mut fails, v, &name, inp, sets, state_dt);
        }
    }
    eprintln!("{n} v11 runs, {} failed", fails.len());
    let want = if only.is_some() { 1 } else { 16 };
    assert!(n >= want, "v11 ran only {n} cases");
    assert!(fails.is_empty(), "{}", fails.join("\n"));
}

/// v12 (session 31: one 512-thread block a (batch row, head) tile, 64-row passes): every state
/// format (f32, bf16, f16 nearest and stochastic), dims from 8 to 128 (partial and several row
/// passes), dt / D / dt_bias per head and per dim, with and without D / z / dt_bias, pad rows
/// in both pad modes, both out_from modes, f32 and bf16 small operands (`v12_xb`): the state
/// bit-exact, `out` within tolerance; v11 on the same inputs as a control where it applies.
#[test]
#[ignore = "gpu"]
fn ssu_v12_bit_exact() {
    use gpu::ops::selective_state_update::v11_ok;
    let mut r = Rng::new(3131);
    let mut fails = vec![];
    let mut n = 0;
    for i in 0..20 {
        let bh = [(1usize, 1usize), (3, 2), (7, 3), (40, 4), (2, 16)];
        let c = mode_case(
            &mut r,
            i,
            &bh,
            [64usize, 16, 48, 128, 80, 8, 32][i % 7],
            999,
        );
        let (s, state_dt) = (&c.shape, c.state_dt);
        let (inp, sets) = (&c.inp, &c.sets);
        let mut versions = vec!["v12", "v12_xb"];
        if state_dt == DType::BF16 {
            versions.extend(["x12_bf16_m2", "x12_bf16_m2_xb"]);
        }
        if v11_ok("v11", s.dim, s.dstate, state_dt).is_none() {
            versions.push("v11");
        }
        for v in versions {
            n += (v.starts_with("v12") || v.starts_with("x12")) as usize;
            let name = format!("v12 case {i} {v}: {}", c.label);
            diff_into(&mut fails, v, &name, inp, sets, state_dt);
        }
    }
    eprintln!("{n} v12 runs, {} failed", fails.len());
    // 20 cases x (v12, v12_xb) + the 5 bf16 ones x (x12_bf16_m2, its _xb)
    assert_eq!(n, 50, "v12 ran {n} cases");
    assert!(fails.is_empty(), "{}", fails.join("\n"));
}

/// The bf16 small-operand forms (session 30: x, B, C, z and out read and written as bf16), run by
/// name; the inputs draw x / B / C / z in bf16, so they apply. "v11_xb" first (every state type).
const XB: [&str; 4] = [
    "v11_xb",
    "x11_bf16_c4_m4_xb",
    "x11_bf16_c8_m3_s3_i_xb",
    "x11_bf16_c8_m3_s3_i_b_xb",
];

/// Session 28's interleaved walk (v11 and the `_i` forms: whole tiles dealt round-robin over the
/// warps for tiles / warps rounds, then an equal contiguous share of the rest) only leaves the
/// contiguous walk when there are more tiles than warps (132 SMs x 3-4 blocks x 4 warps = 1,584
/// - 2,112 on the H200), which ssu_v11_bit_exact's shapes never reach: 80 x 64 = 5,120 tiles
/// (2-3 rounds and a remainder) with pad slots, dt per head, every state type on v11 and every
/// bf16 sweep form, bit-exact with the reference.
#[test]
#[ignore = "gpu"]
fn ssu_v11_interleaved_walk_bit_exact() {
    use gpu::ops::selective_state_update::V11_SWEEP;
    let mut r = Rng::new(2828);
    let s = Shape {
        batch: 80,
        slots: 83,
        nheads: 64,
        dim: 32,
        dstate: 128,
        ngroups: 4,
    };
    let mut fails = vec![];
    let mut n = 0;
    for (state_dt, sr) in [
        (DType::F32, false),
        (DType::BF16, false),
        (DType::F16, false),
        (DType::F16, true),
    ] {
        let inp = walk_inputs(&mut r, &s, state_dt);
        let mut sets = vec![("dt_softplus", "true".to_string())];
        if sr {
            sets.push(("rounding", "stochastic".into()));
            sets.push(("seed", "2828".into()));
        }
        let sets = common::sets(&sets);
        // v12 (session 31) too: 5,120 one-tile blocks
        let mut versions = vec!["v11", "v11_xb", "v12", "v12_xb"];
        if state_dt == DType::BF16 {
            versions.extend(V11_SWEEP.iter().copied());
            versions.extend(XB[1..].iter().copied());
            versions.extend(["x12_bf16_m2", "x12_bf16_m2_xb"]);
        }
        for v in versions {
            n += 1;
            let name = format!("interleaved walk {v}: b80 h64 d32 {state_dt} sr={sr}");
            diff_into(&mut fails, v, &name, &inp, &sets, state_dt);
        }
    }
    eprintln!("{n} interleaved-walk runs, {} failed", fails.len());
    assert!(n >= 18 + V11_SWEEP.len() + XB.len() - 1);
    assert!(fails.is_empty(), "{}", fails.join("\n"));
}

/// Session 29's grouped walks (`_g4`, `_g16`: groups of 4 / 16 consecutive tiles dealt
/// round-robin) next to `_i` (groups of 1), bf16: 208 x 128 = 26,624 tiles of one chunk (dim 16)
/// are more than 16 x the 1,584 warps of the c8_m3_s3 forms on the H200 (132 SMs x 3 blocks x 4
/// warps), so every form walks at least one round of groups and then the contiguous rest.
#[test]
#[ignore = "gpu"]
fn ssu_v11_grouped_walk_bit_exact() {
    let mut r = Rng::new(2929);
    let s = Shape {
        batch: 208,
        slots: 211,
        nheads: 128,
        dim: 16,
        dstate: 128,
        ngroups: 8,
    };
    let inp = walk_inputs(&mut r, &s, DType::BF16);
    let sets = common::sets(&[("dt_softplus", "true".to_string())]);
    let mut fails = vec![];
    let versions = [
        "x11_bf16_c8_m3_s3_i",
        "x11_bf16_c8_m3_s3_g4",
        "x11_bf16_c8_m3_s3_g16",
    ];
    for v in versions {
        let name = format!("grouped walk {v}: b208 h128 d16 bf16");
        diff_into(&mut fails, v, &name, &inp, &sets, DType::BF16);
    }
    eprintln!(
        "{} grouped-walk runs, {} failed",
        versions.len(),
        fails.len()
    );
    assert!(fails.is_empty(), "{}", fails.join("\n"));
}

/// The sweep variants of `duet bench --shape ssu_sweep_*` (rows per thread x early loads x
/// streaming hints): bf16 state bit-exact with the reference on random shapes, partial row
/// tiles, pad rows and both pad modes, before their timings mean anything.
#[test]
#[ignore = "gpu"]
fn ssu_sweep_variants_bit_exact() {
    let mut r = Rng::new(4242);
    let mut fails = vec![];
    let mut n = 0;
    for i in 0..6 {
        let ngroups = [1usize, 2, 4][i % 3];
        let s = Shape {
            batch: 1 + r.below(5) as usize,
            slots: 0,
            nheads: ngroups * (1 + r.below(3) as usize),
            dim: [64usize, 50, 7, 33, 64, 129][i],
            dstate: [128usize, 64, 256, 8, 128, 16][i],
            ngroups,
        };
        let s = Shape {
            slots: s.batch + r.below(3) as usize,
            ..s
        };
        let pads = i % 2 == 1;
        let inp = inputs(&mut r, &s, DType::BF16, true, pads);
        let pad_mode = if i % 3 == 0 {
            "compute_from_zero_state"
        } else {
            "zero_output"
        };
        let sets = common::sets(&[
            ("dt_softplus", "true".into()),
            ("pad_mode", pad_mode.into()),
        ]);
        for v in gpu::ops::selective_state_update::SWEEP
            .iter()
            .chain(gpu::ops::selective_state_update::V7_SWEEP)
        {
            n += 1;
            let name = format!(
                "sweep {v} case {i}: b{} h{} d{} n{} g{} pads={pads}",
                s.batch, s.nheads, s.dim, s.dstate, s.ngroups
            );
            if let Err(e) = common::diff(
                "selective_state_update",
                v,
                &name,
                &inp,
                &sets,
                &tol(DType::BF16),
            ) {
                fails.push(e);
            }
        }
    }
    eprintln!("{n} sweep runs, {} failed", fails.len());
    assert!(fails.is_empty(), "{}", fails.join("\n"));
}

/// The f16 state's conversions on the hardware (selective_state_update.cu `ssu_f16x8_rn`,
/// `ssu_f16x8_to_f32`, `ssu_sr_f16_sel`, session 25) give the software forms' bits (common.cuh
/// f32_to_f16 / f16_to_f32 / stochastic_round_f16, which the op tests hold to the reference) on
/// every one of the 2^32 f32 inputs (at every position of an 8-value vector, with and without
/// a NaN in it) and every one of the 2^16 f16 inputs at each of the 8 positions.
/// v11 rounds with the conversion hardware alone (no NaN handling, ssu11_bf16x2 / ssu11_f16x2 /
/// ssu11_f16x8_to_f32): for every f32 NaN (as the state, the (B * dt) * x term, or both) and
/// every f16 NaN code, its element step gives the bits of the same step through the software
/// conversions, which keep NaN payloads.
#[test]
#[ignore = "gpu"]
fn v11_nan_steps_match_the_software_ones() {
    use cudarc::driver::{DevicePtr, PushKernelArg};
    let g = common::gpu();
    let f = g
        .function("selective_state_update", "ssu11_nan_check")
        .expect("kernel");
    let mut bad = g.alloc_raw::<u64>(3).expect("alloc");
    g.stream.memset_zeros(&mut bad).expect("zero");
    {
        let (bp, _s) = bad.device_ptr(&g.stream);
        let mut a = g.stream.launch_builder(&f);
        a.arg(&bp);
        // SAFETY: matches ssu11_nan_check(unsigned long long*); `bad` holds 3 u64.
        unsafe { a.launch(gpu::runtime::cfg(g.sm_count * 8, 256, 0)) }.expect("launch");
    }
    let got: Vec<u64> = g.stream.clone_dtoh(&bad).expect("download");
    println!(
        "v11 NaN steps on {}: {} differing of {} NaN inputs (largest index {:#x})",
        g.name, got[0], got[2], got[1]
    );
    // 2 signs x (2^23 - 1) f32 NaNs, 2 x 1023 f16 NaN codes
    assert_eq!(
        got[2],
        2 * ((1 << 23) - 1) + 2 * 1023,
        "not every NaN was tried"
    );
    assert_eq!(
        got[0], 0,
        "v11's hardware-only conversions differ from the software ones on a NaN (largest index {:#x})",
        got[1]
    );
}

#[test]
#[ignore = "gpu"]
fn f16_hardware_conversions_match_the_software_ones() {
    use cudarc::driver::{DevicePtr, PushKernelArg};
    let g = common::gpu();
    let f = g
        .function("selective_state_update", "ssu_f16_cvt_check")
        .expect("kernel");
    let mut bad = g.alloc_raw::<u64>(3).expect("alloc");
    g.stream.memset_zeros(&mut bad).expect("zero");
    let chunk: u64 = 1 << 30;
    for c in 0..4u64 {
        let base = c * chunk;
        let (bp, _s) = bad.device_ptr(&g.stream);
        let mut a = g.stream.launch_builder(&f);
        a.arg(&base).arg(&chunk).arg(&bp);
        // SAFETY: matches ssu_f16_cvt_check(u64, u64, unsigned long long*); `bad` holds 3 u64.
        unsafe { a.launch(gpu::runtime::cfg(g.sm_count * 16, 256, 0)) }.expect("launch");
    }
    let got: Vec<u64> = g.stream.clone_dtoh(&bad).expect("download");
    println!(
        "f16 conversions on {}: {} differing inputs over 2^32 f32 + 8 x 2^16 f16 (largest {:#x})",
        g.name, got[0], got[1]
    );
    assert_eq!(
        got[2],
        (1u64 << 32) + (1 << 19),
        "not every input was compared"
    );
    assert_eq!(
        got[0], 0,
        "the hardware f16 conversions differ from the software ones (largest input {:#x}; \
         0x1_0000_xxxx = an f16 input)",
        got[1]
    );
}
