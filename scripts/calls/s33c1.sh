#!/usr/bin/env bash
# Session 33, call 1: where r8p4's time goes at T = 64 (issue 10's lead): ncu source counters
# (per SASS line: executions, stall samples), warp states, pipe utilization and the instruction
# mix of one launch each of GEMM1 (moe_gemm_r8p4_ff_q) and GEMM2 (moe_gemm_r8p4_ff_o) in the
# moe_t64 preset, and of r2p8's GEMM1 at T = 8; then the layer bench once for reference.
cd "$(dirname "$0")/../.."
scripts/device-session.sh
. scripts/calls/lib.sh
ncu_pipes() { # TAG SHAPE
    run "ncu-pipes-$1-$2" 200 "$ncu" --clock-control none -k "regex:^moe_gemm_$1\$" -c 1 \
        --section SourceCounters --section WarpStateStats --section SpeedOfLight --section Occupancy \
        --section ComputeWorkloadAnalysis --section InstructionStats --section MemoryWorkloadAnalysis \
        --section LaunchStats --import-source no -o "/tmp/p$1$2" "$B/duet" bench --backend gpu \
        --shape "$2" --out /tmp/ncu_bench.json
    run "ncu-pipes-$1-$2-src" 60 "$ncu" --import "/tmp/p$1$2.ncu-rep" --page source --csv --print-source sass
    run "ncu-pipes-$1-$2-det" 60 "$ncu" --import "/tmp/p$1$2.ncu-rep" --page details --csv
    run "ncu-pipes-$1-$2-raw" 60 "$ncu" --import "/tmp/p$1$2.ncu-rep" --page raw --csv
}
DUET_MOE_VERSIONS=v3_r8p4 ncu_pipes r8p4_ff_q moe_t64
DUET_MOE_VERSIONS=v3_r8p4 ncu_pipes r8p4_ff_o moe_t64
DUET_MOE_VERSIONS=v3_r2p8 ncu_pipes r2p8_ff_q moe_t8
DUET_MOE_VERSIONS=v3_r8p4,v3_r2p8 run bench-moe 200 "$B/duet" bench --backend gpu --no-resources \
    --shape moe_t1 --shape moe_t8 --shape moe_t64 --out "$OUT/bench_moe.json"
pack
