#!/usr/bin/env bash
# Session 15, device call 8: after the review's merges (router_v11_sigmoid on a shared certified
# core that the all-2^32 check kernel calls too; one bitonic sort template for the u32 / u64
# keys): gpu_router and the router presets once.
cd "$(dirname "$0")/../.."
scripts/device-session.sh t:gpu_router:400
. scripts/calls/lib.sh
run "bench-router-1" 150 "$B/duet" bench --backend gpu --shape router_t4096 --shape router_t32768 \
    --versions v9,v11,v12 --out "$OUT/bench_router_1.json"
pack
