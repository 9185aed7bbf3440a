#!/usr/bin/env bash
# Session 28, call 2 (DEVBIN_KCACHE="selective_state_update bench_copy"; carry duet, gpu_ssu):
# the interleaved walk (Ssu11Walk: whole tiles dealt round-robin over the warps first, then an
# equal contiguous share of the rest; forms x11_bf16_c8_m3_s3_i, c4_m4_s4_i, c8_m3_i), after
# call 1's in-place probes (copy_v10, tiles round-robin, 542.5 us vs copy_v9, v11's per-warp
# ranges, 559.1). Tests (every form; random shapes through auto), racecheck and memcheck on the
# new forms, the 2^31 test on v11 (its walk changed), then the presets. Also: the heads table's f64
# softplus / exp now run after the first state loads are issued (the SASS had them first).
cd "$(dirname "$0")/../.."
scripts/device-session.sh t:gpu_ssu:200:ssu_v11_bit_exact,ssu_random_shapes_every_mode
. scripts/calls/lib.sh
export DUET_SSU_V11_VERSIONS=x11_bf16_c8_m3_s3_i,x11_bf16_c4_m4_s4_i,x11_bf16_c8_m3_i
run racecheck-il 200 compute-sanitizer --tool racecheck --error-exitcode 9 --print-limit 200 \
    "$B/tests/gpu_ssu" --ignored --test-threads=1 ssu_v11_bit_exact --nocapture
run memcheck-il 200 compute-sanitizer --tool memcheck --error-exitcode 9 \
    "$B/tests/gpu_ssu" --ignored --test-threads=1 ssu_v11_bit_exact --nocapture
unset DUET_SSU_V11_VERSIONS
for i in 1 2; do
    run "bench-ssu-v11-b256-$i" 120 "$B/duet" bench --backend gpu --shape ssu_v11_b256 --out "$OUT/bench_ssu_v11_b256_$i.json"
done
export DUET_SSU_ONLY=ssu_v9_bf16,ssu_v11_bf16,ssu_x11_bf16_c8_m3_s3,ssu_x11_bf16_c8_m3_s3_i,ssu_x11_bf16_c4_m4_s4_i,ssu_x11_bf16_c8_m3_i,ssu_v11_f32
run bench-ssu-v11 200 "$B/duet" bench --backend gpu --shape ssu_v11 --out "$OUT/bench_ssu_v11.json"
unset DUET_SSU_ONLY
export DUET_SSU_2POW31_VERSIONS=v11
run t-2pow31-v11 120 "$B/tests/gpu_ssu" --ignored --test-threads=1 ssu_state_offsets_beyond_2_pow_31 --nocapture
unset DUET_SSU_2POW31_VERSIONS
pack
