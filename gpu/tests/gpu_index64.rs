//! Element indices past 2^31 for the router and NVFP4 kernel families (issue 9: "one test per
//! kernel family with element indices beyond 2^31"; SSU and conv1d have theirs in gpu_ssu.rs
//! and mamba_conv1d.rs). Each input holds a little more than 2^31 elements (4.3 GB in bf16). Every
//! GPU version runs the whole tensor. The rows around and after the 2^31 boundary are compared
//! bit for bit with the reference run on just those rows (the ops are row-independent; NVFP4
//! gets an explicit global scale so its blocks do not depend on the whole tensor).
//! `#[ignore = "gpu"]`: run on the H200 (scripts/device-session.sh t:gpu_index64).

mod common;

use compare::Tolerance;
use reference::{Data, Tensor, TensorMap};

/// `rows` x `cols` bf16 values cycling through a random tile of 2^20 values (cheap to build;
/// the rows compared are sliced from the same data, so the cycling does not matter). The last
/// `tail` rows get fresh random values so the tail is not a copy of earlier rows.
fn big_bf16(rows: usize, cols: usize, tail: usize, scale: f32, seed: u64) -> Tensor {
    let mut r = compare::gen::Rng::new(seed);
    let tile: Vec<u16> = r
        .normal_vec(1 << 20, scale)
        .into_iter()
        .map(reference::tensor::f32_to_bf16)
        .collect();
    let n = rows * cols;
    let mut v: Vec<u16> = tile.iter().copied().cycle().take(n).collect();
    for x in v[(rows - tail) * cols..].iter_mut() {
        *x = reference::tensor::f32_to_bf16(r.normal_vec(1, scale)[0]);
    }
    Tensor::from_bf16_bits(&[rows, cols], v)
}

/// Rows `lo..hi` of a 2-D tensor.
fn rows_of(t: &Tensor, lo: usize, hi: usize) -> Tensor {
    let cols = t.shape[1];
    let d = match &t.data {
        Data::BF16(v) => Data::BF16(v[lo * cols..hi * cols].to_vec()),
        Data::I32(v) => Data::I32(v[lo * cols..hi * cols].to_vec()),
        Data::F32(v) => Data::F32(v[lo * cols..hi * cols].to_vec()),
        Data::U8(v) => Data::U8(v[lo * cols..hi * cols].to_vec()),
        other => panic!("rows_of: unexpected dtype {other:?}"),
    };
    Tensor::new(&[hi - lo, cols], d)
}

fn check_rows(what: &str, want: &TensorMap, got: &TensorMap, lo: usize, hi: usize) {
    for (name, w) in want {
        let g = rows_of(&got[name], lo, hi);
        let rep = compare::compare(name, w, &g, Tolerance::Exact);
        assert!(
            rep.passed,
            "{what}: {name} rows {lo}..{hi}\n{}",
            rep.render()
        );
    }
}

#[test]
#[ignore = "gpu"]
fn router_logits_past_2_pow_31() {
    let (e, k) = (512usize, 22usize);
    let boundary_row = (1usize << 31) / e; // the row holding element 2^31
    let t = boundary_row + 40;
    assert!((t * e) as u64 > 1u64 << 31);
    let logits = big_bf16(t, e, 48, 2.0, 1);
    let mut r = compare::gen::Rng::new(2);
    let bias = Tensor::from_f32(&[e], r.normal_vec(e, 0.01));
    let sets = common::sets(&[
        ("top_k", k.to_string()),
        ("routed_scaling_factor", "5.0".into()),
    ]);
    let def = reference::ops::find("noaux_tc_router").expect("op");
    let g = common::gpu();
    let op = gpu::ops::find("noaux_tc_router").expect("gpu op");
    let (lo, hi) = (boundary_row - 8, t);
    let mut small = TensorMap::new();
    small.insert("logits".into(), rows_of(&logits, lo, hi));
    small.insert("bias".into(), bias.clone());
    let want = def.call(&small, &sets).expect("reference");
    let mut head = TensorMap::new();
    head.insert("logits".into(), rows_of(&logits, 0, 8));
    head.insert("bias".into(), bias.clone());
    let want_head = def.call(&head, &sets).expect("reference");
    let mut big = TensorMap::new();
    big.insert("logits".into(), logits);
    big.insert("bias".into(), bias);
    let mut ran = 0;
    for &v in op.versions {
        let p = reference::op::Params::resolve(&def, &sets).expect("params");
        if let Some(why) = (op.applicable)(v, &big, &p) {
            eprintln!("{v}: not applicable ({why})");
            continue;
        }
        let got = gpu::ops::run_version(&g, &op, v, &big, &sets, &Default::default())
            .unwrap_or_else(|e| panic!("router {v}: {e}"));
        check_rows(&format!("router {v}"), &want, &got, lo, hi);
        check_rows(&format!("router {v} head"), &want_head, &got, 0, 8);
        eprintln!("router {v}: {t} tokens x {e} experts, rows {lo}..{hi} past element 2^31 match");
        ran += 1;
    }
    assert!(ran >= 2, "at least two router versions must take E = 512");
}

#[test]
#[ignore = "gpu"]
fn nvfp4_quantize_past_2_pow_31() {
    let cols = 4096usize;
    let boundary_row = (1usize << 31) / cols;
    let rows = boundary_row + 64;
    assert!((rows * cols) as u64 > 1u64 << 31);
    let x = big_bf16(rows, cols, 72, 3.0, 3);
    let gs = Tensor::from_f32(&[1], vec![448.0 * 6.0 / 20.0]);
    let sets = common::sets(&[("mode", "kernel".into()), ("layout", "linear".into())]);
    let def = reference::ops::find("nvfp4_quantize").expect("op");
    let g = common::gpu();
    let op = gpu::ops::find("nvfp4_quantize").expect("gpu op");
    let (lo, hi) = (boundary_row - 8, rows);
    let mut small = TensorMap::new();
    small.insert("x".into(), rows_of(&x, lo, hi));
    small.insert("global_scale".into(), gs.clone());
    let mut want = def.call(&small, &sets).expect("reference");
    want.remove("global_scale");
    let mut big = TensorMap::new();
    big.insert("x".into(), x);
    big.insert("global_scale".into(), gs);
    for &v in op.versions {
        let got = gpu::ops::run_version(&g, &op, v, &big, &sets, &Default::default())
            .unwrap_or_else(|e| panic!("nvfp4 {v}: {e}"));
        check_rows(&format!("nvfp4 {v}"), &want, &got, lo, hi);
        eprintln!(
            "nvfp4_quantize {v}: {rows} x {cols} bf16, rows {lo}..{hi} past element 2^31 match"
        );
    }
}
