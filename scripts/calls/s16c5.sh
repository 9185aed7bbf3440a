#!/usr/bin/env bash
# Session 16, device call 5: the exp core's four highest Taylor coefficients as DFMA
# immediates (20-bit significands), router_warp_finish's f64 weight division as n * rcp(d)
# with the f32 rounding certified (every version), the weights computed branch-free.
# gpu_router (every version; the all-2^32 sigmoid check), the presets twice, ncu source
# counters on v17, memcheck / racecheck / synccheck / initcheck over the router.
cd "$(dirname "$0")/../.."
scripts/device-session.sh t:gpu_router:400
. scripts/calls/lib.sh
run_router_presets v9,v11,v12,v15,v17
ncu_src_router v17
SAN_LIMIT=150 scripts/device-session.sh memcheck:noaux_tc_router racecheck:noaux_tc_router \
    synccheck:noaux_tc_router initcheck:noaux_tc_router
pack
