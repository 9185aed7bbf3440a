#!/usr/bin/env bash
# Session 25, call 2 (build with DEVBIN_KCACHE="selective_state_update"; carry duet, gpu_ssu):
# - call 1 measured an f16 state at less than half of bf16's speed (v9 703.6 vs ~323 us at batch
#   256): the f16 conversions were software. Now on the conversion hardware (cvt.rn.f16x2.f32,
#   cvt.f32.f16; NaNs through the software path): the all-inputs check first, every gpu_ssu
#   test, then the f16 presets (nearest and stochastic rounding; v8, v9, v9l4) and ncu on
#   v9's f16 entries at batch 256.
cd "$(dirname "$0")/../.."
scripts/device-session.sh t:gpu_ssu:60:f16_hardware_conversions_match_the_software_ones
. scripts/calls/lib.sh
run bench-ssu-f16 200 "$B/duet" bench --backend gpu --shape ssu_b256_f16 --shape ssu_b64_f16 \
    --out "$OUT/bench_ssu_f16.json"
run tests-gpu_ssu-all 240 "$B/tests/gpu_ssu" --ignored --test-threads=1
run ncu-ssu-v9-f16 150 "$ncu" --clock-control none -k "regex:^ssu_v9_f16" -c 2 --section SpeedOfLight \
    --section Occupancy --section WarpStateStats --section LaunchStats "$B/duet" bench --backend gpu \
    --shape ssu_b256_f16 --out /tmp/ncu_bench.json
pack
