//! Prints the target benchmarks as JSON (one line per preset):
//! router at T = 1, 64, 4096, 32768 (512 experts, top-22) and NVFP4 quantize of an
//! 8192 x 8192 bf16 tensor against the device-to-device copy ceiling. `#[ignore = "gpu"]`.
//! Writes `$DUET_OUT/bench.json` when DUET_OUT is set.

#[test]
#[ignore = "gpu"]
fn target_presets() {
    let mut all = vec![];
    for p in [
        "copy",
        "router_t1",
        "router_t64",
        "router_t4096",
        "router_t32768",
        "nvfp4_8192",
    ] {
        let v = match gpu::bench::preset(p) {
            Ok(v) => v,
            Err(e) => {
                println!("BENCH {p} FAILED: {e}");
                panic!("bench {p}: {e}");
            }
        };
        println!("BENCH {}", serde_json::to_string(&v).unwrap_or_default());
        all.push(v);
    }
    if let Ok(dir) = std::env::var("DUET_OUT") {
        let p = std::path::Path::new(&dir).join("bench.json");
        let _ = std::fs::write(p, serde_json::to_string_pretty(&all).unwrap_or_default());
    }
}
