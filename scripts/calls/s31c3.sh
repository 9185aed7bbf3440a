#!/usr/bin/env bash
# Session 31, call 3 (DEVBIN_KCACHE="selective_state_update", TESTS="gpu_ssu"; carry
# .devbin.tar.xz): v12's m2 form (two 512-thread blocks an SM) at batch 1-16 next to v12 and
# auto's forms, batch 1 with dt per dim and with an f32 state (twice); auto's presets (v12 at
# batch 1 now); the v12 tests under memcheck and racecheck (the rows' values go through shared
# memory behind one barrier); the op's case table.
cd "$(dirname "$0")/../.."
scripts/device-session.sh
. scripts/calls/lib.sh
K=ssu_x11_bf16_c4_m4,ssu_x11_bf16_c4_m4_xb,ssu_x11_bf16_c8_m3_s3_i,ssu_x11_bf16_c8_m3_s3_i_xb
K=$K,ssu_v12_bf16,ssu_v12_bf16_xb,ssu_x12_bf16_m2,ssu_x12_bf16_m2_xb,ssu_v11_bf16,ssu_v11_f32,ssu_v10_f32,ssu_v12_f32
for i in 1 2; do
    DUET_SSU_ONLY=$K DUET_SSU_BATCH=1,2,4,8,16 run "bench-small-$i" 150 "$B/duet" bench --backend gpu \
        --no-resources --shape ssu_v11 --out "$OUT/bench_small_$i.json"
done
DUET_SSU_AUTO_ONLY=1 run bench-ssu-auto 150 "$B/duet" bench --backend gpu --no-resources \
    --shape ssu_b1_bf16 --shape ssu_b64_bf16 --shape ssu_b256_bf16 --shape ssu_b256_f32 \
    --out "$OUT/bench_ssu_auto.json"
run check-ssu 90 "$B/duet" check --backend gpu --op selective_state_update
run memcheck-v12 150 compute-sanitizer --tool memcheck --error-exitcode 9 --print-limit 20 \
    "$B/tests/gpu_ssu" --ignored --test-threads 1 ssu_v12_bit_exact
run racecheck-v12 150 compute-sanitizer --tool racecheck --error-exitcode 9 --print-limit 20 \
    "$B/tests/gpu_ssu" --ignored --test-threads 1 ssu_v12_bit_exact
pack
