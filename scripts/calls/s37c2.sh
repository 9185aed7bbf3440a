#!/usr/bin/env bash
# Session 37, call 8: SSD v6 (`ssd6_fused_p64_n128`: v5 with the stage loads through the TMA,
# 5-D tensor maps whose boxes land in the core-matrix layout; first run anywhere). ncu on v5
# (call 5) had row warpgroup 0, which issues v5's cp.async loads, as the critical role (6 % of
# its stall samples at barriers against 23-29 % for the others; 29 % long-scoreboard in its load
# loop). The sequential oracle first under a short limit (a wrong byte count hangs the mbarrier
# wait), then mamba_ssd's fused tests (every version), ssd_4k / ssd_50k twice, memcheck, ncu's
# source counters on ssd6, racecheck over the bf16 row, v6 past 2^31. Worst case
# 60 + 150 + 2 x 120 + 120 + 150 + 150 + 150 s of step limits; expected ~330 s.
# Build: scripts/devbin-quick.sh "mamba_ssd gpu_index64" "ssd_chunk_scan"; carry
# [".devbin.tar.xz"].
cd "$(dirname "$0")/../.."
scripts/device-session.sh
. scripts/calls/lib.sh
run ssd-oracle 60 $B/tests/mamba_ssd --ignored --test-threads 1 ssd_v2_matches_sequential_oracle
grep -h "test result\|FAILED\|panicked" $OUT/ssd-oracle.log | head -5 >> $OUT/summary.txt
if grep -q "^ssd-oracle rc=0 " $OUT/summary.txt; then
    run ssd-v2 150 $B/tests/mamba_ssd --ignored --test-threads 1 ssd_v2
    grep -h "test result\|FAILED\|panicked" $OUT/ssd-v2.log | head -20 >> $OUT/summary.txt
    for i in 1 2; do
        run "bench-ssd-$i" 120 "$B/duet" bench --backend gpu --no-resources --shape ssd_4k \
            --shape ssd_50k --out "$OUT/bench_ssd_$i.json"
        python3 scripts/calls/ssd_summary.py "$OUT/bench_ssd_$i.json" | sed "s/^/run $i /" >> $OUT/summary.txt
    done
    SAN_LIMIT=120 scripts/device-session.sh memcheck:ssd_chunk_scan/what=bf16
    ncu_ssd ssd6_fused_p64_n128
    # racecheck per version on the oracle's case: the case-table racecheck (call 1) reached
    # racecheck's hazard limit on v4's reports before v5 / v5m / auto ran, so it does not clear
    # them. v4 alone, then v5 and v6 alone.
    for vs in v4 v5,v6; do
        run "racecheck-$vs" 150 env DUET_MAMBA_TEST_VERSIONS=$vs compute-sanitizer --tool racecheck \
            --print-limit 10 $B/tests/mamba_ssd --ignored --test-threads 1 ssd_v2_matches_sequential_oracle
        grep -h "RACECHECK SUMMARY\|test result" "$OUT/racecheck-$vs.log" | sed "s/^/$vs /" >> $OUT/summary.txt
        grep -h "Race reported" "$OUT/racecheck-$vs.log" | sed 's/(.*//' | sort | uniq -c | head -3 >> $OUT/summary.txt
    done
    run index64-ssd6 150 $B/tests/gpu_index64 --ignored --test-threads 1 --nocapture \
        ssd_chunk_scan_v6_past_2_pow_31
    grep -h "test result\|FAILED\|panicked" $OUT/index64-ssd6.log | head -5 >> $OUT/summary.txt
else
    echo "ssd-oracle failed: v6 not run further" >> $OUT/summary.txt
    grep -h "panicked\|Error\|error" $OUT/ssd-oracle.log | head -10 >> $OUT/summary.txt
fi
pack
