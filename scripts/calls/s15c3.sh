#!/usr/bin/env bash
# Session 15, device call 3: router v14 (a thread per token) and v12 with a seeded first guess.
# gpu_router (every version incl. v14 on every f32 case, the walk with NaN / all-equal rows),
# the presets v9 / v11 / v12 / v14 twice, ncu --set full on one v14 launch at T = 32768.
cd "$(dirname "$0")/../.."
# (Steps as run; the shared helpers moved to scripts/calls/lib.sh after the call.)
scripts/device-session.sh t:gpu_router:400
. scripts/calls/lib.sh
run_router_presets v9,v11,v12,v14
ncu_router v14
pack
