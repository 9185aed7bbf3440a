#!/usr/bin/env bash
# Session 17, device call 2: router v18 (v17 with its shared memory addressed through two
# pinned 32-bit shared addresses: ld / st.shared at register + constant offsets instead of the
# compiler's per-use address rebuilds). gpu_router (every version, v18 included), the router
# presets twice (v9 / v11 / v17 / v18), ncu source counters on v18 at T = 32768,
# `duet check --op noaux_tc_router`, memcheck and racecheck over it.
cd "$(dirname "$0")/../.."
scripts/device-session.sh t:gpu_router:400
. scripts/calls/lib.sh
run_router_presets v9,v11,v17,v18
ncu_src_router v18
CHK_LIMIT=60 SAN_LIMIT=90 scripts/device-session.sh chk:noaux_tc_router memcheck:noaux_tc_router racecheck:noaux_tc_router
pack
