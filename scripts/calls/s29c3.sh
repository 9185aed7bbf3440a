#!/usr/bin/env bash
# Session 29, call 3 (DEVBIN_KCACHE="selective_state_update"; carry duet, gpu_ssu): the final
# code after auto's batch-1 switch to x11_bf16_c4_m4 (bf16, round-to-nearest, dt per head, fewer
# than 4 tiles an SM): every gpu_ssu test (auto included: random shapes, v11 bit-exact, the walk
# tests, past 2^31), `duet check` over the SSU cases on the GPU, then ssu_v11 at batch 1 once.
cd "$(dirname "$0")/../.."
scripts/device-session.sh t:gpu_ssu:240
. scripts/calls/lib.sh
run check-ssu 120 "$B/duet" check --backend gpu --op selective_state_update
export DUET_SSU_ONLY=ssu_v11_bf16,ssu_x11_bf16_c4_m4 DUET_SSU_BATCH=1
run bench-ssu-b1 60 "$B/duet" bench --backend gpu --no-resources --shape ssu_v11 --out "$OUT/bench_ssu_b1.json"
unset DUET_SSU_ONLY DUET_SSU_BATCH
pack
