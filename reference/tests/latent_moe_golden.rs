//! `latent_moe` against the transformers MoE blocks of the tiny Nemotron-H golden: for every
//! MoE layer i but the last, hidden.{i} -> rmsnorm -> latent_moe -> + residual must equal
//! hidden.{i+1}.

use reference::ops::find;
use reference::{io, Tensor, TensorMap};
use std::path::Path;

fn call(op: &str, items: Vec<(&str, Tensor)>, sets: &[(&str, &str)]) -> TensorMap {
    let m: TensorMap = items.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
    let s: Vec<(String, String)> = sets
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    find(op)
        .unwrap()
        .call(&m, &s)
        .unwrap_or_else(|e| panic!("{op}: {e}"))
}

fn stack(w: &TensorMap, prefix: &str, e: usize, name: &str) -> Tensor {
    let first = &w[&format!("{prefix}experts.0.{name}.weight")];
    let mut v = vec![];
    for x in 0..e {
        v.extend(w[&format!("{prefix}experts.{x}.{name}.weight")].to_f32_vec());
    }
    let mut shape = vec![e];
    shape.extend(&first.shape);
    Tensor::from_f32(&shape, v)
}

#[test]
fn latent_moe_matches_the_transformers_moe_blocks() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/models/nemotron-tiny-a");
    let w = io::load(&dir.join("model.safetensors")).unwrap();
    let gold = io::load(&dir.join("reference.safetensors")).unwrap();
    let cfg: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("config.json")).unwrap()).unwrap();
    let kinds = cfg["layers_block_type"].as_array().unwrap();
    let e = cfg["n_routed_experts"].as_u64().unwrap() as usize;
    let top_k = cfg["num_experts_per_tok"].to_string();
    let scale = cfg["routed_scaling_factor"].to_string();
    let mut checked = 0;
    for (i, kind) in kinds.iter().enumerate() {
        // hidden.{n_layers} is after norm_f, not the last layer's raw output.
        if kind != "moe" || i + 1 == kinds.len() {
            continue;
        }
        let p = format!("backbone.layers.{i}.mixer.");
        let h_in = &gold[&format!("hidden.{i}")];
        let normed = call(
            "rmsnorm",
            vec![
                ("x", h_in.clone()),
                (
                    "weight",
                    w[&format!("backbone.layers.{i}.norm.weight")].clone(),
                ),
            ],
            &[("eps", "1e-5")],
        );
        let out = call(
            "latent_moe",
            vec![
                ("hidden", normed["out"].clone()),
                ("gate_weight", w[&format!("{p}gate.weight")].clone()),
                (
                    "e_score_correction_bias",
                    w[&format!("{p}gate.e_score_correction_bias")].clone(),
                ),
                (
                    "fc1_latent_proj",
                    w[&format!("{p}fc1_latent_proj.weight")].clone(),
                ),
                (
                    "fc2_latent_proj",
                    w[&format!("{p}fc2_latent_proj.weight")].clone(),
                ),
                ("up_proj", stack(&w, &p, e, "up_proj")),
                ("down_proj", stack(&w, &p, e, "down_proj")),
                (
                    "shared_up_proj",
                    w[&format!("{p}shared_experts.up_proj.weight")].clone(),
                ),
                (
                    "shared_down_proj",
                    w[&format!("{p}shared_experts.down_proj.weight")].clone(),
                ),
            ],
            &[("top_k", &top_k), ("routed_scaling_factor", &scale)],
        );
        let got: Vec<f32> = out["out"]
            .to_f32_vec()
            .iter()
            .zip(h_in.to_f32_vec())
            .map(|(a, b)| a + b)
            .collect();
        let want = gold[&format!("hidden.{}", i + 1)].to_f32_vec();
        let amax = want.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let err = want
            .iter()
            .zip(&got)
            .fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
        assert!(err / amax < 1e-4, "layer {i}: max rel error {}", err / amax);
        // The block must do real work: the output differs from the residual alone.
        let moved = want
            .iter()
            .zip(h_in.to_f32_vec())
            .fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
        assert!(moved / amax > 1e-2);
        checked += 1;
    }
    assert!(checked >= 2, "the fixture has MoE layers");
}
