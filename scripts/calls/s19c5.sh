#!/usr/bin/env bash
# Session 19, device call 5: ssd_chunk_scan v4 (v3 with the inter-chunk product on the state
# warpgroup) for the first time: the v2 / v3 / v4 tests of mamba_ssd, synccheck over the bf16
# row, the ssd_4k / ssd_50k presets (v1, v2, v3, v4 side by side), ncu source counters on one
# ssd4_fused launch at 4096 tokens.
cd "$(dirname "$0")/../.."
scripts/device-session.sh t:mamba_ssd:300:ssd_v2 synccheck:ssd_chunk_scan/what=bf16
. scripts/calls/lib.sh
run bench-ssd-1 200 "$B/duet" bench --backend gpu --shape ssd_4k --shape ssd_50k \
    --out "$OUT/bench_ssd_1.json"
run ncu-src-ssd4 120 "$ncu" --clock-control none -k "regex:^ssd4_fused" -c 1 \
    --section SourceCounters --section WarpStateStats --section SpeedOfLight \
    --import-source no -o /tmp/ssd4 "$B/duet" bench --backend gpu --shape ssd_4k \
    --out /tmp/ncu_bench.json
run ncu-src-ssd4-csv 60 "$ncu" --import /tmp/ssd4.ncu-rep --page source --csv --print-source sass
pack
