#!/usr/bin/env bash
# Session 29, call 2 (DEVBIN_KCACHE="selective_state_update bench_copy"; carry duet, gpu_ssu):
#   1. the SSU presets with graph replay at every batch (the issue's method; call 1's ncu had
#      x11_bf16_c8_m3_s3_i at 282.5 us against its single launch's 294): ssu_v11 on auto's picks
#      (c8_m3_s3_i, v11 for bf16 / f32 / f16), twice;
#      also the c4 / c2 register forms (batch 1: more warps a tile);
#   2. ncu of v11 at batch 1 with warm caches (--cache-control none; call 1's cold-cache run:
#      6.46 us), the warp stall reasons (raw page).
cd "$(dirname "$0")/../.."
scripts/device-session.sh
. scripts/calls/lib.sh
export DUET_SSU_ONLY=ssu_x11_bf16_c8_m3_s3_i,ssu_v11_bf16,ssu_v11_f32,ssu_v11_f16,ssu_v9_bf16,ssu_x11_bf16_c4_m4,ssu_x11_bf16_c2_m4
for i in 1 2; do
    run "bench-ssu-v11-$i" 200 "$B/duet" bench --backend gpu --no-resources --shape ssu_v11 \
        --out "$OUT/bench_ssu_v11_$i.json"
done
export DUET_SSU_ONLY=ssu_v11_bf16 DUET_SSU_BATCH=1
run ncu-v11-b1-warm 150 "$ncu" --clock-control none --cache-control none -k "regex:^ssu_v11_bf16$" -s 5 -c 1 \
    --section SpeedOfLight --section WarpStateStats --section LaunchStats --section SchedulerStats \
    --page raw --csv "$B/duet" bench --backend gpu --no-resources --shape ssu_v11 --out /tmp/ncu_bench.json
unset DUET_SSU_ONLY DUET_SSU_BATCH
# The copy probes again (kcache bench_copy), with copy_v11's graph floors at 2 / 128 MiB.
run bench-copy 100 "$B/duet" bench --backend gpu --no-resources --shape copy --out "$OUT/bench_copy.json"
# The walk tests again after their inputs moved into one helper (walk_inputs; same draws).
run tests-walk 150 "$B/tests/gpu_ssu" --ignored --test-threads=1 ssu_v11_interleaved_walk_bit_exact \
    ssu_v11_grouped_walk_bit_exact ssu_v11_bit_exact
pack
