#!/usr/bin/env bash
# Session 34, call 2: where xw128's GEMM2 (moe_gemm_xw128_ff_o) spends its time at T = 4096:
# ncu warp states, source counters (per SASS line), speed of light, occupancy of one launch.
cd "$(dirname "$0")/../.."
scripts/device-session.sh
. scripts/calls/lib.sh
DUET_MOE_VERSIONS=v4_xw128 ncu_src_moe xw128_ff_o moe_t4096
pack
