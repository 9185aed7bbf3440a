#!/usr/bin/env bash
# Session 23, device call 1:
# - conv1d v8 / v9 (new: the prefill through the bulk copy engine, persistent blocks, 4 stages
#   in shared memory): mamba_conv1d (every version on the hand / table / proptest cases, v8 in
#   the past-2^31 test), the Super prefill preset twice (every version next to a copy);
# - SSD v4's hand-over probes (`ssd4_handover_probe` and, new since session 22's last call,
#   `_dyn` on v4's dynamic shared memory and grid) plain and under racecheck.
# (The tracked tree is ~57 MiB as the device tool counts it: no room for the moe cubin and
# gpu_moe in this call's carry.)
cd "$(dirname "$0")/../.."
scripts/device-session.sh t:mamba_conv1d:200
. scripts/calls/lib.sh
run_conv_presets
SAN_LIMIT=90 scripts/device-session.sh t:mamba_ssd:60:v4_handover_probe \
    tsan:racecheck:mamba_ssd:v4_handover_probe
pack
