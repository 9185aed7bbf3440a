#!/usr/bin/env bash
# Session 19, device call 1: ssd_chunk_scan v3 (v2's fused scan on wgmma) for the first time:
# the v2 / v3 tests of mamba_ssd (hand cases, sequential oracle, proptest; every case also
# runs v1 / tuned / auto), then the ssd_4k / ssd_50k presets (v1, v2 and v3 side by side).
cd "$(dirname "$0")/../.."
scripts/device-session.sh t:mamba_ssd:300:ssd_v2
. scripts/calls/lib.sh
run bench-ssd-1 200 "$B/duet" bench --backend gpu --shape ssd_4k --shape ssd_50k \
    --out "$OUT/bench_ssd_1.json"
pack
