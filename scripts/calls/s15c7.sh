#!/usr/bin/env bash
# Session 15, device call 7: the merged router code. v11 and v12's fallback share one selection
# function (router_v11_select; v11's one-candidate-a-lane case goes through router_v12_one_slot),
# v12 uses the shared filter helper (router_v9_filter without the top-2), and v8 / v9-v10 /
# v11-v12 stage their biases with one helper (router_stage_bias).
# gpu_router, the presets twice, memcheck and racecheck over `duet check --op noaux_tc_router`.
cd "$(dirname "$0")/../.."
scripts/device-session.sh t:gpu_router:400
. scripts/calls/lib.sh
run_router_presets v9,v11,v12
SAN_LIMIT=150 scripts/device-session.sh memcheck:noaux_tc_router racecheck:noaux_tc_router
pack
