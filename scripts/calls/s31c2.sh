#!/usr/bin/env bash
# Session 31, call 2 (DEVBIN_KCACHE="selective_state_update", TESTS="gpu_ssu"; carry
# .devbin.tar.xz and .baselines): v12 (one 512-thread block a tile) for small batches.
#   1. the op's case table on every version (v12 included; also commit 11863b82's first run);
#   2. ssu_v12_bit_exact and the interleaved walk (5,120 tiles; v12 too);
#   3. v12 / v12_xb against auto's forms at batch 1 / 2 / 4 / 8 / 16 (graph replay), twice;
#   4. FlashInfer's harness in the same run; 5. ncu of v12 at batch 1.
cd "$(dirname "$0")/../.."
scripts/device-session.sh
. scripts/calls/lib.sh
run check-ssu 120 "$B/duet" check --backend gpu --op selective_state_update
run tests-v12 200 "$B/tests/gpu_ssu" --ignored --test-threads 1 ssu_v12_bit_exact ssu_v11_interleaved_walk_bit_exact
K=ssu_x11_bf16_c4_m4,ssu_x11_bf16_c4_m4_xb,ssu_x11_bf16_c8_m3_s3_i,ssu_x11_bf16_c8_m3_s3_i_xb,ssu_v12_bf16,ssu_v12_bf16_xb
for i in 1 2; do
    DUET_SSU_ONLY=$K DUET_SSU_BATCH=1,2,4,8,16 run "bench-small-$i" 120 "$B/duet" bench --backend gpu \
        --no-resources --shape ssu_v11 --out "$OUT/bench_small_$i.json"
done
run build-flashinfer 90 tools/flashinfer_ssu/build.sh /tmp/fi_ssu
run flashinfer-ssu 90 /tmp/fi_ssu --out "$OUT/flashinfer_ssu.json"
DUET_SSU_ONLY=ssu_v12_bf16 DUET_SSU_BATCH=1 run ncu-v12-b1 120 "$ncu" --clock-control none \
    -k "regex:^ssu_v12_bf16$" -s 5 -c 1 --set full --import-source no --csv --page details \
    "$B/duet" bench --backend gpu --no-resources --shape ssu_v11 --out /tmp/ncu_bench.json
pack
