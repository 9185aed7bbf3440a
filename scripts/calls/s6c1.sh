#!/usr/bin/env bash
# Session 6, device call 1: verify session 5's unrun work, time router v7, profile it.
cd "$(dirname "$0")/../.."
S=scripts/device-session.sh
$S t:gpu_index64:200:model_gemm_past t:gpu_router:200 t:gpu_model:200+e2e presets:router_t4096,router_t32768 e2esuper
M=gpu__time_duration.sum,smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_fp64.avg.pct_of_peak_sustained_active,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread
timeout 120 ncu --clock-control none --kernel-name 'regex:router_v[47]_n16' --launch-count 4 --metrics $M --csv .devbin/duet bench --backend gpu --shape router_t32768 --reps 1 --max-seconds 0 --no-resources --out /tmp/b.json > $OUT/ncu_pipes.csv 2>&1
timeout 120 ncu --clock-control none --kernel-name 'regex:router_v7_n16' --launch-count 1 --section SourceCounters --import-source yes -o /tmp/r7 .devbin/duet bench --backend gpu --shape router_t32768 --reps 1 --max-seconds 0 --no-resources --out /tmp/b.json > $OUT/ncu_src.log 2>&1
ncu --import /tmp/r7.ncu-rep --page source --csv --print-source sass > $OUT/r7_src.csv 2>&1
cd $OUT && tar czf /tmp/all.tgz --exclude=all.tgz . && mv /tmp/all.tgz . && ls | grep -v -E '^(all.tgz|summary.txt)$' | xargs rm -rf
