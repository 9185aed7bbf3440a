#!/usr/bin/env bash
# Session 18, device call 1: ssd_chunk_scan v2 (one fused tensor-core kernel): the v2 tests and
# the case table in mamba_ssd, the ssd_4k / ssd_50k presets (v1 default config and v2), ncu on
# one v2 launch at 4096 tokens, `duet check --op ssd_chunk_scan` under memcheck.
cd "$(dirname "$0")/../.."
scripts/device-session.sh t:mamba_ssd:300:ssd_v2,ssd_table_cases
. scripts/calls/lib.sh
run bench-ssd 200 "$B/duet" bench --backend gpu --shape ssd_4k --shape ssd_50k --out "$OUT/bench_ssd.json"
run ncu-ssd2 120 "$ncu" --clock-control none -k "regex:^ssd2_fused" -c 1 --set full \
    --import-source no --csv --page details "$B/duet" bench --backend gpu --shape ssd_4k \
    --out /tmp/ncu_bench.json
SAN_LIMIT=200 scripts/device-session.sh memcheck:ssd_chunk_scan
pack
