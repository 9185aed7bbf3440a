#!/usr/bin/env bash
# Session 19, device call 2: the same binaries as call 1 (v3 as first written): ncu on one
# ssd3_fused launch at 4096 tokens (full set, then source counters per SASS instruction),
# racecheck and synccheck over `duet check --op ssd_chunk_scan/what=bf16` (v1 / v2 / v3 / auto
# on the case table's bf16 row), memcheck over every ssd_chunk_scan case.
cd "$(dirname "$0")/../.."
SAN_LIMIT=150 scripts/device-session.sh racecheck:ssd_chunk_scan/what=bf16 synccheck:ssd_chunk_scan/what=bf16
. scripts/calls/lib.sh
run ncu-ssd3 120 "$ncu" --clock-control none -k "regex:^ssd3_fused" -c 1 --set full \
    --import-source no --csv --page details "$B/duet" bench --backend gpu --shape ssd_4k \
    --out /tmp/ncu_bench.json
run ncu-src-ssd3 120 "$ncu" --clock-control none -k "regex:^ssd3_fused" -c 1 \
    --section SourceCounters --section WarpStateStats --import-source no -o /tmp/ssd3 \
    "$B/duet" bench --backend gpu --shape ssd_4k --out /tmp/ncu_bench.json
run ncu-src-ssd3-csv 60 "$ncu" --import /tmp/ssd3.ncu-rep --page source --csv --print-source sass
SAN_LIMIT=200 scripts/device-session.sh memcheck:ssd_chunk_scan
pack
