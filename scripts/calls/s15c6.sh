#!/usr/bin/env bash
# Session 15, device call 6: the final router code (v9 / v10 / v11 share one filter helper now;
# v13 removed): gpu_router, the presets twice, memcheck and racecheck over
# `duet check --op noaux_tc_router` (every version).
cd "$(dirname "$0")/../.."
scripts/device-session.sh t:gpu_router:400
. scripts/calls/lib.sh
run_router_presets v9,v10,v11,v12
SAN_LIMIT=150 scripts/device-session.sh memcheck:noaux_tc_router racecheck:noaux_tc_router
pack
