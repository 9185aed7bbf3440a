#!/usr/bin/env bash
# Session 25, call 6 (build with DEVBIN_KCACHE="selective_state_update"; carry duet, gpu_ssu):
# - stochastic rounding (group of 4) with Philox's rounds compiled in again (ssu_philox_r<10> /
#   <5>: uniform keys, two wide multiplies and two 3-input XORs a round), now on call 4's
#   branch-free path, v9's f16-sr entry held to 4 blocks (93 registers, no spill; call 3's
#   unrolled form had 110 registers, 3 blocks): gpu_ssu's fast tests, then the f16 presets
#   (call 4: v9 924.0 us with Philox 10, 757.4 with 5, 339.7 nearest at batch 256).
cd "$(dirname "$0")/../.."
scripts/device-session.sh t:gpu_ssu:120:f16_hardware_conversions_match_the_software_ones,ssu_random_shapes_every_mode,ssu_stochastic_rounding_is_bit_exact,ssu_sweep_variants_bit_exact,ssu_multi_token_and_promote_cases_bit_exact
. scripts/calls/lib.sh
run bench-ssu-f16 200 "$B/duet" bench --backend gpu --shape ssu_b256_f16 --shape ssu_b64_f16 \
    --out "$OUT/bench_ssu_f16.json"
pack
