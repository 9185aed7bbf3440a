//! Mamba GPU benchmarks (not timed tests): prints the JSON of the bench presets
//! `conv1d_prefill_50k` (batch 1, 50,000 tokens, bf16, 10240 channels, width 4, silu) and
//! `ssd_50k` / `ssd_50k_sweep` (128 heads x 64, dstate 128, 8 groups, chunk 128, no z).
//! `cargo test -p duet-gpu --release --test mamba_bench -- --ignored --nocapture`
//! (DUET_MAMBA_BENCH=conv1d_prefill_50k,ssd_50k picks presets).

#[test]
#[ignore = "gpu"]
fn mamba_bench_presets() {
    let list = std::env::var("DUET_MAMBA_BENCH")
        .unwrap_or_else(|_| "conv1d_prefill_50k,ssd_50k_sweep".into());
    for name in list.split(',').filter(|s| !s.is_empty()) {
        let v = gpu::bench::preset(name).unwrap_or_else(|e| panic!("bench {name}: {e}"));
        println!("BENCH {name} {}", serde_json::to_string(&v).expect("json"));
    }
}
