#!/usr/bin/env bash
# Session 6, device call 8: v9 / v10 with the two-slot (<= 64 candidates) path and the unrolled
# slow path: router tests, timing, per-SM active cycles.
cd "$(dirname "$0")/../.."
S=scripts/device-session.sh
$S t:gpu_router:300
export DUET_ROUTER_BENCH_VERSIONS=v4,v7,v9,v10
timeout 100 .devbin/duet bench --backend gpu --shape router_t1 --shape router_t64 --shape router_t4096 --shape router_t32768 --out $OUT/bench_router.json > $OUT/bench_router.log 2>&1
echo "bench rc=$?" | tee -a $OUT/summary.txt
export DUET_ROUTER_BENCH_VERSIONS=v9
M=gpu__time_duration.sum,smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__warps_active.avg.pct_of_peak_sustained_active,sm__cycles_active.avg,sm__cycles_elapsed.avg,sm__cycles_active.max,sm__cycles_active.min,dram__throughput.avg.pct_of_peak_sustained_elapsed
timeout 100 ncu --clock-control none --kernel-name router_v9_n16_k22 --launch-count 1 --metrics $M --csv .devbin/duet bench --backend gpu --shape router_t32768 --reps 1 --max-seconds 0 --no-resources --out /tmp/b.json > $OUT/ncu_v9.csv 2>&1
echo "ncu rc=$?" | tee -a $OUT/summary.txt
cd $OUT && tar czf /tmp/all.tgz --exclude=all.tgz . && mv /tmp/all.tgz . && ls | grep -v -E '^(all.tgz|summary.txt)$' | xargs rm -rf
