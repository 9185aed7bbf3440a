#!/usr/bin/env bash
# Session 28, call 1 (DEVBIN_KCACHE="selective_state_update bench_copy"; carry duet, gpu_ssu): racecheck on
# the staged v11 forms alone (session 27's racecheck printed 20 of 21 hazards, all in v9's
# bulk-copy path, so the staged forms were not cleared), then two repeats of the v11 preset held
# to the forms auto chooses between (DUET_SSU_ONLY), for auto's batch-256 / batch-64 picks, now
# with graph replay under programmatic dependent launch (graph_replay_pdl) at batch <= 64.
cd "$(dirname "$0")/../.."
scripts/device-session.sh t:gpu_ssu:150:ssu_v11_bit_exact
. scripts/calls/lib.sh
export DUET_SSU_V11_VERSIONS=x11_bf16_c8_m3_s3,x11_bf16_c4_m4_s4,x11_bf16_c4_m4_s6
run racecheck-staged 240 compute-sanitizer --tool racecheck --error-exitcode 9 --print-limit 200 \
    "$B/tests/gpu_ssu" --ignored --test-threads=1 ssu_v11_bit_exact --nocapture
unset DUET_SSU_V11_VERSIONS
export DUET_SSU_ONLY=ssu_v9_bf16,ssu_v10_bf16,ssu_v11_bf16,ssu_x11_bf16_c4_m4,ssu_x11_bf16_c8_m3_s3,ssu_x11_bf16_c4_m4_s4
for i in 1 2; do
    run "bench-ssu-v11-$i" 150 "$B/duet" bench --backend gpu --shape ssu_v11 --out "$OUT/bench_ssu_v11_$i.json"
done
unset DUET_SSU_ONLY
# The in-place copy probes (bench_copy.cu v8-v10: grid-stride, v11's per-warp ranges, tiles
# round-robin) next to copy_v1: the ceiling of an in-place update's memory pattern.
run bench-copy 150 "$B/duet" bench --backend gpu --shape copy --out "$OUT/bench_copy.json"
pack
