#!/usr/bin/env bash
# Prepared in session 23 for the next session's first device call (build with
# DEVBIN_KCACHE="causal_conv1d bench_copy"; carry mamba_conv1d and duet):
# - the copy ceiling four ways (`--shape copy`: copy_v1 / copy_v2 / copy_v3 through the bulk
#   copy engine / the driver's memcpy; every timed copy byte-checked; copy_v3 never ran yet),
#   and the conv preset with v11 (v10 + bulk stores, never ran yet) last;
# - mamba_conv1d (every test), then memcheck over its hand cases (v8 / v9 / v10's mbarrier and
#   bulk-copy paths have not run under a sanitizer).
# If v11 is correct and faster than v10 (547-552 us in session 23), add it to the op's versions
# and re-run mamba_conv1d before auto takes it.
cd "$(dirname "$0")/../.."
PRESETS_LIMIT=150 scripts/device-session.sh presets:copy
. scripts/calls/lib.sh
run_conv_presets
scripts/device-session.sh t:mamba_conv1d:300
SAN_LIMIT=200 scripts/device-session.sh tsan:memcheck:mamba_conv1d:conv1d_fn_hand_cases
pack
