#!/usr/bin/env bash
# Session 27, call 3 (call 2's binaries): ncu on x11_bf16_c4_m4, v11_f32 and v9_bf16 at batch 256 (why bf16
# runs at 88% of copy and f32 at 95%), then the ssu_v11_b256 preset.
cd "$(dirname "$0")/../.."
scripts/device-session.sh
. scripts/calls/lib.sh
for k in ssu_x11_bf16_c4_m4 ssu_v11_f32 ssu_v9_bf16; do
    export DUET_SSU_ONLY=$k
    run "ncu-$k" 150 "$ncu" --clock-control none -k "regex:^$k\$" -c 1 \
        --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy \
        --section WarpStateStats --section SchedulerStats --section LaunchStats --csv --page details \
        "$B/duet" bench --backend gpu --shape ssu_v11_b256 --out /tmp/ncu_bench.json
    unset DUET_SSU_ONLY
done
run bench-ssu-v11-b256 240 "$B/duet" bench --backend gpu --shape ssu_v11_b256 --out "$OUT/bench_ssu_v11_b256.json"
pack
