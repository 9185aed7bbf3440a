#!/usr/bin/env bash
# Session 23, device call 4: v8 warp-specialized (8 consumer warps + a producer warp, full /
# empty mbarriers a stage: no block barrier in the loop) and v10 (v9 the same way), next to
# call 3's v5 (64 registers) and v9 (auto): mamba_conv1d (every test, every version), the Super
# prefill preset twice, ncu on v8 and v10 bf16.
cd "$(dirname "$0")/../.."
scripts/device-session.sh t:mamba_conv1d:300
. scripts/calls/lib.sh
run_conv_presets
ncu_conv conv1d_fn_v8_bf16_w4
ncu_conv conv1d_fn_v10_bf16_w4
pack
