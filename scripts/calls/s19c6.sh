#!/usr/bin/env bash
# Session 19, device call 6: v4 with X handed over per row warpgroup (barriers 1 and 2; call 5's
# single barrier 1 had two bar.sync sites, which synccheck reported): the v2 / v3 / v4 tests of
# mamba_ssd, synccheck and racecheck over the bf16 row, the ssd_4k / ssd_50k presets, ncu source
# counters on one ssd4_fused launch at 4096 tokens.
cd "$(dirname "$0")/../.."
SAN_LIMIT=150 scripts/device-session.sh t:mamba_ssd:300:ssd_v2 synccheck:ssd_chunk_scan/what=bf16 \
    racecheck:ssd_chunk_scan/what=bf16
. scripts/calls/lib.sh
run bench-ssd-1 200 "$B/duet" bench --backend gpu --shape ssd_4k --shape ssd_50k \
    --out "$OUT/bench_ssd_1.json"
run ncu-src-ssd4 120 "$ncu" --clock-control none -k "regex:^ssd4_fused" -c 1 \
    --section SourceCounters --section WarpStateStats --section SpeedOfLight \
    --import-source no -o /tmp/ssd4 "$B/duet" bench --backend gpu --shape ssd_4k \
    --out /tmp/ncu_bench.json
run ncu-src-ssd4-csv 60 "$ncu" --import /tmp/ssd4.ncu-rep --page source --csv --print-source sass
pack
