#!/usr/bin/env bash
# Session 35, call 2 (prepared without a device): gpu_moe with every version, memcheck over the
# bit-exact GEMM tests on the xw forms (not run since session 34 call 5's producer change), their
# GEMM2 past 2^31 (a second T = 4096 run of both xw pairs fits a third call).
# Build here first: scripts/devbin-quick.sh "gpu_moe gpu_index64" "moe" (6.6 MB); carry [".devbin.tar.xz"].
cd "$(dirname "$0")/../.."
scripts/device-session.sh
. scripts/calls/lib.sh
run gpu-moe 240 $B/tests/gpu_moe --ignored --test-threads 1
DUET_MOE_TEST_VERSIONS=v4_xw192,v4_xw192t3,v4_xw192e,v4_xw192t3e run memcheck-xw 150 \
    compute-sanitizer --tool memcheck $B/tests/gpu_moe --ignored --test-threads 1 bit_exact_on_exact_sums
DUET_INDEX64_VERSIONS=v4_xw192e,v4_xw192t3e run index64-xw 120 $B/tests/gpu_index64 --ignored \
    --test-threads 1 --nocapture moe_expert_gemm2_past_2_pow_31
grep -h "test result\|FAILED\|panicked\|ERROR SUMMARY" $OUT/gpu-moe.log $OUT/memcheck-xw.log \
    $OUT/index64-xw.log | head -20 >> $OUT/summary.txt
pack
