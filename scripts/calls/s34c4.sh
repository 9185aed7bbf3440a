#!/usr/bin/env bash
# Session 34, call 4: xw192 (two producer warpgroups, 2 x tiles, 4 ring stages) against
# xw192t3 (3 x tiles: the producer up to two steps ahead; 3 stages), their GEMM tests, the
# layer at T = 4096 next to v4, then ncu (warp states, source counters) on xw192's GEMM1.
cd "$(dirname "$0")/../.."
scripts/device-session.sh
. scripts/calls/lib.sh
DUET_MOE_TEST_VERSIONS=v4_xw192,v4_xw192t3 run gpu-moe-xw 200 $B/tests/gpu_moe --ignored --test-threads 1 gemm
DUET_MOE_VERSIONS="v4,v4_xw192,v4_xw192t3,v4_xw192/v4_s256,v4_xw192t3/v4_s256" run bench-moe-4096 150 "$B/duet" bench \
    --backend gpu --no-resources --shape moe_t4096 --out "$OUT/bench_moe_4096.json"
grep -h "test result\|FAILED\|panicked" $OUT/gpu-moe-xw.log | head -20 >> $OUT/summary.txt
sed -i 's/run "ncu-src-$1" 200/run "ncu-src-$1" 150/' scripts/calls/lib.sh
DUET_MOE_VERSIONS=v4_xw192 ncu_src_moe xw192_ff_q moe_t4096
pack
