#!/usr/bin/env bash
# Session 33, call 6 (the committed kernels: call 2-4's, the x forms removed): the whole gpu_moe
# suite with every version, now with the K = 2688 shape.
cd "$(dirname "$0")/../.."
scripts/device-session.sh
. scripts/calls/lib.sh
run gpu-moe-all 240 $B/tests/gpu_moe --ignored --test-threads 1
grep -h "test result\|FAILED\|panicked" $OUT/gpu-moe-all.log | head -20 >> $OUT/summary.txt
pack
