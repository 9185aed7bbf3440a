#!/usr/bin/env bash
# Session 31, call 6 (DEVBIN_KCACHE="selective_state_update moe", TESTS="gpu_ssu gpu_moe"; carry
# .devbin.tar.xz): the final SSU code (auto also takes v12 for an f16 state at batch 1): the
# op's case table and v12's tests; issue 10's r8p4m8 (r8p4 held to 64 registers, 8 blocks an
# SM: T = 1's GEMM1 in one wave): gpu_moe on it and r8p4, then moe_t1 / t8 / t64 (twice).
# r8p4m8 measured the same as r8p4 and was removed after this call (gpu/NOTES.md "Session 31").
cd "$(dirname "$0")/../.."
scripts/device-session.sh
. scripts/calls/lib.sh
run check-ssu 90 "$B/duet" check --backend gpu --op selective_state_update
run tests-v12 120 "$B/tests/gpu_ssu" --ignored --test-threads 1 ssu_v12_bit_exact
DUET_MOE_TEST_VERSIONS=v3_r8p4,v3_r8p4m8 run tests-moe 150 "$B/tests/gpu_moe" --ignored --test-threads 1
for i in 1 2; do
    DUET_MOE_VERSIONS=v3_r8p4,v3_r8p4m8,v3_r2p8 run "bench-moe-$i" 120 "$B/duet" bench --backend gpu \
        --no-resources --shape moe_t1 --shape moe_t8 --shape moe_t64 --out "$OUT/bench_moe_$i.json"
done
pack
