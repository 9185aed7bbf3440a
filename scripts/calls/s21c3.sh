#!/usr/bin/env bash
# Session 21, device call 3: the S forms with compile-time unit counts per wgmma N, loads
# batched ahead of the decode, and the accumulators zeroed / waited for inside each instance
# (calls 1-2 ran a build where ptxas serialized every wgmma: C7515). GEMM tests on s128 / s256,
# the layer at T = 4096 next to x64, ncu on s256's GEMM2.
cd "$(dirname "$0")/../.."
DUET_MOE_TEST_VERSIONS=v4_s128,v4_s256 scripts/device-session.sh t:gpu_moe:100
DUET_MOE_VERSIONS=v4_x64,v4_s128,v4_s256 PRESETS_LIMIT=120 scripts/device-session.sh presets:moe_t4096
. scripts/calls/lib.sh
DUET_MOE_VERSIONS=v4_s256 ncu_src_moe s256_ff_o
pack
