#!/usr/bin/env bash
# Session 24, call 2 (build with DEVBIN_KCACHE="bench_copy selective_state_update"; carry duet
# and gpu_ssu):
# - the copy ceiling with the probe variants copy_v4-v7 (L2::256B loads, streaming stores,
#   warp-contiguous 4 KiB chunks) next to copy_v1-v3 and the driver's memcpy;
# - ncu on whatever the driver's memcpy launches (every kernel not named copy_v*), if a kernel;
# - SSU at batch 256 bf16 (issue 5's 282 us; v9 328 us in session 10): the preset, then ncu on v9.
cd "$(dirname "$0")/../.."
PRESETS_LIMIT=150 scripts/device-session.sh presets:copy
. scripts/calls/lib.sh
run ncu-memcpy 90 "$ncu" --clock-control none -k 'regex:^(?!copy_v)' -c 2 --section LaunchStats \
    --section SpeedOfLight --section Occupancy "$B/duet" bench --backend gpu --shape copy \
    --out /tmp/ncu_bench.json
run bench-ssu 150 "$B/duet" bench --backend gpu --shape ssu_b256_bf16 --out "$OUT/bench_ssu.json"
run ncu-ssu-v9 150 "$ncu" --clock-control none -k "regex:^ssu_v9_bf16" -c 1 --section SpeedOfLight \
    --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats --section LaunchStats \
    --section SchedulerStats "$B/duet" bench --backend gpu --shape ssu_b256_bf16 --out /tmp/ncu_bench.json
pack
