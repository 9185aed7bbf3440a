#!/usr/bin/env bash
# Session 25, call 1 (build with DEVBIN_KCACHE="selective_state_update moe"; carry duet, gpu_moe,
# gpu_ssu):
# - MoE small T: the f forms (r8p4f / r2p8f: r8p4 / r2p8 whose blocks first bulk-prefetch their
#   whole weight slice into the L2) next to r8p4 / r2p8, layer at T = 1 / 8 / 64, twice; gpu_moe
#   on the f forms (bit-exact GEMM tests) and v3;
# - SSU: v9's f16 / f16-sr / int16 entries now held to 5 blocks an SM (72 registers): the f16
#   presets at batch 256 and 64 (v8, v9, v9l4 = the 4-block form), and gpu_ssu's random-shape
#   and stochastic-rounding tests (v9 and v9l4 on every 16-bit format).
cd "$(dirname "$0")/../.."
V=v3_r8p4,v3_r8p4f,v3_r2p8,v3_r2p8f
DUET_MOE_VERSIONS=$V PRESETS_LIMIT=200 scripts/device-session.sh presets:moe_t1,moe_t8,moe_t64
. scripts/calls/lib.sh
run bench-small-2 100 env DUET_MOE_VERSIONS=$V "$B/duet" bench --backend gpu --shape moe_t1 \
    --shape moe_t8 --shape moe_t64 --out "$OUT/bench_small_2.json"
run tests-gpu_moe-f 90 env DUET_MOE_TEST_VERSIONS=v3_r8p4f,v3_r2p8f,v3 \
    "$B/tests/gpu_moe" --ignored --test-threads=1
run bench-ssu-f16 150 "$B/duet" bench --backend gpu --shape ssu_b256_f16 --shape ssu_b64_f16 \
    --out "$OUT/bench_ssu_f16.json"
run tests-gpu_ssu 200 "$B/tests/gpu_ssu" --ignored --test-threads=1 ssu_random_shapes_every_mode \
    ssu_stochastic_rounding_is_bit_exact
pack
