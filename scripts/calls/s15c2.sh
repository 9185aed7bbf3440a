#!/usr/bin/env bash
# Session 15, device call 2: router v12 with four-way partial sums (the NaN screen and the probe
# masks), v13 (v12 at 5 blocks a SM, 48 registers). gpu_router (v13 in the 9001-token walk),
# the presets v9 / v11 / v12 / v13 twice, ncu --set full on v13, ncu source counters (per SASS
# instruction: executions and stall samples) on v12.
cd "$(dirname "$0")/../.."
# (Steps as run; the shared helpers moved to scripts/calls/lib.sh after the call.)
scripts/device-session.sh t:gpu_router:400
. scripts/calls/lib.sh
run_router_presets v9,v11,v12,v13
ncu_router v13
run ncu-src-v12 150 "$ncu" --clock-control none -k "regex:^router_v12_n16_k22" -c 1 \
    --section SourceCounters --section WarpStateStats --import-source yes -o /tmp/r12 "$B/duet" bench \
    --backend gpu --shape router_t32768 --versions v12 --out /tmp/ncu_bench.json
run ncu-src-v12-csv 60 "$ncu" --import /tmp/r12.ncu-rep --page source --csv --print-source sass
run ncu-src-v12-details 60 "$ncu" --import /tmp/r12.ncu-rep --page details --csv
pack
