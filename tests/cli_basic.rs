//! The everyday CLI paths: `duet ops`, `duet run`, `duet compare`, `duet check`.

use reference::{io, Tensor, TensorMap};
use std::path::Path;
use std::process::{Command, Output};

fn duet(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_duet"))
        .args(args)
        .output()
        .expect("run duet")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn save(p: &Path, items: &[(&str, Tensor)]) {
    let m: TensorMap = items
        .iter()
        .map(|(k, t)| (k.to_string(), t.clone()))
        .collect();
    io::save(p, &m).unwrap();
}

#[test]
fn ops_json_lists_the_foundation_ops_with_inputs_params_outputs() {
    let o = duet(&["ops", "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let ops = v.as_array().unwrap();
    for name in [
        "noaux_tc_router",
        "nvfp4_quantize",
        "nvfp4_dequantize",
        "philox",
        "stochastic_round_f16",
        "cast",
    ] {
        let op = ops
            .iter()
            .find(|o| o["name"] == name)
            .unwrap_or_else(|| panic!("{name} missing from duet ops --json"));
        assert!(
            !op["inputs"].as_array().unwrap().is_empty(),
            "{name} has no inputs"
        );
        assert!(
            !op["outputs"].as_array().unwrap().is_empty(),
            "{name} has no outputs"
        );
    }
    let router = ops.iter().find(|o| o["name"] == "noaux_tc_router").unwrap();
    let params: Vec<&str> = router["params"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    for p in [
        "top_k",
        "n_group",
        "topk_group",
        "routed_scaling_factor",
        "norm_topk_prob",
    ] {
        assert!(params.contains(&p), "router param {p} missing: {params:?}");
    }
}

#[test]
fn compare_passes_fails_and_reports_missing_tensors() {
    let d = tempfile::tempdir().unwrap();
    let a = d.path().join("a.safetensors");
    let b = d.path().join("b.safetensors");
    let c = d.path().join("c.npz");
    let x = Tensor::from_f32(&[2, 2], vec![1.0, -2.0, 3.5, 4.25]);
    save(
        &a,
        &[
            ("x", x.clone()),
            ("y", Tensor::from_i32(&[3], vec![1, 2, 3])),
        ],
    );
    save(
        &b,
        &[
            ("x", Tensor::from_f32(&[2, 2], vec![1.0, -2.0, 3.5, 4.2505])),
            ("y", Tensor::from_i32(&[3], vec![1, 2, 3])),
        ],
    );
    let o = duet(&["compare", a.to_str().unwrap(), b.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    let o = duet(&[
        "compare",
        a.to_str().unwrap(),
        b.to_str().unwrap(),
        "--exact",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("mismatch at [1, 1]"), "{}", text(&o));
    // A file lacking 'y': reported, exit 1; JSON form is parseable.
    save(&c, &[("x", x)]);
    let o = duet(&[
        "compare",
        a.to_str().unwrap(),
        c.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["passed"], false);
    assert!(v["missing"][0].as_str().unwrap().contains("'y'"));
}

#[test]
fn run_router_writes_named_outputs_and_rejects_bad_names() {
    let d = tempfile::tempdir().unwrap();
    let inp = d.path().join("in.safetensors");
    let out = d.path().join("out.safetensors");
    let (t, e) = (3usize, 16usize);
    let logits: Vec<f32> = (0..t * e)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) / 17.0)
        .collect();
    let bias: Vec<f32> = (0..e).map(|i| (i as f32 - 8.0) / 40.0).collect();
    save(
        &inp,
        &[
            ("logits", Tensor::from_f32(&[t, e], logits)),
            ("bias", Tensor::from_f32(&[e], bias)),
        ],
    );
    let o = duet(&[
        "run",
        "noaux_tc_router",
        "--in",
        inp.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--set",
        "top_k=4",
        "--set",
        "routed_scaling_factor=2.5",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let m = io::load(&out).unwrap();
    assert_eq!(m["topk_indices"].shape, vec![t, 4]);
    assert_eq!(m["topk_indices"].dtype(), reference::DType::I32);
    let w = m["topk_weights"].to_f32_vec();
    for r in 0..t {
        let s: f32 = w[r * 4..r * 4 + 4].iter().sum();
        assert!((s - 2.5).abs() < 1e-5, "row {r} weights sum {s}");
    }
    // An unknown param and a misspelt input name are clear errors; the output stays intact.
    let before = std::fs::read(&out).unwrap();
    let o = duet(&[
        "run",
        "noaux_tc_router",
        "--in",
        inp.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--set",
        "topk=4",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("param 'topk'"), "{}", text(&o));
    let bad = d.path().join("bad.safetensors");
    save(
        &bad,
        &[
            ("logit", Tensor::from_f32(&[1, 16], vec![0.5; 16])),
            ("bias", Tensor::from_f32(&[16], vec![0.1; 16])),
        ],
    );
    let o = duet(&[
        "run",
        "noaux_tc_router",
        "--in",
        bad.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--set",
        "top_k=2",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("unknown input 'logit'"), "{}", text(&o));
    assert!(!text(&o).contains("panicked"));
    assert_eq!(std::fs::read(&out).unwrap(), before);
}

#[test]
fn check_runs_the_table_and_filters() {
    let o = duet(&["check", "--op", "^philox/", "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v["total"].as_u64().unwrap() >= 1);
    assert_eq!(v["failed"], 0);
    let o = duet(&["check", "--op", "^no_such_op_anywhere$"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("no case matches"));
}

#[test]
fn check_twin_scores_operand_forms_on_the_bf16_row() {
    // The fused SSD's numerics twin: rows for y and final_states per --twin spec, on the bf16
    // row only (the fused kernels take bf16 inputs); one bf16 pass of x w fails final_states,
    // and check says so with exit 1.
    let o = duet(&[
        "check",
        "--op",
        "^ssd_chunk_scan/what=(bf16|odd),",
        "--twin",
        "kernel",
        "--twin",
        "xw=bf16",
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let rows = v["rows"].as_array().unwrap();
    let twin: Vec<&serde_json::Value> = rows
        .iter()
        .filter(|r| r["implementation"].as_str().unwrap().starts_with("twin:"))
        .collect();
    assert_eq!(
        twin.len(),
        4,
        "two specs x two outputs, bf16 row only: {twin:?}"
    );
    for r in &twin {
        assert!(r["case"].as_str().unwrap().contains("dtype=bf16"), "{r}");
        let imp = r["implementation"].as_str().unwrap();
        let failed = imp == "twin:m=bf16x2,s=bf16x2,xw=bf16" && r["output"] == "final_states";
        assert_eq!(r["passed"], !failed, "{r}");
    }
}

#[test]
fn profile_reads_an_ncu_raw_export_of_the_h200() {
    // A real `ncu --csv --page raw` capture of a vector add on the H200 (fixtures/traces).
    let csv = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/fixtures/traces/h200_vadd_transpose_raw.csv"
    );
    let o = duet(&[
        "profile",
        "vadd",
        "--from-csv",
        csv,
        "--kernel",
        "^void vadd",
        "--json",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let rows = v.as_array().unwrap();
    assert!(!rows.is_empty());
    for r in rows {
        assert!(r["kernel"].as_str().unwrap().starts_with("void vadd"));
        // 3 x 4-byte x 2^24 floats... the capture reads ~537 MB and writes ~251 MB.
        let rd = r["dram_read_bytes"].as_f64().unwrap();
        assert!((5.0e8..6.0e8).contains(&rd), "dram read {rd}");
        assert!(r["duration_ns"].as_f64().unwrap() > 1e5);
        assert_eq!(r["registers"].as_f64().unwrap(), 22.0);
    }
    let o = duet(&[
        "profile",
        "vadd",
        "--from-csv",
        csv,
        "--kernel",
        "^no_such_kernel$",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("no profiled kernel"), "{}", text(&o));
}

#[test]
fn profile_sums_durations_per_kernel_name() {
    // The vadd / transpose capture (fixtures/traces): three launches of each kernel.
    let csv = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/fixtures/traces/h200_vadd_transpose_raw.csv"
    );
    let o = duet(&[
        "profile",
        "vadd",
        "--from-csv",
        csv,
        "--by-kernel",
        "--json",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let rows = v["kernels"].as_array().unwrap();
    let groups = v["by_kernel"].as_array().unwrap();
    assert_eq!(groups.len(), 2, "{groups:?}");
    // Largest total first; calls and totals add up to the rows.
    let per_row: f64 = rows
        .iter()
        .map(|r| r["duration_ns"].as_f64().unwrap() / 1e3)
        .sum();
    let total = v["total_us"].as_f64().unwrap();
    assert!(
        (per_row - total).abs() < 1e-6 * total,
        "{per_row} vs {total}"
    );
    let calls: u64 = groups.iter().map(|g| g["calls"].as_u64().unwrap()).sum();
    assert_eq!(calls as usize, rows.len());
    assert!(groups[0]["total_us"].as_f64().unwrap() >= groups[1]["total_us"].as_f64().unwrap());
    assert!(groups[0]["kernel"]
        .as_str()
        .unwrap()
        .starts_with("void vadd"));
    let shares: f64 = groups.iter().map(|g| g["share"].as_f64().unwrap()).sum();
    assert!((shares - 1.0).abs() < 1e-9);
    // Text form: the summary table after the per-launch rows.
    let o = duet(&["profile", "vadd", "--from-csv", csv, "--by-kernel"]);
    assert!(
        text(&o).contains("per kernel name: 6 kernels"),
        "{}",
        text(&o)
    );
}

#[test]
fn profile_flags_a_straggler_sm() {
    // Two real ncu captures of router v9 at T = 32768 on the H200 (fixtures/traces): the first
    // build, where one SM stayed active 1.98x the average, and the fixed one.
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/traces/");
    let straggler = format!("{dir}h200_router_v9_straggler_ncu.csv");
    let balanced = format!("{dir}h200_router_v9_balanced_ncu.csv");
    let o = duet(&["profile", "noaux_tc_router", "--from-csv", &straggler]);
    assert!(o.status.success(), "{}", text(&o));
    let t = text(&o);
    assert!(t.contains("STRAGGLER"), "{t}");
    assert!(t.contains("82.8k / 85.5k / 169.6k of 173.1k"), "{t}");
    let o = duet(&["profile", "noaux_tc_router", "--from-csv", &balanced]);
    assert!(o.status.success(), "{}", text(&o));
    let t = text(&o);
    assert!(!t.contains("STRAGGLER"), "{t}");
    assert!(t.contains("90.1k / 91.6k / 96.4k"), "{t}");
    let o = duet(&[
        "profile",
        "noaux_tc_router",
        "--from-csv",
        &straggler,
        "--json",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let r = &v.as_array().unwrap()[0];
    let ratio = r["sm_straggler_ratio"].as_f64().unwrap();
    assert!((ratio - 169_619.0 / 85_549.28).abs() < 1e-9, "{ratio}");
    assert_eq!(r["sm_elapsed_cycles"].as_f64().unwrap(), 173_080.85);
}

#[test]
fn compare_treats_topk_rows_as_sets_and_aligns_weights() {
    let d = tempfile::tempdir().unwrap();
    let a = d.path().join("ours.safetensors");
    let b = d.path().join("torch.safetensors");
    save(
        &a,
        &[
            (
                "topk_indices",
                Tensor::from_i32(&[2, 3], vec![5, 1, 9, 2, 3, 4]),
            ),
            (
                "topk_weights",
                Tensor::from_f32(&[2, 3], vec![0.5, 0.3, 0.2, 0.7, 0.2, 0.1]),
            ),
        ],
    );
    // Same choices in another order (torch.topk(sorted=False)), weights permuted with them.
    save(
        &b,
        &[
            (
                "topk_indices",
                Tensor::from_i64(&[2, 3], vec![9, 5, 1, 4, 2, 3]),
            ),
            (
                "topk_weights",
                Tensor::from_f32(&[2, 3], vec![0.2, 0.5, 0.3, 0.1, 0.7, 0.2]),
            ),
        ],
    );
    let o = duet(&["compare", a.to_str().unwrap(), b.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    let o = duet(&[
        "compare",
        a.to_str().unwrap(),
        b.to_str().unwrap(),
        "--ordered",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    // A different set still fails.
    save(
        &b,
        &[
            (
                "topk_indices",
                Tensor::from_i64(&[2, 3], vec![9, 5, 1, 4, 2, 8]),
            ),
            (
                "topk_weights",
                Tensor::from_f32(&[2, 3], vec![0.2, 0.5, 0.3, 0.1, 0.7, 0.2]),
            ),
        ],
    );
    let o = duet(&["compare", a.to_str().unwrap(), b.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
}

#[test]
fn compare_names_single_tensor_files_and_restricts_with_only() {
    let d = tempfile::tempdir().unwrap();
    let exp = d.path().join("expected_out.npy");
    let got = d.path().join("got.safetensors");
    let mut one = TensorMap::new();
    one.insert(
        "expected_out".into(),
        Tensor::from_f32(&[3], vec![1.0, 2.0, 3.0]),
    );
    io::save(&exp, &one).unwrap();
    save(
        &got,
        &[
            ("out", Tensor::from_f32(&[3], vec![1.0, 2.0, 3.0005])),
            ("state", Tensor::from_f32(&[2], vec![5.0, 6.0])),
        ],
    );
    let spec = format!("out={}", exp.display());
    // 'state' is only in the second file: a mismatch unless --only restricts the comparison.
    let o = duet(&["compare", &spec, got.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("'state'"));
    let o = duet(&["compare", &spec, got.to_str().unwrap(), "--only", "out"]);
    assert!(o.status.success(), "{}", text(&o));
    let o = duet(&[
        "compare",
        &spec,
        got.to_str().unwrap(),
        "--only",
        "out",
        "--exact",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let o = duet(&["compare", &spec, got.to_str().unwrap(), "--only", "nope"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("--only nope"));
}

#[test]
fn bench_compare_reads_two_decode_benches() {
    // Two real `duet e2e --json` device logs (fixtures/e2e): the super decode step before and
    // after session 8's GEMV change.
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/e2e/");
    let (a, b) = (
        format!("{dir}h200_super_decode_call1.log"),
        format!("{dir}h200_super_decode_call4.log"),
    );
    let o = duet(&["bench", "compare", &a, &b]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let t = text(&o);
    let line = |p: &str| {
        t.lines()
            .find(|l| l.split_whitespace().next() == Some(p))
            .unwrap_or_else(|| panic!("no {p} row in\n{t}"))
            .to_string()
    };
    // model path 14.305 -> 11.878 ms (8 steps each, separated: significant)
    let g = line("gpu");
    assert!(
        g.contains("14.305") && g.contains("11.878") && g.ends_with("improved"),
        "{g}"
    );
    let e = line("gpu-engine");
    assert!(e.contains("1.933") && e.contains("1.558"), "{e}");
    // The engine's per-op table, largest change first: the routed experts.
    let first_engine_op = t
        .lines()
        .skip_while(|l| !l.starts_with("gpu-engine: ms per step by op"))
        .nth(1)
        .unwrap_or("");
    assert!(
        first_engine_op.contains("routed_experts"),
        "{first_engine_op}"
    );
    assert!(first_engine_op.contains("0.501") && first_engine_op.contains("0.320"));
    // Reversed: the model path is a significant slowdown -> exit 1.
    let o = duet(&["bench", "compare", &b, &a]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("REGRESSED"), "{}", text(&o));
    // A decode bench against a `duet bench` file: a clear error.
    let tmp = std::env::temp_dir().join(format!("duet-cmp-{}.json", std::process::id()));
    std::fs::write(&tmp, r#"{"schema": "duet.bench/1", "results": []}"#).unwrap();
    let o = duet(&["bench", "compare", &a, tmp.to_str().unwrap()]);
    let _ = std::fs::remove_file(&tmp);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("compare like with like"), "{}", text(&o));
    // With `steady` stats in both (the graph engine's replays), those steps decide: the two
    // slow warm-up steps, the same in both runs, would otherwise blur the test.
    let run = |m: f64| {
        let steady: Vec<f64> = [0.0, 0.0, 0.01, -0.01, 0.0, 0.02]
            .iter()
            .map(|d| m + d)
            .collect();
        let mut ms = vec![3.0, 2.5];
        ms.extend(&steady);
        format!(
            r#"{{"bench_decode": {{"paths": {{"gpu-engine": {{"median_ms": {m}, "ms": {ms:?},
               "steady": {{"from_step": 2, "ms": {steady:?}, "median_ms": {m}}},
               "op_breakdown": []}}}}}}}}"#
        )
    };
    let (pa, pb) = (
        std::env::temp_dir().join(format!("duet-steady-a-{}.json", std::process::id())),
        std::env::temp_dir().join(format!("duet-steady-b-{}.json", std::process::id())),
    );
    std::fs::write(&pa, run(1.9)).unwrap();
    std::fs::write(&pb, run(1.5)).unwrap();
    let o = duet(&[
        "bench",
        "compare",
        pa.to_str().unwrap(),
        pb.to_str().unwrap(),
    ]);
    let _ = (std::fs::remove_file(&pa), std::fs::remove_file(&pb));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        text(&o).contains("improved (steady-state steps)"),
        "{}",
        text(&o)
    );
}

/// `duet bench compare` on two `duet profile engine-step` device logs (session 9, H200): the
/// summed kernel time, per kernel name, and launch by launch with a replaced kernel named.
#[test]
fn bench_compare_reads_two_engine_step_profiles() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/profiles");
    let a = dir.join("engine_step_h200_s9c3.txt");
    let b = dir.join("engine_step_h200_s9c5.txt");
    let o = duet(&["bench", "compare", a.to_str().unwrap(), b.to_str().unwrap()]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    // The logs' own sums: "95 kernels, 1236.4 us in all" and "1198.1 us" (the rows are
    // rounded to 0.01 us: 95 of them stay within 0.5 us).
    let all = t
        .lines()
        .find(|l| l.starts_with("all kernels (95 -> 95 launches)"))
        .unwrap_or_else(|| panic!("{t}"));
    let nums: Vec<f64> = all
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    assert!(
        // base, cand, delta % end the line.
        (nums[nums.len() - 3] - 1236.4).abs() < 0.5 && (nums[nums.len() - 2] - 1198.1).abs() < 0.5,
        "{all}"
    );
    assert!(
        t.contains("model_gemv1_f32 -> model_gemv1_f32_split"),
        "{t}"
    );
    let row = t
        .lines()
        .find(|l| l.starts_with("model_gemv1_slots_nvfp4w "))
        .unwrap_or_else(|| panic!("{t}"));
    assert!(row.contains("284.50") && row.contains("267.20"), "{row}");
    // A profile against a bench JSON: a clear error, not a parse of one as the other.
    let tmp = tempfile::tempdir().unwrap();
    let j = tmp.path().join("bench.json");
    std::fs::write(&j, r#"{"schema": "duet.bench/1", "results": []}"#).unwrap();
    let o = duet(&["bench", "compare", a.to_str().unwrap(), j.to_str().unwrap()]);
    assert!(!o.status.success());
    assert!(text(&o).contains("compare like with like"), "{}", text(&o));
}

/// `duet bench compare` on two decode benches that report the GPU engine's host time per step
/// (`host_per_step_us`, since session 9): the parts side by side with their change.
#[test]
fn bench_compare_shows_the_engines_host_time_by_part() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/e2e/");
    let tmp = tempfile::tempdir().unwrap();
    let mut paths = vec![];
    for (i, (log, wait)) in [
        ("h200_super_decode_call1.log", 1500.0),
        ("h200_super_decode_call4.log", 1200.0),
    ]
    .iter()
    .enumerate()
    {
        let text = std::fs::read_to_string(format!("{dir}{log}")).unwrap();
        let start = text.find("\n{").map(|i| i + 1).unwrap_or(0);
        let mut v: serde_json::Value = serde_json::from_str(&text[start..]).unwrap();
        v["bench_decode"]["paths"]["gpu-engine"]["host_per_step_us"] = serde_json::json!({
            "upload": 20.0, "launch": 5.0, "wait": wait, "download": 60.0 - 20.0 * i as f64,
        });
        let p = tmp.path().join(format!("e2e{i}.json"));
        std::fs::write(&p, serde_json::to_string(&v).unwrap()).unwrap();
        paths.push(p);
    }
    let o = duet(&[
        "bench",
        "compare",
        paths[0].to_str().unwrap(),
        paths[1].to_str().unwrap(),
    ]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(0), "{t}");
    let part = |p: &str| {
        t.lines()
            .skip_while(|l| !l.starts_with("gpu-engine: host us per steady step"))
            .find(|l| l.split_whitespace().next() == Some(p))
            .unwrap_or_else(|| panic!("no {p} row in\n{t}"))
            .to_string()
    };
    assert!(
        part("wait").contains("1500.0") && part("wait").contains("-300.0"),
        "{t}"
    );
    assert!(part("download").contains("-20.0"), "{t}");
    assert!(part("upload").contains("+0.0"), "{t}");
}

/// `duet bench compare` on two real decode benches of session 10 (call 5, the H200): plain
/// graphs against graphs with `--engine-fuse --engine-pdl`. The configuration difference is
/// noted, the steady medians compared, the host parts and the graph's edges (94 kernel edges,
/// none programmatic -> 73, all programmatic) shown side by side.
#[test]
fn bench_compare_shows_the_graph_edges_of_two_engine_runs() {
    // The device logs as they are (note lines before the JSON).
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/e2e/");
    let (a, b) = (
        format!("{dir}h200_super_decode_s10c5_graphs.log"),
        format!("{dir}h200_super_decode_s10c5_fused_pdl.log"),
    );
    let o = duet(&["bench", "compare", &a, &b]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(0), "{t}");
    assert!(
        t.contains("note: engine_fuse differs: false -> true"),
        "{t}"
    );
    assert!(t.contains("note: engine_pdl differs: false -> true"), "{t}");
    let row = |section: &str, key: &str| {
        t.lines()
            .skip_while(|l| !l.starts_with(section))
            .find(|l| l.split_whitespace().next() == Some(key))
            .unwrap_or_else(|| panic!("no {key} row under {section} in\n{t}"))
            .split_whitespace()
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        row("gpu-engine: launch", "graph_kernel_edges"),
        ["graph_kernel_edges", "94", "->", "73"],
        "{t}"
    );
    assert_eq!(
        row("gpu-engine: launch", "graph_programmatic_edges"),
        ["graph_programmatic_edges", "0", "->", "73"],
        "{t}"
    );
    // The steady medians of the two logs: 1.224 and 1.243 ms.
    let eng = row("path", "gpu-engine");
    assert_eq!(&eng[1..3], ["1.224", "1.243"], "{t}");
    assert!(row("gpu-engine: host us", "download").len() >= 4, "{t}");
}

/// `duet bench` names the code that ran: the git revision the binary was built from (build.rs
/// embeds it), which is also what a checkout at that commit reports; the GPU machine's copy of
/// the tree keeps an older HEAD, so the run-time HEAD is not used where the build knew it.
#[test]
fn bench_json_names_the_revision_the_binary_was_built_from() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("b.json");
    let o = duet(&[
        "bench",
        "philox",
        "--reps",
        "1",
        "--max-seconds",
        "0.05",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let j: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&out).unwrap()).expect("bench JSON");
    assert!(
        j["results"].as_array().is_some_and(|r| !r.is_empty()),
        "{j}"
    );
    let rev = j["git_revision"].as_str().expect("git_revision");
    match option_env!("DUET_GIT_REV") {
        Some(built) => assert_eq!(rev, built),
        // Built outside a git checkout: the run-time lookup (which then also fails).
        None => assert_eq!(rev, "unknown"),
    }
}
