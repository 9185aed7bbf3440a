#!/usr/bin/env bash
# Session 31, call 4 (kcache as call 3; TESTS="gpu_ssu"; carry .devbin.tar.xz): the final code
# (auto: v12 at one tile an SM and fewer, its m2 form up to two). Every gpu_ssu test (v12 and
# the m2 form in ssu_v12_bit_exact, the interleaved walk and the 2^31 test), the op's case
# table, auto's batch-1 presets (bf16 and f32 state).
cd "$(dirname "$0")/../.."
scripts/device-session.sh
. scripts/calls/lib.sh
run tests-gpu_ssu 400 "$B/tests/gpu_ssu" --ignored --test-threads 1
run check-ssu 90 "$B/duet" check --backend gpu --op selective_state_update
DUET_SSU_AUTO_ONLY=1 run bench-ssu-auto 90 "$B/duet" bench --backend gpu --no-resources \
    --shape ssu_b1_bf16 --shape ssu_b1_f32 --out "$OUT/bench_ssu_auto.json"
pack
