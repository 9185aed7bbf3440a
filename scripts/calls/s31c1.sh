#!/usr/bin/env bash
# Session 31, call 1 (TESTS="gpu_ssu", kcache as session 30 call 3; carry .devbin.tar.xz):
# commit 11863b82 (host only: x / B / C / z uploaded once in the kernel's dtype) on the device:
# the op's case table, then auto's batch-1 preset as this machine's baseline.
cd "$(dirname "$0")/../.."
scripts/device-session.sh
. scripts/calls/lib.sh
run check-ssu 90 "$B/duet" check --backend gpu --op selective_state_update
DUET_SSU_AUTO_ONLY=1 run bench-ssu-b1 60 "$B/duet" bench --backend gpu --no-resources \
    --shape ssu_b1_bf16 --out "$OUT/bench_ssu_b1.json"
pack
