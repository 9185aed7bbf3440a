#!/usr/bin/env bash
# Session 23, device call 5: the committed conv1d (auto = v10 channel-last, v5 channel-first):
# mamba_conv1d, every test.
cd "$(dirname "$0")/../.."
scripts/device-session.sh t:mamba_conv1d:300
. scripts/calls/lib.sh
pack
