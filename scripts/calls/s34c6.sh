#!/usr/bin/env bash
# Session 34, call 6 (the final kernel file): v4 now takes xw192 (GEMM1) and xw192t3 (GEMM2).
# gpu_moe with every version, the layer at T = 4096 (v4 next to session 33's v4 = x64 + s256),
# racecheck over the bit-exact GEMM tests on the xw192 forms, their GEMM2 past 2^31.
cd "$(dirname "$0")/../.."
scripts/device-session.sh
. scripts/calls/lib.sh
run gpu-moe 240 $B/tests/gpu_moe --ignored --test-threads 1
DUET_MOE_VERSIONS="v4,v4_x64/v4_s256" run bench-moe-4096 120 "$B/duet" bench --backend gpu --no-resources \
    --shape moe_t4096 --out "$OUT/bench_moe_4096.json"
DUET_MOE_TEST_VERSIONS=v4_xw192,v4_xw192t3 run racecheck-xw 120 compute-sanitizer --tool racecheck \
    $B/tests/gpu_moe --ignored --test-threads 1 bit_exact_on_exact_sums
grep -h "test result\|FAILED\|panicked\|ERROR SUMMARY\|RACECHECK SUMMARY" $OUT/gpu-moe.log $OUT/racecheck-xw.log | head -20 >> $OUT/summary.txt
DUET_INDEX64_VERSIONS=v4_xw192,v4_xw192t3 run index64-xw 120 $B/tests/gpu_index64 --ignored --test-threads 1 \
    --nocapture moe_expert_gemm2_past_2_pow_31
grep -h "test result\|FAILED\|panicked" $OUT/index64-xw.log | head -5 >> $OUT/summary.txt
pack
