#!/usr/bin/env bash
# Session 34, call 3: the xw forms with two producer warpgroups (call 2: one was latency-bound on the decode) (moe_xw_body: two producer warpgroups decodes the tokens into
# f16 tiles, two consumer warpgroups decode their weights as wgmma's A and run n64..n256
# wgmma's; named-barrier hand-over). Their GEMM tests next to x64, the layer at T = 4096
# (GEMM1 + GEMM2 on each, and v4 = x64 + s256), then memcheck over the bit tests on them.
cd "$(dirname "$0")/../.."
scripts/device-session.sh
. scripts/calls/lib.sh
DUET_MOE_TEST_VERSIONS=v4_x64,v4_xw128,v4_xw192 run gpu-moe-xw 200 $B/tests/gpu_moe --ignored --test-threads 1 gemm
DUET_MOE_VERSIONS="v4,v4_xw128,v4_xw192,v4_xw192/v4_s256" run bench-moe-4096 150 "$B/duet" bench --backend gpu \
    --no-resources --shape moe_t4096 --out "$OUT/bench_moe_4096.json"
DUET_MOE_TEST_VERSIONS=v4_xw128,v4_xw192 run memcheck-xw 150 compute-sanitizer --tool memcheck \
    $B/tests/gpu_moe --ignored --test-threads 1 bit_exact_on_exact_sums
grep -h "test result\|FAILED\|panicked\|ERROR SUMMARY" $OUT/gpu-moe-xw.log $OUT/memcheck-xw.log | head -20 >> $OUT/summary.txt
pack
