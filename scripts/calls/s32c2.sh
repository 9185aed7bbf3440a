#!/usr/bin/env bash
# Session 32, call 2 (TESTS="gpu_model gpu_moe", kernel cache: moe, selective_state_update,
# model_ops; carry .devbin.tar.xz):
#  - gpu_model's decode-SSU test with the state-bits / out-tolerance split (call 1: v12's out
#    bits differ from v6's: another summation order);
#  - the c forms without the i64 division a stage (moe.cu issue_cg): gpu_moe's GEMM tests on
#    them and r8p4 / r2p8, then moe_t1 / t8 / t64 twice with the c forms, r8p4 / r2p8 and
#    mixed pairs (GEMM1 / GEMM2);
#  - the fused super engine in the other order than call 1 (v10 first, then v12).
cd "$(dirname "$0")/../.."
scripts/device-session.sh
. scripts/calls/lib.sh
run tests-model-ssu 120 "$B/tests/gpu_model" --ignored --test-threads 1 decode_ssu_versions_agree
DUET_MOE_TEST_VERSIONS=v3_r8p4,v3_r2p8,v3_r2p8c2,v3_r8p4c2,v3_r2p8c4,v3_r8p4c4 \
    run tests-moe 240 "$B/tests/gpu_moe" --ignored --test-threads 1 bit_exact random
V=v3_r8p4,v3_r2p8,v3_r2p8c2,v3_r8p4c2,v3_r2p8c4,v3_r8p4c4,v3_r2p8c2/v3_r2p8,v3_r8p4c2/v3_r8p4,v3_r2p8c4/v3_r2p8
for i in 1 2; do
    DUET_MOE_VERSIONS=$V run "bench-moe-$i" 200 "$B/duet" bench --backend gpu \
        --no-resources --shape moe_t1 --shape moe_t8 --shape moe_t64 --out "$OUT/bench_moe_$i.json"
done
for v in v10 v12; do
    DUET_DECODE_SSU=$v E2E_STEPS=24 E2E_SUPER_LIMIT=150 scripts/device-session.sh e2esuper16gf
    mv "$OUT/e2e-super-bf16-graphs-fused.log" "$OUT/e2e-super-fused-ssu-$v.log" 2>/dev/null
done
pack
