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
ncu_src_router v15
ncu_src_router v16
pack
