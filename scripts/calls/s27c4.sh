#!/usr/bin/env bash
# Session 27, call 4 (DEVBIN_KCACHE="selective_state_update"; carry duet, gpu_ssu): the staged v11
# forms (x11_bf16_c4_m4_s4 / _s6, c8_m3_s3: the state loads through a cp.async ring in shared
# memory, STAGES - 1 chunks in flight a warp without registers) and auto's new picks (v11 for a
# bf16 state above 128 tiles an SM and for f16 with round-to-nearest). Tests (every sweep form;
# random shapes through auto), memcheck, the ssu_v11 preset (the repeat auto needs), the 2^31
# test on v11 (its indices changed), the ssu_v11_b256 preset, then racecheck on the v11 test (last: it may run out of its limit).
cd "$(dirname "$0")/../.."
scripts/device-session.sh t:gpu_ssu:200:ssu_v11_bit_exact,ssu_random_shapes_every_mode tsan:memcheck:gpu_ssu:ssu_v11_bit_exact
. scripts/calls/lib.sh
run bench-ssu-v11 330 "$B/duet" bench --backend gpu --shape ssu_v11 --out "$OUT/bench_ssu_v11.json"
export DUET_SSU_2POW31_VERSIONS=v11
run t-2pow31-v11 120 "$B/tests/gpu_ssu" --ignored --test-threads=1 ssu_state_offsets_beyond_2_pow_31 --nocapture
unset DUET_SSU_2POW31_VERSIONS
run bench-ssu-v11-b256 90 "$B/duet" bench --backend gpu --shape ssu_v11_b256 --out "$OUT/bench_ssu_v11_b256.json"
run racecheck-v11 100 compute-sanitizer --tool racecheck --error-exitcode 9 --print-limit 20 \
    "$B/tests/gpu_ssu" --ignored --test-threads=1 ssu_v11_bit_exact
pack
