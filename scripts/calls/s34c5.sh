#!/usr/bin/env bash
# Session 34, call 5: the xw producers with their token rows' offsets computed once (call 4's
# ncu: the producers' per-stage address arithmetic) and 64 registers (unrolled units): GEMM
# tests, then the layer at T = 4096 twice (v4, the xw forms, xw GEMM2 behind x64's GEMM1).
cd "$(dirname "$0")/../.."
scripts/device-session.sh
. scripts/calls/lib.sh
DUET_MOE_TEST_VERSIONS=v4_xw128,v4_xw192,v4_xw192t3 run gpu-moe-xw 200 $B/tests/gpu_moe --ignored --test-threads 1 gemm
for i in 1 2; do
DUET_MOE_VERSIONS="v4,v4_xw128,v4_xw192,v4_xw192t3,v4_x64/v4_xw192t3,v4_xw192/v4_xw192t3" run bench-moe-4096-$i 150 "$B/duet" bench \
    --backend gpu --no-resources --shape moe_t4096 --out "$OUT/bench_moe_4096_$i.json"
done
grep -h "test result\|FAILED\|panicked" $OUT/gpu-moe-xw.log | head -20 >> $OUT/summary.txt
pack
