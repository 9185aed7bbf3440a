#!/usr/bin/env bash
# Session 26, call 3 (call 2's binaries): gpu_ssu's 2^31 test with a longer limit (call 2 ran
# out of its 150 s after v1-v10 had matched; v11 had not finished).
cd "$(dirname "$0")/../.."
scripts/device-session.sh t:gpu_ssu:400:ssu_state_offsets_beyond_2_pow_31
. scripts/calls/lib.sh
pack
