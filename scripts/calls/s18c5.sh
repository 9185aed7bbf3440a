#!/usr/bin/env bash
# Session 18, device call 5 (the final code: call 3's v2, C·B computed per head again after call
# 4's shared-C·B variant measured slower): every mamba_ssd test, the v2 past-2^31 test, racecheck
# over v2 on the case table's bf16 row, the ssd_4k / ssd_50k presets.
cd "$(dirname "$0")/../.."
scripts/device-session.sh t:mamba_ssd:400 t:gpu_index64:240:ssd_chunk_scan_v2_past
SAN_LIMIT=150 scripts/device-session.sh racecheck:ssd_chunk_scan/what=bf16
. scripts/calls/lib.sh
run bench-ssd 200 "$B/duet" bench --backend gpu --shape ssd_4k --shape ssd_50k --out "$OUT/bench_ssd.json"
pack
