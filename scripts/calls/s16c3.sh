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
ncu_src_router v15
ncu_src_router v17
SAN_LIMIT=150 scripts/device-session.sh memcheck:noaux_tc_router racecheck:noaux_tc_router
pack
