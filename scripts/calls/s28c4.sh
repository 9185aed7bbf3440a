#!/usr/bin/env bash
# Session 28, call 4 (DEVBIN_KCACHE="selective_state_update bench_copy"; carry duet, gpu_ssu):
# the new test of the interleaved walk past one tile a warp (80 x 64 tiles: ssu_v11_bit_exact's
# shapes never leave the contiguous part), then the ssu_v11 preset on v9 / v11 / the staged
# interleaved form, now with dt per dim on all three (for auto's per-dim pick).
cd "$(dirname "$0")/../.."
scripts/device-session.sh t:gpu_ssu:120:ssu_v11_interleaved_walk_bit_exact
. scripts/calls/lib.sh
export DUET_SSU_ONLY=ssu_v9_bf16,ssu_v11_bf16,ssu_x11_bf16_c8_m3_s3_i
run bench-ssu-v11 100 "$B/duet" bench --backend gpu --no-resources --shape ssu_v11 --out "$OUT/bench_ssu_v11.json"
unset DUET_SSU_ONLY
pack
