#!/usr/bin/env bash
# Session 16, device call 2: router v16 (v15 with the first probe at the 20th largest lane
# maximum of L, no guess carried between tokens). gpu_router (every version), the presets
# twice (v11 / v12 / v15 / v16), ncu --set full on v16, ncu source counters (per SASS
# instruction: executions and stall samples) on v15 and v16 at T = 32768.
cd "$(dirname "$0")/../.."
scripts/device-session.sh t:gpu_router:400
. scripts/calls/lib.sh
run_router_presets v9,v11,v12,v15,v16
ncu_router v16
for v in v15 v16; do
    run "ncu-src-$v" 150 "$ncu" --clock-control none -k "regex:^router_${v}_n16_k22" -c 1 \
        --section SourceCounters --section WarpStateStats --import-source no -o "/tmp/r$v" \
        "$B/duet" bench --backend gpu --shape router_t32768 --versions "$v" --out /tmp/ncu_bench.json
    run "ncu-src-$v-csv" 60 "$ncu" --import "/tmp/r$v.ncu-rep" --page source --csv --print-source sass
done
pack
