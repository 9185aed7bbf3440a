#!/usr/bin/env bash
# Session 17, device call 4: causal_conv1d_fn v5 (channel-first, v2 on a 2-D grid, U = 4 / 2
# vectors a lane) and v6 (channel-last, one 16-byte channel vector a thread, 2-D grid).
# mamba_conv1d (every version x case, the past-2^31 test with v5), the conv1d_prefill_50k
# preset twice, ncu (speed of light, memory, occupancy, warp states) on one launch of v2 / v5 /
# v4 / v6, `duet check --op causal_conv1d_fn` and memcheck over it.
cd "$(dirname "$0")/../.."
scripts/device-session.sh t:mamba_conv1d:400
. scripts/calls/lib.sh
run_conv_presets
for k in conv1d_fn_v2_h16_w4 conv1d_fn_v5u4_h16_w4 conv1d_fn_cl4_h16_w4 conv1d_fn_v6_h16_w4; do
    ncu_conv "$k"
done
CHK_LIMIT=120 SAN_LIMIT=200 scripts/device-session.sh chk:causal_conv1d_fn memcheck:causal_conv1d_fn
pack
