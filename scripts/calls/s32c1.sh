#!/usr/bin/env bash
# Session 32, call 1 (TESTS="gpu_model gpu_moe", DEVBIN_KCACHE="selective_state_update moe
# model_ops causal_conv1d noaux_tc_router"; carry .devbin.tar.xz):
#  - the decode step on SSU v12 (DECODE_SSU): gpu_model's new Super-shape test (v12 / v10 / v6
#    give the same bits) and the whole gpu_model suite; the fused super engine with v12, then
#    with DUET_DECODE_SSU=v10 (24 steps each; logits vs the model path);
#  - moe.cu PDL-safe, GEMM2 `early`: gpu_moe on r8p4 / r2p8 (bit tests, the programmatic-edge
#    layer test), then moe_t1 / t8 / t64 twice (graph_pdl entries next to the plain graphs);
#  - the SSU op's case table (host refactor 729b6efb had not run on the device).
cd "$(dirname "$0")/../.."
scripts/device-session.sh
. scripts/calls/lib.sh
run tests-model-ssu 120 "$B/tests/gpu_model" --ignored --test-threads 1 decode_ssu_versions_agree
DUET_MOE_TEST_VERSIONS=v3_r8p4,v3_r2p8 run tests-moe 200 "$B/tests/gpu_moe" --ignored --test-threads 1
for i in 1 2; do
    DUET_MOE_VERSIONS=v3_r8p4,v3_r2p8 run "bench-moe-$i" 150 "$B/duet" bench --backend gpu \
        --no-resources --shape moe_t1 --shape moe_t8 --shape moe_t64 --out "$OUT/bench_moe_$i.json"
done
run check-ssu 90 "$B/duet" check --backend gpu --op selective_state_update
run tests-model 300 "$B/tests/gpu_model" --ignored --test-threads 1
for v in v12 v10; do
    DUET_DECODE_SSU=$v E2E_STEPS=24 E2E_SUPER_LIMIT=150 scripts/device-session.sh e2esuper16gf
    mv "$OUT/e2e-super-bf16-graphs-fused.log" "$OUT/e2e-super-fused-ssu-$v.log" 2>/dev/null
done
pack
