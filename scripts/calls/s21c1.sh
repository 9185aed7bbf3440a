#!/usr/bin/env bash
# Session 21, device call 1: the S form (moe.cu moe_s_body, v4_s256: both operands decoded into
# shared memory, wgmma SS at N = 64 x the tile's quarters) and the X forms after the epilogue
# moved into moe_x_epilogue. gpu_moe's GEMM tests on the wgmma forms, the layer at T = 4096,
# moe_expert_gemm2 past 2^31 (every version), racecheck over the bit-exact GEMM tests.
cd "$(dirname "$0")/../.."
DUET_MOE_TEST_VERSIONS=v4_s256,v4_x64,v4_x128,v4,v1 scripts/device-session.sh t:gpu_moe:150
DUET_MOE_VERSIONS=v4_x64,v4_s256 PRESETS_LIMIT=80 scripts/device-session.sh presets:moe_t4096
scripts/device-session.sh t:gpu_index64:150:moe_expert_gemm2_past
DUET_MOE_TEST_VERSIONS=v4_s256,v4_x64 SAN_LIMIT=120 scripts/device-session.sh \
    tsan:racecheck:gpu_moe:gemm1_bit_exact_on_exact_sums,gemm2_bit_exact_on_exact_sums
. scripts/calls/lib.sh
pack
