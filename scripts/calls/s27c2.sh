#!/usr/bin/env bash
# Session 27, call 2 (DEVBIN_KCACHE="selective_state_update"; carry duet, gpu_ssu): auto now picks
# v11 / x11_bf16_c4_m4 (auto_version); sweep forms now c4_m4, c2_m4, c2_m4_r (rolling reloads);
# v11 rounds bf16 / f16 with the conversion hardware alone (no NaN fix-up), decodes f16 without
# a NaN branch (checked by v11_nan_steps_match_the_software_ones), and steps its chunk / tile
# indices without 64-bit divisions (one table row a tile: the slot's first state row). Tests,
# then the ssu_v11 preset.
cd "$(dirname "$0")/../.."
scripts/device-session.sh t:gpu_ssu:300:ssu_v11_bit_exact,ssu_random_shapes_every_mode,ssu_stochastic_rounding_is_bit_exact,v11_nan_steps_match_the_software_ones,f16_hardware_conversions_match_the_software_ones
. scripts/calls/lib.sh
run bench-ssu-v11 400 "$B/duet" bench --backend gpu --shape ssu_v11 --out "$OUT/bench_ssu_v11.json"
pack
