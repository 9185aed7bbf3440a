#!/usr/bin/env bash
# Session 22, device call 1 (the 600 s limit of a call splits session 21's plan in two; the rest
# is s22c2.sh):
# - s256p (moe_sp_body: the S form in persistent blocks, written and compile-checked in session
#   21, never run): gpu_moe with every version (s256p included), the layer at T = 4096 next to
#   x64 / s256 / v4, racecheck over the bit-exact GEMM tests on s256p and s256h;
# - s256h (session 22: s256 with the tokens decoded to f16 by moe_x_f16_v1 first, only the
#   weights decoded in the GEMM): the same tests and the layer.
cd "$(dirname "$0")/../.."
scripts/device-session.sh t:gpu_moe:200
DUET_MOE_VERSIONS=v4_x64,v4_s256,v4_s256p,v4_s256h PRESETS_LIMIT=160 scripts/device-session.sh presets:moe_t4096
DUET_MOE_TEST_VERSIONS=v4_s256p,v4_s256h SAN_LIMIT=120 scripts/device-session.sh \
    tsan:racecheck:gpu_moe:gemm1_bit_exact_on_exact_sums,gemm2_bit_exact_on_exact_sums
. scripts/calls/lib.sh
pack
