#!/usr/bin/env bash
# Session 35, call 1 (prepared without a device: session 35 had none; run it first next time).
# The xw forms now sync all 512 threads (FIN) before the epilogue tile overwrites the x tiles;
# the new xw192e / xw192t3e forms store the epilogue tile with the producers too (512 threads).
# racecheck over the bit-exact GEMM tests on all four (session 34 saw 456 write-write hazards on
# xw192 before FIN; the bit-exact tests there are the e forms' first run), the layer at T = 4096
# (both xw pairs, v4). Worst case 240 + 60 + 60 + 150 s of step limits.
# Build here first: scripts/devbin-quick.sh "gpu_moe gpu_index64" "moe" (6.6 MB); carry [".devbin.tar.xz"].
cd "$(dirname "$0")/../.."
scripts/device-session.sh
. scripts/calls/lib.sh
DUET_MOE_TEST_VERSIONS=v4_xw192,v4_xw192t3,v4_xw192e,v4_xw192t3e run racecheck-xw 240 \
    compute-sanitizer --tool racecheck --print-limit 20 \
    $B/tests/gpu_moe --ignored --test-threads 1 bit_exact_on_exact_sums
# the hand-over alone, with and without the final 512-thread barrier (tests xw_handover_probe_*)
run racecheck-probe-fin 60 compute-sanitizer --tool racecheck --print-limit 5 \
    $B/tests/gpu_moe --ignored --test-threads 1 xw_handover_probe_fin
run racecheck-probe-arrive 60 compute-sanitizer --tool racecheck --print-limit 5 \
    $B/tests/gpu_moe --ignored --test-threads 1 xw_handover_probe_arrive_only
grep -h "test result\|FAILED\|panicked\|RACECHECK SUMMARY" $OUT/racecheck-probe-*.log >> $OUT/summary.txt
DUET_MOE_VERSIONS="v4_xw192/v4_xw192t3,v4_xw192e/v4_xw192t3e,v4" run bench-moe-4096 150 \
    "$B/duet" bench --backend gpu --no-resources --shape moe_t4096 --out "$OUT/bench_moe_4096.json"
grep -h "test result\|FAILED\|panicked\|RACECHECK SUMMARY" $OUT/racecheck-xw.log | head -20 >> $OUT/summary.txt
grep -h "Race reported" $OUT/racecheck-xw.log | sed 's/ at 0x.*//' | sort | uniq -c | head -10 >> $OUT/summary.txt
pack
