#!/usr/bin/env bash
# Session 20, device call 5: X forms with 2-step wgmma groups (fewer A registers: x64g2 118,
# x128g2 166, and x64p2g2 at 72 registers with a 2-stage ring: three blocks an SM). Call 4:
# x64 3680.7 us a layer (GEMM1 1960.5, GEMM2 1714.5), ncu: ALU-pipe pressure (math / dispatch
# / not_selected stalls). gpu_moe's GEMM tests on the new forms, the layer at T = 4096.
cd "$(dirname "$0")/../.."
DUET_MOE_TEST_VERSIONS=v4_x64g2,v4_x64p2g2,v4_x128g2 scripts/device-session.sh t:gpu_moe:300:gemm
DUET_MOE_VERSIONS=v4_x64,v4_x64g2,v4_x64p2g2,v4_x128g2 PRESETS_LIMIT=200 scripts/device-session.sh presets:moe_t4096
. scripts/calls/lib.sh
pack
