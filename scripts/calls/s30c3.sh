#!/usr/bin/env bash
# Session 30, call 3 (DEVBIN_KCACHE="selective_state_update", TESTS="gpu_ssu"; carry
# .devbin.tar.xz and .baselines): c8_m3_s3_i with bulk stores of whole chunks (`_b`) and the
# bf16 small operands (`_xb`) side by side at batch 256 / 64 (twice), FlashInfer in the same run,
# auto's presets with the small-operand rule, then every gpu_ssu test, the op's case table and
# memcheck over the interleaved-walk test (every v11 form, `_b` and `_xb` included).
cd "$(dirname "$0")/../.."
scripts/device-session.sh
. scripts/calls/lib.sh
K=ssu_x11_bf16_c8_m3_s3_i,ssu_x11_bf16_c8_m3_s3_i_xb,ssu_x11_bf16_c8_m3_s3_i_b,ssu_x11_bf16_c8_m3_s3_i_b_xb
for i in 1 2; do
    DUET_SSU_ONLY=$K run "bench-b256-$i" 90 "$B/duet" bench --backend gpu --no-resources \
        --shape ssu_v11_b256 --out "$OUT/bench_b256_$i.json"
done
DUET_SSU_ONLY=$K DUET_SSU_BATCH=64 run bench-b64 90 "$B/duet" bench --backend gpu --no-resources \
    --shape ssu_v11 --out "$OUT/bench_b64.json"
run build-flashinfer 90 tools/flashinfer_ssu/build.sh /tmp/fi_ssu
run flashinfer-ssu 60 /tmp/fi_ssu --out "$OUT/flashinfer_ssu.json"
DUET_SSU_AUTO_ONLY=1 run bench-ssu-auto 120 "$B/duet" bench --backend gpu --no-resources \
    --shape ssu_b1_bf16 --shape ssu_b64_bf16 --shape ssu_b256_bf16 --shape ssu_b256_f32 \
    --out "$OUT/bench_ssu_auto.json"
run tests-gpu_ssu 300 "$B/tests/gpu_ssu" --ignored --test-threads 1
run check-ssu 90 "$B/duet" check --backend gpu --op selective_state_update
run memcheck-walk 150 compute-sanitizer --tool memcheck --error-exitcode 9 --print-limit 20 \
    "$B/tests/gpu_ssu" --ignored --test-threads 1 ssu_v11_interleaved_walk_bit_exact
pack
