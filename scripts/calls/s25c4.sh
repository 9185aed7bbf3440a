#!/usr/bin/env bash
# Session 25, call 4 (build with DEVBIN_KCACHE="selective_state_update"; carry duet, gpu_ssu):
# - call 3: unrolling Philox did not help (Philox 10: 1074 us, 5 rounds: 962, nearest: 368 at
#   batch 256), so it is a loop again; the f16 conversions and stochastic rounding now take one
#   NaN test a vector (cold software path) and selects instead of a branch an element
#   (ssu_f16x8_rn, ssu_f16x8_to_f32, ssu_sr_f16_sel).
# - the all-inputs check first, then the f16 presets (nearest, Philox 10, Philox 5; v8 and v9),
#   then every gpu_ssu test (the 2^31 one runs an f16 state).
cd "$(dirname "$0")/../.."
scripts/device-session.sh t:gpu_ssu:60:f16_hardware_conversions_match_the_software_ones
. scripts/calls/lib.sh
run bench-ssu-f16 200 "$B/duet" bench --backend gpu --shape ssu_b256_f16 --shape ssu_b64_f16 \
    --out "$OUT/bench_ssu_f16.json"
run tests-gpu_ssu-all 240 "$B/tests/gpu_ssu" --ignored --test-threads=1
pack
