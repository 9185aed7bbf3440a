#!/usr/bin/env bash
# Session 16, device call 7: the final code (v12 / v15 share router_v12_guess_from_winners, a
# mechanical merge after call 6). gpu_router, `duet check --op noaux_tc_router`, memcheck, the
# router presets once.
cd "$(dirname "$0")/../.."
scripts/device-session.sh t:gpu_router:400
. scripts/calls/lib.sh
run "bench-router-1" 150 "$B/duet" bench --backend gpu --shape router_t1 --shape router_t64 \
    --shape router_t4096 --shape router_t32768 --versions v9,v11,v12,v15,v17 \
    --out "$OUT/bench_router_1.json"
CHK_LIMIT=60 SAN_LIMIT=60 scripts/device-session.sh chk:noaux_tc_router memcheck:noaux_tc_router
pack
