#!/usr/bin/env bash
# Session 33, call 7: the fused layer (moe_layer_r8w8p4_ff: GEMM1 and GEMM2 in one launch,
# GEMM2's blocks waiting on counters of their m-tile's GEMM1 blocks): its bit test against the
# two launches at T = 1 / 8 / 64, then the layer bench once (its `fused_layer` entry).
cd "$(dirname "$0")/../.."
scripts/device-session.sh
. scripts/calls/lib.sh
run gpu-moe-fused 90 $B/tests/gpu_moe --ignored --test-threads 1 fused_layer
DUET_MOE_VERSIONS="v3_r8p4,v3_r8w8p4" run bench-moe 90 "$B/duet" bench --backend gpu --no-resources \
    --shape moe_t1 --shape moe_t8 --shape moe_t64 --out "$OUT/bench_moe.json"
grep -h "test result\|FAILED\|panicked" $OUT/gpu-moe-fused.log | head -20 >> $OUT/summary.txt
pack
