#!/usr/bin/env bash
# Session 22, device call 4 (the last ~250 s of device time): racecheck calibration. Call 3's
# racecheck still reported SSD v4's xch hand-over with every barrier id an immediate;
# `ssd4_handover_probe` runs the hand-over pattern alone (mamba_ssd `v4_handover_probe` checks
# its sums): plain, then under racecheck.
cd "$(dirname "$0")/../.."
SAN_LIMIT=60 scripts/device-session.sh t:mamba_ssd:60:v4_handover_probe \
    tsan:racecheck:mamba_ssd:v4_handover_probe
. scripts/calls/lib.sh
pack
