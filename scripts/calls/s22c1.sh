#!/usr/bin/env bash
# Next session, device call 1 (prepared in session 21, whose device time ran out):
# - s256p (moe_sp_body: the S form in persistent blocks, written and compile-checked in session
#   21, never run): gpu_moe with every version (s256p included), the layer at T = 4096 next to
#   x64 / s256 / v4, racecheck and memcheck over the bit-exact GEMM tests on the S forms;
# - the MoE GEMM past 2^31 on the wgmma forms only (the whole version list passed neither 150 s
#   in session 21's call 1 nor 200 s in call 4; --nocapture shows each version's time).
cd "$(dirname "$0")/../.."
scripts/device-session.sh t:gpu_moe:200
DUET_MOE_VERSIONS=v4_x64,v4_s256,v4_s256p PRESETS_LIMIT=130 scripts/device-session.sh presets:moe_t4096
DUET_MOE_TEST_VERSIONS=v4_s256p,v4_s256 SAN_LIMIT=120 scripts/device-session.sh \
    tsan:racecheck:gpu_moe:gemm1_bit_exact_on_exact_sums,gemm2_bit_exact_on_exact_sums
. scripts/calls/lib.sh
run index64-moe-wgmma 240 env DUET_INDEX64_VERSIONS=v4,v4_x64,v4_x128,v4_s256,v4_s128,v4_s256p \
    "$B/tests/gpu_index64" --ignored --test-threads=1 --nocapture moe_expert_gemm2_past
DUET_MOE_TEST_VERSIONS=v4_s256p,v4_s256,v4_s128 SAN_LIMIT=120 scripts/device-session.sh \
    tsan:memcheck:gpu_moe:gemm1_bit_exact_on_exact_sums,gemm2_bit_exact_on_exact_sums
pack
