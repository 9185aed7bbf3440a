#!/usr/bin/env bash
# Session 17, device call 1: router v18 (v17's token routine in a balanced walk: warps numbered
# w x G + b' so every block routes 62 or 63 tokens at T = 32768 instead of 64 or 56, and the
# first row's cp.async issued before the biases are staged). gpu_router (every version, v18
# included), the router presets twice (v9 / v11 / v17 / v18), `duet check --op
# noaux_tc_router`, memcheck and racecheck over it.
cd "$(dirname "$0")/../.."
scripts/device-session.sh t:gpu_router:400
. scripts/calls/lib.sh
run_router_presets v9,v11,v17,v18
ncu_src_router v18
CHK_LIMIT=60 SAN_LIMIT=90 scripts/device-session.sh chk:noaux_tc_router memcheck:noaux_tc_router racecheck:noaux_tc_router
pack
