#!/usr/bin/env bash
# Session 16, device call 1: router v15 (v12 with fewer instructions a token: the NaN screen
# folded into the probe, a predicated-shuffle scan and a one-instruction slot, the flip-form
# bitonic sort, the guess from the sorted keys). gpu_router (every version, v15 included), the
# presets twice (v12 / v15), ncu on v15 at T = 32768, memcheck / racecheck over the router.
cd "$(dirname "$0")/../.."
scripts/device-session.sh t:gpu_router:400
. scripts/calls/lib.sh
run_router_presets v9,v11,v12,v15
ncu_router v15
for b in 2 3; do
    run "bench-router-bps$b" 100 env DUET_ROUTER_BLOCKS_PER_SM=$b "$B/duet" bench --backend gpu \
        --shape router_t32768 --versions v12,v15 --out "$OUT/bench_router_bps$b.json"
done
SAN_LIMIT=150 scripts/device-session.sh memcheck:noaux_tc_router racecheck:noaux_tc_router
pack
