#!/usr/bin/env bash
# Session 15, device call 4: the final router build (v12 without the seed, FLO compaction, the
# constant cache warmed; v14 and v13 removed; auto = v9 / v11 / v12 by T). gpu_router, the
# presets v9 / v11 / v12 twice, and memcheck / racecheck / synccheck / initcheck over
# `duet check --op noaux_tc_router` (every version, every case).
cd "$(dirname "$0")/../.."
# (Steps as run; the shared helpers moved to scripts/calls/lib.sh after the call.)
scripts/device-session.sh t:gpu_router:400
. scripts/calls/lib.sh
run_router_presets v9,v11,v12
SAN_LIMIT=150 scripts/device-session.sh memcheck:noaux_tc_router racecheck:noaux_tc_router \
    synccheck:noaux_tc_router initcheck:noaux_tc_router
pack
