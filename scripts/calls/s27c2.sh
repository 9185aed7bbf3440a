#!/usr/bin/env bash
# Session 27, call 2 (DEVBIN_KCACHE="selective_state_update"; carry duet, gpu_ssu): auto now picks
# v11 / x11_bf16_c4_m4 (auto_version); new sweep forms x11_bf16_c4_m4_r (rolling reloads),
# c2_m4, c2_m4_r. Tests (v11 bit-exact over every sweep form, random shapes through auto, SR),
# the ssu_v11_b256 preset, then ncu on c4_m4 and v11_f32 (why bf16 runs at 88% of copy and f32
# at 95%).
cd "$(dirname "$0")/../.."
scripts/device-session.sh t:gpu_ssu:300:ssu_v11_bit_exact,ssu_random_shapes_every_mode,ssu_stochastic_rounding_is_bit_exact
. scripts/calls/lib.sh
run bench-ssu-v11-b256 240 "$B/duet" bench --backend gpu --shape ssu_v11_b256 --out "$OUT/bench_ssu_v11_b256.json"
for k in ssu_x11_bf16_c4_m4 ssu_v11_f32; do
    export DUET_SSU_ONLY=$k
    run "ncu-$k" 150 "$ncu" --clock-control none -k "regex:^$k\$" -c 1 \
        --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy \
        --section WarpStateStats --section SchedulerStats --section LaunchStats --csv --page details \
        "$B/duet" bench --backend gpu --shape ssu_v11_b256 --out /tmp/ncu_bench.json
    unset DUET_SSU_ONLY
done
pack
