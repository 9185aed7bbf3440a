//! The CPU Nemotron-H model against the transformers golden of `fixtures/models/nemotron-tiny-a`
//! (written by tools/gen_nemotron_h_golden.py): full-forward logits, every hidden state,
//! decode logits, MTP logits; config parsing of both styles; weight errors; and the `duet e2e`
//! per-layer report localising a perturbed layer.
//!
//! Max relative error of a tensor = max|a - b| / max|a| (a = golden); the target is 1e-4.

use reference::model::{Config, Model, ModelError, Pass};
use reference::{io, Tensor, TensorMap};
use std::path::{Path, PathBuf};
use std::process::Command;

const TOL: f64 = 1e-4;

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/models/nemotron-tiny-a")
}

fn golden() -> TensorMap {
    io::load(&fixture().join("reference.safetensors")).expect("golden loads")
}

fn ids(g: &TensorMap) -> Vec<u32> {
    g["input_ids"]
        .to_i64_vec()
        .expect("integer ids")
        .into_iter()
        .map(|v| v as u32)
        .collect()
}

/// max|a-b| / max|a|, with NMSE from the compare crate for the message.
fn max_rel(name: &str, golden: &Tensor, got: &[f32]) -> f64 {
    assert_eq!(golden.numel(), got.len(), "{name}: element count");
    let got_t = Tensor::from_f32(&golden.shape, got.to_vec());
    let rep = compare::compare(name, golden, &got_t, compare::Tolerance::Nmse { max: 1e-8 });
    let amax = golden.to_f64_vec().iter().fold(0f64, |m, v| m.max(v.abs()));
    let e = rep.max_abs_err / amax;
    eprintln!("{name}: max rel {e:.3e}, nmse {:.3e}", rep.nmse);
    e
}

fn argmax(x: &[f32], v: usize) -> Vec<usize> {
    x.chunks_exact(v)
        .map(|r| (0..v).fold(0, |b, i| if r[i] > r[b] { i } else { b }))
        .collect()
}

fn model() -> Model {
    Model::load_dir(&fixture()).expect("fixture model loads")
}

#[test]
fn full_forward_logits_match_golden() {
    let (m, g) = (model(), golden());
    let out = m
        .forward(&ids(&g), None, Pass::Prefill, false)
        .expect("forward");
    assert!(max_rel("logits", &g["logits"], &out.logits) < TOL);
    let v = m.cfg.vocab_size;
    assert_eq!(argmax(&g["logits"].to_f32_vec(), v), argmax(&out.logits, v));
}

#[test]
fn every_hidden_state_matches_golden() {
    let (m, g) = (model(), golden());
    let out = m
        .forward(&ids(&g), None, Pass::Prefill, true)
        .expect("forward");
    assert_eq!(out.hidden.len(), m.cfg.layers.len() + 1);
    for (i, h) in out.hidden.iter().enumerate() {
        let name = format!("hidden.{i}");
        assert!(max_rel(&name, &g[&name], h) < TOL, "{name}");
    }
}

#[test]
fn decode_logits_match_golden() {
    let (m, g) = (model(), golden());
    let (_, meta) = io::load_with_metadata(&fixture().join("reference.safetensors")).expect("meta");
    let p: usize = meta["prefill_len"].parse().expect("prefill_len");
    let (ids, v) = (ids(&g), m.cfg.vocab_size);
    let mut cache = m.new_cache();
    let o = m
        .forward(&ids[..p], Some(&mut cache), Pass::Prefill, false)
        .expect("prefill");
    let mut rows = o.logits[(p - 1) * v..].to_vec();
    for &t in &ids[p..] {
        rows.extend(
            m.forward(&[t], Some(&mut cache), Pass::Decode, false)
                .expect("step")
                .logits,
        );
    }
    assert!(max_rel("decode_logits", &g["decode_logits"], &rows) < TOL);
    assert_eq!(
        argmax(&g["decode_logits"].to_f32_vec(), v),
        argmax(&rows, v)
    );
}

#[test]
fn mtp_logits_match_golden() {
    let (m, g) = (model(), golden());
    let ids = ids(&g);
    let (t, hs, v) = (ids.len(), m.cfg.hidden_size, m.cfg.vocab_size);
    let out = m
        .forward(&ids, None, Pass::Prefill, false)
        .expect("forward");
    let (logits, _) = m
        .mtp_forward(&out.last_hidden[..(t - 1) * hs], &ids[1..], None)
        .expect("mtp");
    assert!(max_rel("mtp_logits", &g["mtp_logits"], &logits) < TOL);
    assert_eq!(argmax(&g["mtp_logits"].to_f32_vec(), v), argmax(&logits, v));
}

#[test]
fn config_parses_hub_and_transformers_styles() {
    let tf = Config::from_file(&fixture().join("config.json")).expect("transformers 5.x style");
    assert_eq!(tf.pattern(), "MEM*EM-E");
    assert_eq!(tf.mtp_pattern(), "*E");
    assert_eq!(tf.time_step_limit, (0.0, f32::INFINITY));
    assert_eq!(tf.moe_latent_size, Some(64));
    // Hub style: the generator's spec (hybrid_override_pattern, mtp_hybrid_override_pattern).
    let spec = std::fs::read_to_string(fixture().with_extension("spec.json")).expect("spec");
    let hub = Config::from_json_str(&spec, "spec").expect("hub style");
    assert_eq!(hub, tf);
    // A hub-style config.json next to the fixture weights runs the same model.
    let dir = tempfile::tempdir().expect("tempdir");
    let mut v: serde_json::Value = serde_json::from_str(&spec).expect("json");
    let c = v["config"].take();
    std::fs::write(dir.path().join("config.json"), c.to_string()).expect("write");
    std::fs::copy(
        fixture().join("model.safetensors"),
        dir.path().join("model.safetensors"),
    )
    .expect("copy");
    let m = Model::load_dir(dir.path()).expect("hub-style dir loads");
    let g = golden();
    let out = m
        .forward(&ids(&g), None, Pass::Prefill, false)
        .expect("forward");
    assert!(max_rel("logits (hub config)", &g["logits"], &out.logits) < TOL);
    // Errors name the key.
    let bad = r#"{"vocab_size": 8, "hidden_size": 4, "hybrid_override_pattern": "MX"}"#;
    let e = Config::from_json_str(bad, "bad.json")
        .expect_err("bad pattern")
        .to_string();
    assert!(
        e.contains("hybrid_override_pattern") && e.contains('X'),
        "{e}"
    );
}

/// Writes the fixture's config and `weights` to a temporary model directory.
fn model_dir_with(weights: &TensorMap) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::copy(
        fixture().join("config.json"),
        dir.path().join("config.json"),
    )
    .expect("copy");
    io::save(&dir.path().join("model.safetensors"), weights).expect("save");
    dir
}

fn weights() -> TensorMap {
    io::load(&fixture().join("model.safetensors")).expect("weights")
}

#[test]
fn missing_weight_is_named() {
    let mut w = weights();
    w.remove("backbone.layers.3.mixer.k_proj.weight");
    let dir = model_dir_with(&w);
    let e = Model::load_dir(dir.path()).err().expect("must fail");
    assert!(matches!(e, ModelError::MissingWeight { .. }), "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains("backbone.layers.3.mixer.k_proj.weight"),
        "{msg}"
    );
    assert!(msg.contains("[64, 256]"), "{msg}");
}

#[test]
fn misshaped_weight_names_expected_and_found_shape() {
    let mut w = weights();
    w.insert(
        "backbone.layers.0.mixer.out_proj.weight".into(),
        Tensor::from_f32(&[256, 511], vec![0.5; 256 * 511]),
    );
    let dir = model_dir_with(&w);
    let msg = Model::load_dir(dir.path())
        .err()
        .expect("must fail")
        .to_string();
    for want in [
        "backbone.layers.0.mixer.out_proj.weight",
        "[256, 512]",
        "[256, 511]",
        "model.safetensors",
    ] {
        assert!(msg.contains(want), "'{want}' not in: {msg}");
    }
}

#[test]
fn sharded_checkpoint_loads() {
    let w = weights();
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::copy(
        fixture().join("config.json"),
        dir.path().join("config.json"),
    )
    .expect("copy");
    let (mut a, mut b) = (TensorMap::new(), TensorMap::new());
    let mut map = serde_json::Map::new();
    for (i, (k, t)) in w.into_iter().enumerate() {
        let f = if i % 2 == 0 {
            "model-00001-of-00002.safetensors"
        } else {
            "model-00002-of-00002.safetensors"
        };
        map.insert(k.clone(), serde_json::Value::String(f.into()));
        if i % 2 == 0 {
            a.insert(k, t)
        } else {
            b.insert(k, t)
        };
    }
    io::save(&dir.path().join("model-00001-of-00002.safetensors"), &a).expect("save");
    io::save(&dir.path().join("model-00002-of-00002.safetensors"), &b).expect("save");
    let idx = serde_json::json!({"metadata": {}, "weight_map": map});
    std::fs::write(
        dir.path().join("model.safetensors.index.json"),
        idx.to_string(),
    )
    .expect("index");
    let m = Model::load_dir(dir.path()).expect("sharded loads");
    let g = golden();
    let out = m
        .forward(&ids(&g), None, Pass::Prefill, false)
        .expect("forward");
    assert!(max_rel("logits (sharded)", &g["logits"], &out.logits) < TOL);
}

fn duet_e2e_json(args: &[&str]) -> (i32, serde_json::Value) {
    let out = Command::new(env!("CARGO_BIN_EXE_duet"))
        .arg("e2e")
        .args(args)
        .arg("--json")
        .output()
        .expect("duet runs");
    let text = String::from_utf8_lossy(&out.stdout);
    let v = serde_json::from_str(&text).unwrap_or_else(|e| {
        panic!(
            "bad JSON ({e}): {text}\nstderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap_or(-1), v)
}

#[test]
fn cli_report_passes_on_the_fixture_and_dumps_golden_layout() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dump = dir.path().join("cpu.safetensors");
    let fx = fixture();
    let (code, v) = duet_e2e_json(&[
        fx.to_str().expect("utf8"),
        "--mtp",
        "2",
        "--dump",
        dump.to_str().expect("utf8"),
        "--path",
        "cpu",
    ]);
    assert_eq!(code, 0, "{v:#}");
    assert_eq!(v["pass"], true);
    assert!(v["first_divergent"].is_null(), "{v:#}");
    assert!(v["largest_jump"].is_null(), "{v:#}");
    assert_eq!(v["layers"].as_array().map(|a| a.len()), Some(9));
    assert_eq!(v["speculative"]["matches_greedy"], true);
    for o in v["outputs"].as_array().expect("outputs") {
        assert!(o["max_rel"].as_f64().expect("num") < TOL, "{o}");
    }
    // The dump has the golden's names and shapes.
    let d = io::load(&dump).expect("dump loads");
    let g = golden();
    for (k, t) in &g {
        if k.starts_with("router_min_gap") {
            continue;
        }
        assert_eq!(d.get(k).map(|x| &x.shape), Some(&t.shape), "{k}");
    }
}

/// Scales one layer's output projection by 1.05: the report's first divergent layer must be
/// exactly that layer.
fn perturbed_first_divergent(layer: usize, tensor: &str) -> serde_json::Value {
    let mut w = weights();
    let name = format!("backbone.layers.{layer}.mixer.{tensor}");
    let t = w
        .get_mut(&name)
        .unwrap_or_else(|| panic!("{name} in fixture"));
    let vals: Vec<f32> = t.to_f32_vec().iter().map(|x| x * 1.05).collect();
    *t = Tensor::from_f32(&t.shape.clone(), vals);
    let dir = model_dir_with(&w);
    let g: &Path = &fixture().join("reference.safetensors");
    let (code, v) = duet_e2e_json(&[
        dir.path().to_str().expect("utf8"),
        "--golden",
        g.to_str().expect("utf8"),
    ]);
    assert_eq!(code, 1, "a perturbed model must fail: {v:#}");
    assert_eq!(
        v["largest_jump"]["hidden"], v["first_divergent"]["hidden"],
        "{v:#}"
    );
    v["first_divergent"].clone()
}

#[test]
fn report_localises_a_perturbed_layer() {
    for (layer, tensor) in [
        (2usize, "out_proj.weight"),
        (4, "shared_experts.down_proj.weight"),
        (6, "down_proj.weight"),
    ] {
        let fd = perturbed_first_divergent(layer, tensor);
        assert_eq!(fd["layer"], layer, "perturbed layer {layer}: {fd}");
        assert_eq!(fd["hidden"], layer + 1);
    }
}

/// `--compare cpu,gpu,golden`: on a machine without a usable GPU one clear error line and exit
/// 2 (nothing on stdout); on a GPU machine the report covers both paths and passes. Both
/// `--dump --path gpu` and `--compare gpu` behave alike; cpu,golden keeps the CPU-only layout.
#[test]
fn gpu_path_is_one_clear_error_without_a_gpu() {
    let fx = fixture();
    let dir = tempfile::tempdir().expect("tempdir");
    let dump = dir.path().join("gpu.safetensors");
    for extra in [
        vec!["--compare", "cpu,gpu,golden"],
        vec!["--dump", dump.to_str().expect("utf8"), "--path", "gpu"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_duet"))
            .arg("e2e")
            .arg(&fx)
            .args(["--decode", "2", "--json"])
            .args(&extra)
            .output()
            .expect("duet runs");
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        match out.status.code() {
            Some(0) => {
                let v: serde_json::Value = serde_json::from_str(&stdout).expect("json");
                assert_eq!(v["paths"]["gpu"]["pass"], true, "{v:#}");
                assert_eq!(v["pass"], true, "{v:#}");
            }
            Some(2) => {
                assert!(stdout.trim().is_empty(), "stdout: {stdout}");
                assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
                assert!(
                    stderr.contains("gpu path cannot run here")
                        && stderr.contains("--compare cpu,golden"),
                    "{stderr}"
                );
            }
            c => panic!("{extra:?}: exit {c:?}\nstdout: {stdout}\nstderr: {stderr}"),
        }
    }
    let (code, v) = duet_e2e_json(&[fx.to_str().expect("utf8"), "--decode", "2"]);
    assert_eq!(code, 0, "{v:#}");
    assert_eq!(v["paths_run"], serde_json::json!(["cpu"]));
    assert_eq!(v["paths"]["cpu"]["pass"], true);
    assert_eq!(v["layers"], v["paths"]["cpu"]["layers"]);
    assert!(v["gpu_vs_cpu"].is_null());
}

/// `duet e2e --bench-decode N` on the CPU path: the JSON carries per-step timings, tokens/s and
/// the HBM floor of the step (both dtype assumptions), all positive and consistent.
#[test]
fn e2e_bench_decode_reports_timings_and_floor() {
    let fx = fixture();
    let (code, v) = duet_e2e_json(&[
        fx.to_str().expect("utf8"),
        "--compare",
        "cpu",
        "--decode",
        "2",
        "--bench-decode",
        "3",
        "--experts",
        "nvfp4",
        "--copy-gbps",
        "1000",
    ]);
    assert_eq!(code, 0, "{v}");
    let b = &v["bench_decode"];
    assert_eq!(b["steps"], 3, "{b}");
    assert_eq!(b["copy_bytes_per_s"].as_f64(), Some(1e12));
    assert_eq!(b["experts"], "nvfp4");
    let cpu = &b["paths"]["cpu"];
    for key in [
        "median_ms",
        "p10_ms",
        "p90_ms",
        "tokens_per_s",
        "floor_us",
        "ratio_vs_floor",
        "floor_as_loaded_us",
        "ratio_vs_as_loaded_floor",
    ] {
        let x = cpu[key].as_f64().unwrap_or(-1.0);
        assert!(x > 0.0 && x.is_finite(), "{key} = {x} in {cpu}");
    }
    let (med, p10, p90) = (
        cpu["median_ms"].as_f64().unwrap_or(0.0),
        cpu["p10_ms"].as_f64().unwrap_or(0.0),
        cpu["p90_ms"].as_f64().unwrap_or(0.0),
    );
    assert!(p10 <= med && med <= p90, "{cpu}");
    assert_eq!(cpu["ms"].as_array().map(|a| a.len()), Some(3));
    // The decode engine on the CPU device over the same steps: the model path's bits.
    let eng = &b["paths"]["cpu-engine"];
    assert_eq!(b["engine_error"], serde_json::Value::Null, "{b}");
    assert_eq!(eng["ms"].as_array().map(|a| a.len()), Some(3), "{eng}");
    assert_eq!(eng["vs_model_path_max_rel"].as_f64(), Some(0.0), "{eng}");
    assert!(eng["median_ms"].as_f64().is_some_and(|x| x > 0.0), "{eng}");
    let tps = cpu["tokens_per_s"].as_f64().unwrap_or(0.0);
    assert!(
        (tps * med / 1e3 - 1.0).abs() < 1e-9,
        "tokens/s = 1000 / median ms"
    );
    // The floor: production (bf16, NVFP4 experts) below as loaded (f32); floor_us = bytes /
    // 1e12 B/s at the middle step.
    let mid = &b["floor_middle_step"];
    let (pb, ab) = (
        mid["production"]["bytes"].as_f64().unwrap_or(0.0),
        mid["as_loaded"]["bytes"].as_f64().unwrap_or(0.0),
    );
    assert!(pb > 0.0 && pb < ab, "{mid}");
    let fus = mid["production"]["floor_us"].as_f64().unwrap_or(0.0);
    assert!((fus - pb / 1e6).abs() < 1e-9 * pb, "{mid}");
    let ratio = cpu["ratio_vs_floor"].as_f64().unwrap_or(0.0);
    let floor = cpu["floor_us"].as_f64().unwrap_or(0.0);
    assert!((ratio - med * 1e3 / floor).abs() < 1e-6 * ratio);
    assert_eq!(v["paths"]["cpu"]["bench_decode"]["steps"], 3);
    // Where the step goes: per-op host time of the timed steps, most first; the tiny-a pattern
    // MEM*EM-E runs 3 Mamba layers (one ssu_step each per token) and 3 MoE layers; the ops'
    // time fits inside the steps' time.
    let ops = cpu["op_breakdown"].as_array().cloned().unwrap_or_default();
    assert!(ops.len() >= 8, "{cpu}");
    let per_step = |name: &str| {
        ops.iter()
            .find(|o| o["op"] == name)
            .and_then(|o| o["calls_per_step"].as_f64())
    };
    assert_eq!(per_step("ssu_step"), Some(3.0), "{ops:?}");
    assert_eq!(per_step("routed_experts"), Some(3.0), "{ops:?}");
    assert_eq!(per_step("attention"), Some(1.0), "{ops:?}");
    assert!(ops
        .iter()
        .any(|o| o["op"].as_str().is_some_and(|n| n.starts_with("linear "))));
    let ms: Vec<f64> = ops
        .iter()
        .map(|o| o["ms_per_step"].as_f64().unwrap_or(-1.0))
        .collect();
    assert!(ms.iter().all(|&x| x >= 0.0), "{ops:?}");
    assert!(
        ms.windows(2).all(|w| w[0] >= w[1]),
        "most time first: {ms:?}"
    );
    let sum: f64 = ms.iter().sum();
    let mean_step = cpu["ms"]
        .as_array()
        .map(|a| a.iter().filter_map(|x| x.as_f64()).sum::<f64>() / a.len() as f64)
        .unwrap_or(0.0);
    assert!(
        sum > 0.0 && sum <= mean_step * 1.001,
        "ops {sum} ms vs step {mean_step} ms"
    );
    // A bad copy ceiling is a clear error.
    let out = Command::new(env!("CARGO_BIN_EXE_duet"))
        .args(["e2e", fx.to_str().expect("utf8"), "--bench-decode", "1"])
        .args(["--copy-gbps", "0"])
        .output()
        .expect("runs");
    assert_ne!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--copy-gbps"));
}

/// The super preset's CPU side with a small pattern and NVFP4 experts (lazy, converted
/// without materialising); about 40 s on 2 cores, hence ignored by default.
#[test]
#[ignore = "slow"]
fn e2e_super_preset_bench_runs_on_the_cpu() {
    let (code, v) = duet_e2e_json(&[
        "--preset",
        "super",
        "--pattern",
        "ME",
        "--mtp-pattern",
        "",
        "--experts",
        "nvfp4",
        "--compare",
        "cpu",
        "--tokens",
        "2",
        "--decode",
        "1",
        "--bench-decode",
        "1",
    ]);
    assert_eq!(code, 0, "{v}");
    assert!(
        v["bench_decode"]["paths"]["cpu"]["median_ms"]
            .as_f64()
            .unwrap_or(0.0)
            > 0.0
    );
}

/// `--weights bf16` rounds the non-expert linear weights to bf16 and runs (the CPU path here;
/// the bench JSON records the choice); an unknown value is a usage error.
#[test]
fn e2e_bf16_weights_run() {
    let fx = fixture();
    let (code, v) = duet_e2e_json(&[
        fx.to_str().expect("utf8"),
        "--compare",
        "cpu",
        "--decode",
        "2",
        "--bench-decode",
        "2",
        "--weights",
        "bf16",
    ]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["bench_decode"]["weights"], "bf16", "{v}");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_duet"))
        .args(["e2e", fx.to_str().expect("utf8"), "--weights", "fp8"])
        .output()
        .expect("duet runs");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("fp8"));
}

/// `--decode-engine`: the CPU path's teacher-forced decode runs through the decode engine (CPU
/// device) and its `decode_logits` match the transformers golden as the model's do (tiny-a and
/// the held-out tiny-b).
#[test]
fn e2e_decode_engine_matches_the_golden() {
    for dir in [fixture(), fixture().with_file_name("nemotron-tiny-b")] {
        let (code, v) = duet_e2e_json(&[
            dir.to_str().expect("utf8"),
            "--compare",
            "cpu,golden",
            "--decode-engine",
        ]);
        assert_eq!(code, 0, "{v:#}");
        assert_eq!(v["pass"], true, "{v:#}");
        assert_eq!(v["decode_with"], "engine");
        let outs = v["outputs"].as_array().cloned().unwrap_or_default();
        let dec = outs
            .iter()
            .find(|o| o["name"] == "decode_logits")
            .unwrap_or_else(|| panic!("no decode_logits in {outs:?}"));
        let e = dec["max_rel"].as_f64().unwrap_or(1.0);
        assert!(e < TOL, "{}: decode_logits max rel {e:e}", dir.display());
    }
}
