#!/usr/bin/env bash
# Session 30, call 1 (written in session 29, not yet run: its device budget was spent;
# DEVBIN_KCACHE="selective_state_update"; carry duet): the SSU presets whose
# issue targets name `auto`, now with auto's own entries (`"auto": true`): batch 1 and 64, bf16.
cd "$(dirname "$0")/../.."
scripts/device-session.sh
. scripts/calls/lib.sh
run bench-ssu-presets 120 "$B/duet" bench --backend gpu --no-resources --shape ssu_b1_bf16 \
    --shape ssu_b64_bf16 --out "$OUT/bench_ssu_presets.json"
pack
