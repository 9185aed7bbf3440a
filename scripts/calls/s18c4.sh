#!/usr/bin/env bash
# Session 18, device call 4: ssd_chunk_scan v2 with C·B computed once per (chunk, group) by
# ssd2_cb and read by the group's heads: every mamba_ssd test, the v2 past-2^31 test, the
# ssd_4k / ssd_50k presets twice, ncu on v2's three kernels at 4096 tokens, racecheck /
# synccheck over v2 on the case table's bf16 row, memcheck over `duet check --op ssd_chunk_scan`.
cd "$(dirname "$0")/../.."
scripts/device-session.sh t:mamba_ssd:400 t:gpu_index64:240:ssd_chunk_scan_v2_past
. scripts/calls/lib.sh
for i in 1 2; do
    run "bench-ssd-$i" 200 "$B/duet" bench --backend gpu --shape ssd_4k --shape ssd_50k \
        --out "$OUT/bench_ssd_$i.json"
done
run ncu-ssd2-all 120 "$ncu" --clock-control none -k "regex:^ssd2_" -c 3 --section SpeedOfLight \
    --section LaunchStats --section Occupancy "$B/duet" bench --backend gpu --shape ssd_4k \
    --out /tmp/ncu_bench.json
SAN_LIMIT=150 scripts/device-session.sh racecheck:ssd_chunk_scan/what=bf16 synccheck:ssd_chunk_scan/what=bf16
SAN_LIMIT=200 scripts/device-session.sh memcheck:ssd_chunk_scan
pack
