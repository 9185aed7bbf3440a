#!/usr/bin/env bash
# Session 21, device call 2: s128 (the S form at 128 tokens, 3 stages, 2 blocks an SM) next to
# s256 (call 1: layer 4087 us vs x64 3639); the GEMM tests on s128; ncu on s256's GEMM2.
cd "$(dirname "$0")/../.."
DUET_MOE_TEST_VERSIONS=v4_s128 scripts/device-session.sh t:gpu_moe:100:bit_exact
DUET_MOE_VERSIONS=v4_s128,v4_s256 PRESETS_LIMIT=120 scripts/device-session.sh presets:moe_t4096
. scripts/calls/lib.sh
DUET_MOE_VERSIONS=v4_s256 ncu_src_moe s256_ff_o
pack
