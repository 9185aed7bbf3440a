#!/usr/bin/env bash
# Session 33, call 5: the x forms (x staged in chunks of XC steps, the block synchronizing
# between chunks): gpu_moe on them (a new K = 2688 shape: 2 or 3 chunks), memcheck and
# racecheck over the bit-exact GEMM tests on them, then the layer bench twice.
cd "$(dirname "$0")/../.."
scripts/device-session.sh
. scripts/calls/lib.sh
DUET_MOE_TEST_VERSIONS=v3,v3_r8p4,v3_r2p8,v3_r8w8p4,v3_r8w8p4x11,v3_r8w8p6x8 run gpu-moe-r 150 \
    $B/tests/gpu_moe --ignored --test-threads 1
DUET_MOE_TEST_VERSIONS=v3_r8w8p4x11,v3_r8w8p6x8 run memcheck 120 compute-sanitizer \
    --tool memcheck $B/tests/gpu_moe --ignored --test-threads 1 gemm1_bit_exact gemm2_bit_exact
DUET_MOE_TEST_VERSIONS=v3_r8w8p4x11,v3_r8w8p6x8 run racecheck 150 compute-sanitizer \
    --tool racecheck $B/tests/gpu_moe --ignored --test-threads 1 gemm2_bit_exact
V="v3,v3_r8p4,v3_r8w8p4,v3_r8w8p4x11,v3_r8w8p6x8,v3_r8w8p4/v3_r8w8p4x11,v3_r8w8p4/v3_r8w8p6x8,v3_r8w8p6x8/v3_r8p4"
for i in 1 2; do
    DUET_MOE_VERSIONS="$V" run bench-moe-$i 200 "$B/duet" bench --backend gpu --no-resources \
        --shape moe_t1 --shape moe_t8 --shape moe_t64 --out "$OUT/bench_moe_$i.json"
done
grep -h "test result\|FAILED\|panicked\|ERROR SUMMARY\|RACECHECK SUMMARY" $OUT/gpu-moe-*.log $OUT/memcheck.log $OUT/racecheck.log | head -20 >> $OUT/summary.txt
pack
