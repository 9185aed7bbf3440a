#!/usr/bin/env bash
# Session 21, device call 4 (acceptance of the session's kernel file, ~730 s of device time
# left): S form decode units of one 16-code block (8-byte reads), v4 = x64 for GEMM1 / s256 for
# GEMM2 (its own schedule in the layer). gpu_moe (every version), the layer at T = 4096,
# racecheck over the bit-exact GEMM tests on the S forms, moe_expert_gemm2 past 2^31.
cd "$(dirname "$0")/../.."
scripts/device-session.sh t:gpu_moe:150
DUET_MOE_VERSIONS=v4_x64,v4_s128,v4_s256 PRESETS_LIMIT=130 scripts/device-session.sh presets:moe_t4096
DUET_MOE_TEST_VERSIONS=v4_s256,v4_s128 SAN_LIMIT=90 scripts/device-session.sh \
    tsan:racecheck:gpu_moe:gemm1_bit_exact_on_exact_sums,gemm2_bit_exact_on_exact_sums
scripts/device-session.sh t:gpu_index64:200:moe_expert_gemm2_past
. scripts/calls/lib.sh
pack
