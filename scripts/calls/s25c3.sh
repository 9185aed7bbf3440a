#!/usr/bin/env bash
# Session 25, call 3 (build with DEVBIN_KCACHE="selective_state_update"; carry duet, gpu_ssu):
# - call 2: the f16 state on the conversion hardware took v9 from 703.6 to 371.4 us at batch 256
#   (nearest), but stochastic rounding stayed at 1016 us: Philox ran as a run-time loop. Now
#   unrolled for 10 and 5 rounds (philox4x32_r); v9's 16-bit entries back to their 4-block,
#   no-spill form (5 blocks gained nothing on f16), auto takes v9 for an f16 state.
# - gpu_ssu's fast tests (all but the 2^31 one, which ran in call 2 on the same nearest path),
#   then the f16 presets (nearest, Philox 10, Philox 5; v8 and v9).
cd "$(dirname "$0")/../.."
scripts/device-session.sh t:gpu_ssu:120:f16_hardware_conversions_match_the_software_ones,ssu_random_shapes_every_mode,ssu_stochastic_rounding_is_bit_exact,ssu_sweep_variants_bit_exact,ssu_multi_token_and_promote_cases_bit_exact
. scripts/calls/lib.sh
run bench-ssu-f16 200 "$B/duet" bench --backend gpu --shape ssu_b256_f16 --shape ssu_b64_f16 \
    --out "$OUT/bench_ssu_f16.json"
pack
