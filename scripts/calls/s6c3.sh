#!/usr/bin/env bash
# Session 6, device call 3: router v9 (correctness, the tanh.approx bound, timing, profile).
cd "$(dirname "$0")/../.."
S=scripts/device-session.sh
$S t:gpu_router:300 presets:router_t1,router_t64,router_t4096,router_t32768
M=gpu__time_duration.sum,smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_fp64.avg.pct_of_peak_sustained_active,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread,launch__occupancy_limit_registers,launch__occupancy_limit_shared_mem,sm__cycles_active.avg,sm__cycles_elapsed.avg,smsp__cycles_active.avg
timeout 120 ncu --clock-control none --kernel-name 'regex:router_v9_n16_k22' --launch-count 2 --metrics $M --csv .devbin/duet bench --backend gpu --shape router_t32768 --reps 1 --max-seconds 0 --no-resources --out /tmp/b.json > $OUT/ncu_pipes_v9.csv 2>&1
timeout 120 ncu --clock-control none --kernel-name 'regex:router_v9_n16_k22' --launch-count 1 --section SourceCounters --import-source yes -o /tmp/r9 .devbin/duet bench --backend gpu --shape router_t32768 --reps 1 --max-seconds 0 --no-resources --out /tmp/b.json > $OUT/ncu_src.log 2>&1
ncu --import /tmp/r9.ncu-rep --page source --csv --print-source sass > $OUT/r9_src.csv 2>&1
cd $OUT && tar czf /tmp/all.tgz --exclude=all.tgz . && mv /tmp/all.tgz . && ls | grep -v -E '^(all.tgz|summary.txt)$' | xargs rm -rf
