#!/usr/bin/env bash
# Session 19, device call 4: v3 with the next chunk's loads issued by row warpgroup 0 during its M · x (was: all
# 384 threads first thing in a chunk): the v2 / v3 tests of mamba_ssd, the
# ssd_4k / ssd_50k presets, synccheck over the bf16 row, ncu source
# counters on one ssd3_fused launch at 4096 tokens.
cd "$(dirname "$0")/../.."
scripts/device-session.sh t:mamba_ssd:300:ssd_v2 \
    synccheck:ssd_chunk_scan/what=bf16
. scripts/calls/lib.sh
run bench-ssd-1 200 "$B/duet" bench --backend gpu --shape ssd_4k --shape ssd_50k \
    --out "$OUT/bench_ssd_1.json"
run ncu-src-ssd3 120 "$ncu" --clock-control none -k "regex:^ssd3_fused" -c 1 \
    --section SourceCounters --section WarpStateStats --section SpeedOfLight \
    --import-source no -o /tmp/ssd3 "$B/duet" bench --backend gpu --shape ssd_4k \
    --out /tmp/ncu_bench.json
run ncu-src-ssd3-csv 60 "$ncu" --import /tmp/ssd3.ncu-rep --page source --csv --print-source sass
run ncu-ssd3-details 60 "$ncu" --import /tmp/ssd3.ncu-rep --page details --csv
pack
