#!/usr/bin/env bash
# Session 20, device call 3: the X forms' epilogue through shared memory (call 2's ncu of
# x128's GEMM1: 35% no_inst stalls, the per-8-token shuffle epilogue as long as the main
# loop). gpu_moe's GEMM tests on every v4 form, the layer at T = 4096, ncu of x64's GEMM1 and
# x128's GEMM2.
cd "$(dirname "$0")/../.."
DUET_MOE_TEST_VERSIONS=v4,v4_x64,v4_x128,v4_x64p5,v4_x128p6 scripts/device-session.sh t:gpu_moe:300:gemm
DUET_MOE_VERSIONS=v4_x64,v4_x128,v4_x64p5,v4_x128p6 PRESETS_LIMIT=200 scripts/device-session.sh presets:moe_t4096
. scripts/calls/lib.sh
DUET_MOE_VERSIONS=v4_x64 ncu_src_moe x64_ff_q
DUET_MOE_VERSIONS=v4_x128 ncu_src_moe x128_ff_o
pack
