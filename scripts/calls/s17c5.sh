#!/usr/bin/env bash
# Session 17, device call 5: causal_conv1d_fn v7 (v5's spans on persistent, software-pipelined
# warps) next to v2 / v5 / v4 / v6: mamba_conv1d (every version x case, the past-2^31 test with
# v5 / v7), the conv1d_prefill_50k preset twice, ncu on one v7 launch, memcheck over
# `duet check --op causal_conv1d_fn` (its comparisons reported too).
cd "$(dirname "$0")/../.."
scripts/device-session.sh t:mamba_conv1d:400
. scripts/calls/lib.sh
run_conv_presets
ncu_conv conv1d_fn_v7_h16_w4
SAN_LIMIT=200 scripts/device-session.sh memcheck:causal_conv1d_fn
pack
