#!/usr/bin/env bash
# Session 20, device call 6 (acceptance of the session's MoE work, ~480 s of device time left):
# the final kernel file (X forms x64 / x128; v4 = x64 at prefill shapes). gpu_moe (every
# version), moe_expert_gemm2 past 2^31 (every version, the X forms included), memcheck and
# racecheck over the bit-exact GEMM tests on the X forms, the layer at T = 4096.
cd "$(dirname "$0")/../.."
scripts/device-session.sh t:gpu_moe:200 t:gpu_index64:150:moe_expert_gemm2_past
DUET_MOE_TEST_VERSIONS=v4_x64,v4_x128 SAN_LIMIT=90 scripts/device-session.sh \
    tsan:memcheck:gpu_moe:gemm1_bit_exact_on_exact_sums,gemm2_bit_exact_on_exact_sums
DUET_MOE_TEST_VERSIONS=v4_x64 SAN_LIMIT=90 scripts/device-session.sh \
    tsan:racecheck:gpu_moe:gemm1_bit_exact_on_exact_sums,gemm2_bit_exact_on_exact_sums
DUET_MOE_VERSIONS=v4_x64,v4_x128 PRESETS_LIMIT=100 scripts/device-session.sh presets:moe_t4096
. scripts/calls/lib.sh
pack
