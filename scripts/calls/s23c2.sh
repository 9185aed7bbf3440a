#!/usr/bin/env bash
# Session 23, device call 2: conv1d v8 / v9 after call 1 (v9 was refused by run_fn's layout
# check: fixed), the copy ceiling three ways (copy_v1, copy_v2 with four loads in flight a
# thread, the driver's memcpy) inside the conv preset, ncu on v5 / v8 / v9, and the SSD v4
# hand-over probes under racecheck with a hazard limit high enough to print what it saw.
cd "$(dirname "$0")/../.."
scripts/device-session.sh t:mamba_conv1d:200:conv1d_fn_hand_cases,conv1d_fn_random_shapes,conv1d_fn_table_cases
. scripts/calls/lib.sh
run_conv_presets
ncu_conv conv1d_fn_v5u4_h16_w4
ncu_conv conv1d_fn_v8_h16_w4
ncu_conv conv1d_fn_v9_h16_w4
NV_COMPUTE_SANITIZER_MAX_RACECHECK_HAZARDS=2000000 SAN_LIMIT=120 scripts/device-session.sh \
    tsan:racecheck:mamba_ssd:v4_handover_probe
pack
