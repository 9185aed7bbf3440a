#!/usr/bin/env bash
# Session 30, call 4 (kcache as call 3; TESTS="gpu_ssu"; carry .devbin.tar.xz and .baselines):
# auto with the bulk-store form from 128 tiles an SM (presets, the op's case table), then
# racecheck over the bulk-store forms (their ring slot is stored by the bulk copy engine and
# refilled by cp.async) in ssu_v11_bit_exact, then over the interleaved-walk test.
cd "$(dirname "$0")/../.."
scripts/device-session.sh
. scripts/calls/lib.sh
DUET_SSU_AUTO_ONLY=1 run bench-ssu-auto 100 "$B/duet" bench --backend gpu --no-resources \
    --shape ssu_b1_bf16 --shape ssu_b64_bf16 --shape ssu_b256_bf16 --shape ssu_b256_f32 \
    --out "$OUT/bench_ssu_auto.json"
run check-ssu 60 "$B/duet" check --backend gpu --op selective_state_update
DUET_SSU_V11_VERSIONS=x11_bf16_c8_m3_s3_i_b,x11_bf16_c8_m3_s3_i_b_xb run racecheck-b 120 \
    compute-sanitizer --tool racecheck --error-exitcode 9 --print-limit 20 \
    "$B/tests/gpu_ssu" --ignored --test-threads 1 ssu_v11_bit_exact
run racecheck-walk 150 compute-sanitizer --tool racecheck --error-exitcode 9 --print-limit 20 \
    "$B/tests/gpu_ssu" --ignored --test-threads 1 ssu_v11_interleaved_walk_bit_exact
pack
