#!/usr/bin/env bash
# Session 20, device call 4: X forms with the wgmma wait moved before each group's decode (a
# step's groups stay in flight through the barriers and the next x tile's decode), 32-bit ring
# slots (no i64 % P), the FMA E2M1 index in the epilogue (moved to common.cuh with nvfp4.cu v7 /
# v8). gpu_moe's GEMM tests on every v4 form, gpu_nvfp4, the layer at T = 4096.
cd "$(dirname "$0")/../.."
DUET_MOE_TEST_VERSIONS=v4,v4_x64,v4_x128,v4_x64p5,v4_x128p6 scripts/device-session.sh t:gpu_moe:300:gemm t:gpu_nvfp4:200
DUET_MOE_VERSIONS=v4_x64,v4_x128,v4_x64p5,v4_x128p6 PRESETS_LIMIT=200 scripts/device-session.sh presets:moe_t4096
. scripts/calls/lib.sh
DUET_MOE_VERSIONS=v4_x64 ncu_src_moe x64_ff_o
pack
