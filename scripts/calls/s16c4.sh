#!/usr/bin/env bash
# Session 16, device call 4: v17 guesses every token's threshold from its own row (no state
# between tokens; steps of 0.012 (max - mean) of the lanes' maxima), v15 keeps the carried
# guess (its first token from the row). gpu_router (every version; the all-2^32 sigmoid check),
# the presets twice, ncu source counters on v17 at T = 32768, memcheck / racecheck.
cd "$(dirname "$0")/../.."
scripts/device-session.sh t:gpu_router:400
. scripts/calls/lib.sh
run_router_presets v9,v11,v12,v15,v17
ncu_src_router v17
SAN_LIMIT=150 scripts/device-session.sh memcheck:noaux_tc_router racecheck:noaux_tc_router
pack
