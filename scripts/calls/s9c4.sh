#!/usr/bin/env bash
# Session 9, device call 4 (written in session 8 as call 2; moved after the profile):
#  - compute-sanitizer memcheck and racecheck over the one-row GEMV (model_gemv1_*, its
#    per-lane shared table for NVFP4) through gpu_model's storage tests and the engine tests;
#    session 8 ran them only as tests, not under the sanitizers
#  - where the decode engine's step goes, kernel by kernel, without the eager profile's per-op
#    events: `duet profile engine-step` runs the super decode bench (compact weights, graphs)
#    under ncu --profile-from-start off; duet e2e marks its last engine step (a graph replay)
#    with cuProfilerStart / Stop, so each of its ~130 kernels is profiled once, and the
#    durations are summed per kernel name. New in session 8, not yet run: if ncu does not
#    profile graph nodes inside the range, the log says "no profiled kernel" (then try `--e2e`
#    without --engine-graphs: the eager engine's step).
cd "$(dirname "$0")/../.."
SAN_LIMIT=150 NCU_ENGINE_LIMIT=400 scripts/device-session.sh \
    tsan:memcheck:gpu_model:compact_lazy,bf16_weight,decode_engine_on \
    tsan:racecheck:gpu_model:compact_lazy,decode_engine_on ncuengine
cd "$OUT" && ls | grep -v -E '^(all.tgz|summary.txt)$' | xargs rm -rf
