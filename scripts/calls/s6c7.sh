#!/usr/bin/env bash
# Session 6, device call 7: v9b (plain barrier) vs v9 / v7; per-SM active cycles of v9 alone.
cd "$(dirname "$0")/../.."
[ -d .devbin ] || tar -xJf .devbin.tar.xz
export DUET_ROUTER_BENCH_VERSIONS=v7,v9,v9b
timeout 100 .devbin/duet bench --backend gpu --shape router_t4096 --shape router_t32768 --out $OUT/bench_diag.json > $OUT/bench_diag.log 2>&1
echo "diag rc=$?" | tee -a $OUT/summary.txt
export DUET_ROUTER_BENCH_VERSIONS=v9
M=gpu__time_duration.sum,smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__warps_active.avg.pct_of_peak_sustained_active,sm__cycles_active.avg,sm__cycles_elapsed.avg,sm__cycles_active.max,sm__cycles_active.min,sm__ctas_launched.max,sm__ctas_launched.min,sm__ctas_launched.sum,smsp__warps_launched.sum
timeout 100 ncu --clock-control none --kernel-name router_v9_n16_k22 --launch-count 1 --metrics $M --csv .devbin/duet bench --backend gpu --shape router_t32768 --reps 1 --max-seconds 0 --no-resources --out /tmp/b.json > $OUT/ncu_v9.csv 2>&1
echo "ncu rc=$?" | tee -a $OUT/summary.txt
