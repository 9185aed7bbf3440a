#!/usr/bin/env bash
# Session 26, call 1 (build with DEVBIN_KCACHE="selective_state_update"; carry duet, gpu_ssu):
# SSU v11 (persistent warps, the state streamed into registers: no shared memory, no bulk
# copies): its bit-exact test and the random / stochastic-rounding tests it joined, then the
# `ssu_v11` preset (v11 and its sweep forms next to v9 / v8: bf16 at batch 256 and 64, f32, f16
# nearest and Philox 10).
cd "$(dirname "$0")/../.."
scripts/device-session.sh t:gpu_ssu:200:ssu_v11_bit_exact,ssu_random_shapes_every_mode,ssu_stochastic_rounding_is_bit_exact
. scripts/calls/lib.sh
run bench-ssu-v11 300 "$B/duet" bench --backend gpu --shape ssu_v11 --out "$OUT/bench_ssu_v11.json"
pack
