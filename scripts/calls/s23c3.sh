#!/usr/bin/env bash
# Session 23, device call 3: conv1d v5 / v6 / v8 / v9 compiled per x dtype with the activation
# folded at compile time (call 2's ncu: v5 76.6% SM throughput, v9 issue-bound at 4 warps a
# scheduler), taps and bias loaded once a warp and broadcast (v5 / v8), silu on the ftz SFU
# forms; v5m4 = v5 held to 64 registers (bench only). mamba_conv1d (every test, the past-2^31
# one with v8), the Super prefill preset twice, ncu on v5 / v8 / v9 bf16.
cd "$(dirname "$0")/../.."
scripts/device-session.sh t:mamba_conv1d:300
. scripts/calls/lib.sh
run_conv_presets
ncu_conv conv1d_fn_v5u4_bf16_w4
ncu_conv conv1d_fn_v8_bf16_w4
ncu_conv conv1d_fn_v9_bf16_w4
pack
