#!/usr/bin/env bash
# Session 28, call 3 (DEVBIN_KCACHE="selective_state_update bench_copy"; carry duet, gpu_ssu):
# v11 itself now walks interleaved (every state type), auto takes x11_bf16_c8_m3_s3_i for bf16
# with round-to-nearest and dt per head from 4 tiles an SM. Tests (every form; random shapes
# through auto), the 2^31 test on v11, then the ssu_v11 preset twice on the kernels auto chooses
# between (--no-resources: call 2's bench processes spent their limit compiling every kernel
# file for the ptxas report after printing their results).
cd "$(dirname "$0")/../.."
scripts/device-session.sh t:gpu_ssu:200:ssu_v11_bit_exact,ssu_random_shapes_every_mode,v11_nan_steps_match_the_software_ones
. scripts/calls/lib.sh
export DUET_SSU_2POW31_VERSIONS=v11
run t-2pow31-v11 120 "$B/tests/gpu_ssu" --ignored --test-threads=1 ssu_state_offsets_beyond_2_pow_31 --nocapture
unset DUET_SSU_2POW31_VERSIONS
export DUET_SSU_ONLY=ssu_v9_bf16,ssu_v10_bf16,ssu_v11_bf16,ssu_x11_bf16_c8_m3_s3,ssu_x11_bf16_c8_m3_s3_i,ssu_v8_f32,ssu_v11_f32,ssu_v9_f16,ssu_v11_f16
for i in 1 2; do
    run "bench-ssu-v11-$i" 140 "$B/duet" bench --backend gpu --no-resources --shape ssu_v11 --out "$OUT/bench_ssu_v11_$i.json"
done
unset DUET_SSU_ONLY
pack
