#!/usr/bin/env bash
# Next session, device call 1 (prepared in session 21, whose device time ran out): the MoE GEMM
# past 2^31 on the wgmma forms only (the whole version list passed neither 150 s in session 21's
# call 1 nor 200 s in call 4; --nocapture shows each version's time), then every version with a
# longer limit, then memcheck over the bit-exact GEMM tests on the S forms.
cd "$(dirname "$0")/../.."
scripts/device-session.sh t:gpu_moe:150:chain
. scripts/calls/lib.sh
run index64-moe-wgmma 200 env DUET_INDEX64_VERSIONS=v4,v4_x64,v4_x128,v4_s256,v4_s128 \
    "$B/tests/gpu_index64" --ignored --test-threads=1 --nocapture moe_expert_gemm2_past
run index64-moe-all 400 "$B/tests/gpu_index64" --ignored --test-threads=1 --nocapture \
    moe_expert_gemm2_past
DUET_MOE_TEST_VERSIONS=v4_s256,v4_s128 SAN_LIMIT=120 scripts/device-session.sh \
    tsan:memcheck:gpu_moe:gemm1_bit_exact_on_exact_sums,gemm2_bit_exact_on_exact_sums
pack
