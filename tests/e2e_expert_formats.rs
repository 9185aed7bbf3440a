//! `duet e2e --experts bf16|nvfp4`: the routed experts stored as Nemotron 3 Super ships them.
//! The golden is f32, so the first MoE layer is where the error appears, with the size the
//! format's rounding explains; the layers before it stay exact.

use std::process::Command;

fn e2e(experts: &str) -> serde_json::Value {
    let dir = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/fixtures/models/nemotron-tiny-a"
    );
    let o = Command::new(env!("CARGO_BIN_EXE_duet"))
        .args(["e2e", dir, "--decode", "2", "--experts", experts, "--json"])
        .output()
        .expect("run duet");
    assert!(
        o.status.code().is_some_and(|c| c <= 1),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).expect("json")
}

fn layer_nmse(v: &serde_json::Value, i: usize) -> f64 {
    v["layers"][i]["nmse"].as_f64().unwrap()
}

#[test]
fn expert_formats_perturb_from_the_first_moe_layer_by_their_rounding() {
    let f32 = e2e("f32");
    let bf16 = e2e("bf16");
    let fp4 = e2e("nvfp4");
    assert_eq!(f32["pass"], true);
    // Layer 0 is Mamba: untouched by the expert format.
    for v in [&bf16, &fp4] {
        assert!(layer_nmse(v, 1) < 1e-10);
        assert_eq!(
            v["first_divergent"]["hidden"], 2,
            "{}",
            v["first_divergent"]
        );
    }
    // bf16 (8-bit mantissa) vs NVFP4 (E2M1 x E4M3 block scale): nmse of one weight matrix
    // ~1e-5 vs ~9e-3; after the first MoE block (two GEMMs, relu^2, the residual) the hidden
    // state carries about that much.
    let (b, q) = (layer_nmse(&bf16, 2), layer_nmse(&fp4, 2));
    assert!(b > 1e-9 && b < 1e-4, "bf16 layer-1 nmse {b}");
    assert!(q > 1e-3 && q < 5e-2, "nvfp4 layer-1 nmse {q}");
    // bf16 experts keep the greedy tokens nearly everywhere.
    let logits = &bf16["outputs"][0];
    assert_eq!(logits["name"], "logits");
    assert!(logits["max_rel"].as_f64().unwrap() < 1e-2);
}
