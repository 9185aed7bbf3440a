#!/usr/bin/env bash
# Session 20, device call 1: the prefill grouped GEMM on wgmma with the weights as A from
# registers (moe.cu `moe_gemm_x64_*` / `moe_gemm_x128_*`, versions v4 / v4_x64 / v4_x128): the
# gpu_moe GEMM tests on those versions, then the layer at T = 4096 (v1 = m64 first, both X
# forms) and at T = 64 (v4 = v3's pick there).
cd "$(dirname "$0")/../.."
DUET_MOE_TEST_VERSIONS=v4,v4_x64,v4_x128 scripts/device-session.sh t:gpu_moe:300:gemm
DUET_MOE_VERSIONS=v4_x64,v4_x128 PRESETS_LIMIT=200 scripts/device-session.sh presets:moe_t4096
. scripts/calls/lib.sh
pack
