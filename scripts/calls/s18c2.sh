#!/usr/bin/env bash
# Session 18, device call 2: ssd_chunk_scan v2 with its token table from a separate kernel
# (ssd2_tok), M split into bf16 hi + lo, more independent mma chains: the v2 tests and the case
# table in mamba_ssd, the ssd_4k / ssd_50k presets, ncu (full set and source counters) on one
# v2 launch at 4096 tokens.
cd "$(dirname "$0")/../.."
scripts/device-session.sh t:mamba_ssd:300:ssd_v2,ssd_table_cases
. scripts/calls/lib.sh
run bench-ssd 200 "$B/duet" bench --backend gpu --shape ssd_4k --shape ssd_50k --out "$OUT/bench_ssd.json"
ncu_ssd2
pack
