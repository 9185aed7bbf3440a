#!/usr/bin/env bash
# Session 30, call 2 (DEVBIN_KCACHE="selective_state_update", TESTS="gpu_ssu"; carry
# .devbin.tar.xz and .baselines): the v11 kernels' bf16 small-operand forms (`_xb`) and their
# parameter-only prologue before the programmatic wait, side by side with FlashInfer and Triton
# again, then the v11 tests (both small-operand forms) and the op's case table.
cd "$(dirname "$0")/../.."
scripts/device-session.sh
. scripts/calls/lib.sh
export DUET_SSU_AUTO_ONLY=1
run bench-ssu-auto-1 150 "$B/duet" bench --backend gpu --no-resources --shape ssu_b1_bf16 \
    --shape ssu_b64_bf16 --shape ssu_b256_bf16 --shape ssu_b256_f32 --out "$OUT/bench_ssu_auto_1.json"
run build-flashinfer 120 tools/flashinfer_ssu/build.sh /tmp/fi_ssu
run flashinfer-ssu 60 /tmp/fi_ssu --out "$OUT/flashinfer_ssu.json"
run tests-gpu_ssu-v11 240 "$B/tests/gpu_ssu" --ignored --test-threads 1 ssu_v11
run check-ssu 100 "$B/duet" check --backend gpu --op selective_state_update
run triton 100 python3 tools/triton_side_by_side.py --out "$OUT/triton_side_by_side.json"
run bench-ssu-auto-2 150 "$B/duet" bench --backend gpu --no-resources --shape ssu_b1_bf16 \
    --shape ssu_b64_bf16 --shape ssu_b256_bf16 --shape ssu_b256_f32 --out "$OUT/bench_ssu_auto_2.json"
pack
