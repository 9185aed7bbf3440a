#!/usr/bin/env bash
# Session 16, device call 3: v15 with its first token's guess from its own row (the lane
# maxima's mean and maximum), the exact sigmoid's core cheaper (certificate from the low
# significand bits, rcp.approx + two Newton steps, Taylor to r^12; shared with v11 / v12 and
# the all-2^32 check), router_weight without the jump table; v17 = v15 with the probe on f16
# pairs. gpu_router (every version; the all-2^32 sigmoid check), the presets twice, ncu source
# counters on v15 and v17 at T = 32768, memcheck / racecheck over the router.
cd "$(dirname "$0")/../.."
scripts/device-session.sh t:gpu_router:400
. scripts/calls/lib.sh
run_router_presets v9,v11,v12,v15,v17
for v in v15 v17; do
    run "ncu-src-$v" 150 "$ncu" --clock-control none -k "regex:^router_${v}_n16_k22" -c 1 \
        --section SourceCounters --section WarpStateStats --import-source no -o "/tmp/r$v" \
        "$B/duet" bench --backend gpu --shape router_t32768 --versions "$v" --out /tmp/ncu_bench.json
    run "ncu-src-$v-csv" 60 "$ncu" --import "/tmp/r$v.ncu-rep" --page source --csv --print-source sass
done
SAN_LIMIT=150 scripts/device-session.sh memcheck:noaux_tc_router racecheck:noaux_tc_router
pack
