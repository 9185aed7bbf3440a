#!/usr/bin/env bash
# Session 19, device call 7 (acceptance of the session's SSD work): v4 with explicit barriers
# between the rows' reads of xch and the next chunk's writes (call 6's racecheck report), auto =
# v4: the v2 / v3 / v4 tests of mamba_ssd, the v4 past-2^31 test, racecheck and synccheck over
# the bf16 row, memcheck over every ssd_chunk_scan case, the ssd_4k / ssd_50k presets.
cd "$(dirname "$0")/../.."
SAN_LIMIT=150 scripts/device-session.sh t:mamba_ssd:300:ssd_v2 t:gpu_index64:200:ssd_chunk_scan_v4_past \
    racecheck:ssd_chunk_scan/what=bf16 synccheck:ssd_chunk_scan/what=bf16
SAN_LIMIT=150 scripts/device-session.sh memcheck:ssd_chunk_scan
. scripts/calls/lib.sh
run bench-ssd-1 200 "$B/duet" bench --backend gpu --shape ssd_4k --shape ssd_50k \
    --out "$OUT/bench_ssd_1.json"
pack
