#!/usr/bin/env bash
# Session 33, call 3 (the committed kernels: batched x staging, w forms; v3 picks r8w8p4 past
# one row per expert and for GEMM1 at T = 1): gpu_moe with its own version list (every
# version), then with the R forms named, compute-sanitizer memcheck over the bit-exact GEMM
# tests on r8w8p4 / r8w16p4 / r2w8p8, and the layer bench twice at T = 1 / 8 / 64.
cd "$(dirname "$0")/../.."
scripts/device-session.sh
. scripts/calls/lib.sh
run gpu-moe-all 200 $B/tests/gpu_moe --ignored --test-threads 1
DUET_MOE_TEST_VERSIONS=v3,v3_r8p4,v3_r2p8,v3_r8w8p4,v3_r2w8p8,v3_r8w16p4 run gpu-moe-r 150 \
    $B/tests/gpu_moe --ignored --test-threads 1
DUET_MOE_TEST_VERSIONS=v3_r8w8p4,v3_r8w16p4,v3_r2w8p8 run memcheck 150 compute-sanitizer \
    --tool memcheck $B/tests/gpu_moe --ignored --test-threads 1 bit_exact
V="v3,v3_r8p4,v3_r2p8,v3_r8w8p4,v3_r8p4/v3_r8w8p4,v3_r8w8p4/v3_r8p4"
for i in 1 2; do
    DUET_MOE_VERSIONS="$V" run bench-moe-$i 200 "$B/duet" bench --backend gpu --no-resources \
        --shape moe_t1 --shape moe_t8 --shape moe_t64 --out "$OUT/bench_moe_$i.json"
done
grep -h "test result\|FAILED\|panicked\|ERROR SUMMARY" $OUT/gpu-moe-*.log $OUT/memcheck.log | head -20 >> $OUT/summary.txt
pack
