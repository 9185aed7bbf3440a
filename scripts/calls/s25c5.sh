#!/usr/bin/env bash
# Session 25, call 5 (build with DEVBIN_KCACHE="selective_state_update moe"; carry duet, gpu_ssu,
# gpu_moe, gpu_index64):
# - gpu_ssu's all-inputs f16 check again (call 4: 0 differing inputs, but the test expected the
#   old vector count, 2^32 + 2^16, where the kernel now compares 2^32 + 2^19);
# - reliability leftovers from session 22: memcheck over gpu_moe's bit-exact GEMM tests on the S
#   forms and the column-group R forms; gpu_index64 `moe_expert_gemm2_past_2_pow_31` on the
#   wgmma forms x64 / s256 with --nocapture (did not finish in 150 / 200 s in session 21, with
#   every version).
cd "$(dirname "$0")/../.."
scripts/device-session.sh t:gpu_ssu:60:f16_hardware_conversions_match_the_software_ones
. scripts/calls/lib.sh
run memcheck-moe-s-c 170 env DUET_MOE_TEST_VERSIONS=v4_s256,v4_s128,v3_r2p8c2,v3_r8p4c2 \
    compute-sanitizer --tool memcheck --error-exitcode 9 --print-limit 20 "$B/tests/gpu_moe" \
    --ignored --test-threads=1 gemm1_bit_exact_on_exact_sums gemm2_bit_exact_on_exact_sums
run tests-index64-gemm2 300 env DUET_INDEX64_VERSIONS=v4_x64,v4_s256 "$B/tests/gpu_index64" \
    --ignored --test-threads=1 --nocapture moe_expert_gemm2_past_2_pow_31
pack
