#!/usr/bin/env bash
# Session 32, call 3 (call 2's build): the fused super engine with the decode SSU on v12 and
# v10 alternating after a warm-up run (calls 1-2 each lost their first run to the machine's
# start: kernel compiles, clocks), and memcheck over gpu_moe's GEMM tests on the c forms
# (issue_cg counts its position instead of dividing since call 2).
cd "$(dirname "$0")/../.."
scripts/device-session.sh
. scripts/calls/lib.sh
DUET_MOE_TEST_VERSIONS=v3_r2p8c2,v3_r8p4c2 run memcheck-moe-c 200 compute-sanitizer --tool memcheck \
    --error-exitcode 1 "$B/tests/gpu_moe" --ignored --test-threads 1 gemm1_bit_exact gemm2_bit_exact
for v in v12 v10 v12 v10 v12; do
    DUET_DECODE_SSU=$v E2E_STEPS=24 E2E_SUPER_LIMIT=200 scripts/device-session.sh e2esuper16gf
    n=$(ls "$OUT" | grep -c "^e2e-super-fused-ssu-$v")
    mv "$OUT/e2e-super-bf16-graphs-fused.log" "$OUT/e2e-super-fused-ssu-$v-$n.log" 2>/dev/null
done
pack
