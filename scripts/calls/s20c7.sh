#!/usr/bin/env bash
# Session 20, device call 7 (call 6 was lost: the machine was taken back mid-call; ~310 s of
# device time left): the final kernel file. gpu_moe (every version), the layer at T = 4096
# (v1, x64), memcheck over the bit-exact GEMM tests on x64.
cd "$(dirname "$0")/../.."
scripts/device-session.sh t:gpu_moe:120
DUET_MOE_VERSIONS=v4_x64 PRESETS_LIMIT=80 scripts/device-session.sh presets:moe_t4096
DUET_MOE_TEST_VERSIONS=v4_x64 SAN_LIMIT=60 scripts/device-session.sh \
    tsan:memcheck:gpu_moe:gemm1_bit_exact_on_exact_sums,gemm2_bit_exact_on_exact_sums
. scripts/calls/lib.sh
pack
