#!/usr/bin/env bash
# Session 15, device call 1: router v11 / v12 (issue 4, T = 32768 target 30 us). gpu_router
# (every version incl. v11 / v12 on every case, the 9001-token walk, v11's sigmoid over all 2^32
# inputs in tanh and exp mode), the router presets v9 / v11 / v12 twice, ncu --set full on one
# launch of each at T = 32768.
cd "$(dirname "$0")/../.."
# (Steps as run; the shared helpers moved to scripts/calls/lib.sh after the call.)
scripts/device-session.sh t:gpu_router:400
. scripts/calls/lib.sh
run_router_presets v9,v11,v12
for v in v9 v11 v12; do ncu_router "$v"; done
pack
