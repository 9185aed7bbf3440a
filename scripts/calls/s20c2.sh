#!/usr/bin/env bash
# Session 20, device call 2: where the X forms' time goes. Call 1: layer at T = 4096 v1 8285,
# x64 4966 (GEMM1 3230 / GEMM2 1702), x128 9001 (6746 / 2218) us: 22-30% of the tensor cores
# though the SASS issue estimate allows ~70%. Here: the layer with deeper rings (x64p5,
# x128p6), then ncu warp states + source counters of x64's GEMM2 and x128's GEMM1.
cd "$(dirname "$0")/../.."
DUET_MOE_VERSIONS=v4_x64,v4_x128,v4_x64p5,v4_x128p6 PRESETS_LIMIT=200 scripts/device-session.sh presets:moe_t4096
. scripts/calls/lib.sh
DUET_MOE_VERSIONS=v4_x64 ncu_src_moe x64_ff_o
DUET_MOE_VERSIONS=v4_x128 ncu_src_moe x128_ff_q
pack
