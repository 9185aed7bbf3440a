#!/usr/bin/env bash
# Session 6, device call 4: router v10 correctness; v7-v10 timing vs persistent blocks per SM.
cd "$(dirname "$0")/../.."
S=scripts/device-session.sh
$S t:gpu_router:300
export DUET_ROUTER_BENCH_VERSIONS=v4,v7,v8,v9,v10
for cap in default 0 1 2 3; do
  if [ $cap = default ]; then unset DUET_ROUTER_BLOCKS_PER_SM; else export DUET_ROUTER_BLOCKS_PER_SM=$cap; fi
  timeout 100 .devbin/duet bench --backend gpu --shape router_t4096 --shape router_t32768 --out $OUT/bench_cap_$cap.json > $OUT/bench_cap_$cap.log 2>&1
  echo "cap $cap rc=$?" >> $OUT/summary.txt
done
unset DUET_ROUTER_BLOCKS_PER_SM
M=gpu__time_duration.sum,smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__warps_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread,sm__cycles_active.avg,sm__cycles_elapsed.avg,sm__cycles_active.max,sm__cycles_active.min,dram__throughput.avg.pct_of_peak_sustained_elapsed
timeout 150 ncu --clock-control none --kernel-name 'regex:router_v(7_n16|9_n16_k22|10_n16_k22)' --launch-count 6 --metrics $M --csv .devbin/duet bench --backend gpu --shape router_t32768 --reps 1 --max-seconds 0 --no-resources --out /tmp/b.json > $OUT/ncu_cycles.csv 2>&1
cd $OUT && tar czf /tmp/all.tgz --exclude=all.tgz . && mv /tmp/all.tgz . && ls | grep -v -E '^(all.tgz|summary.txt)$' | xargs rm -rf
