#!/usr/bin/env bash
# Session 33, call 4: r8w8p3 (three ring stages: 71 KB of shared memory at K = 2688, three
# 8-warp blocks an SM instead of r8w8p4's two) for GEMM2 at T = 64; gpu_moe on it, then the
# layer bench twice.
cd "$(dirname "$0")/../.."
scripts/device-session.sh
. scripts/calls/lib.sh
DUET_MOE_TEST_VERSIONS=v3,v3_r8w8p3 run gpu-moe-r 150 $B/tests/gpu_moe --ignored --test-threads 1
V="v3,v3_r8p4,v3_r8w8p4,v3_r8w8p3,v3_r8w8p4/v3_r8w8p3,v3_r8w8p3/v3_r8p4"
for i in 1 2; do
    DUET_MOE_VERSIONS="$V" run bench-moe-$i 200 "$B/duet" bench --backend gpu --no-resources \
        --shape moe_t1 --shape moe_t8 --shape moe_t64 --out "$OUT/bench_moe_$i.json"
done
grep -h "test result\|FAILED\|panicked" $OUT/gpu-moe-*.log | head -20 >> $OUT/summary.txt
pack
