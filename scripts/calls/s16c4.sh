#!/usr/bin/env bash
# Session 16, device call 4: v17 guesses every token's threshold from its own row (no state
# between tokens; steps of 0.012 (max - mean) of the lanes' maxima), v15 keeps the carried
# guess (its first token from the row). gpu_router (every version; the all-2^32 sigmoid check),
# the presets twice, ncu source counters on v17 at T = 32768, memcheck / racecheck.
cd "$(dirname "$0")/../.."
scripts/device-session.sh t:gpu_router:400
. scripts/calls/lib.sh
run_router_presets v9,v11,v12,v15,v17
run "ncu-src-v17" 150 "$ncu" --clock-control none -k "regex:^router_v17_n16_k22" -c 1 \
    --section SourceCounters --section WarpStateStats --import-source no -o /tmp/rv17 \
    "$B/duet" bench --backend gpu --shape router_t32768 --versions v17 --out /tmp/ncu_bench.json
run "ncu-src-v17-csv" 60 "$ncu" --import /tmp/rv17.ncu-rep --page source --csv --print-source sass
SAN_LIMIT=150 scripts/device-session.sh memcheck:noaux_tc_router racecheck:noaux_tc_router
pack
