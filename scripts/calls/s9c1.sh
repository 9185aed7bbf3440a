#!/usr/bin/env bash
# Next session, device call 1 (written in session 8, whose device time ran out): where the
# decode engine's 1.56 ms step goes, kernel by kernel, without the eager profile's per-op events.
#  - gpu_model (everything; the first process compiles the kernels: ~120 s on a fresh machine)
#  - `duet profile engine-step`: the super decode bench (compact weights, graphs) under ncu
#    with --profile-from-start off; duet e2e marks its last engine step (a graph replay) with
#    cuProfilerStart / Stop, so each of its ~130 kernels is profiled once and the durations are
#    summed per kernel name (new in session 8: not yet run on the device; if ncu does not
#    profile graph nodes inside the range, the log says "no profiled kernel")
#  - the super decode bench itself (engine median per step; 1.558 ms in session 8 call 4)
#  - `moe_slots_t1`: the NVFP4 slot GEMV variants (columns per warp, chunks per trip, register
#    caps) side by side on 22 Super experts, bits checked against the default (also a
#    gpu_model test: slot_gemv_variants_give_the_default_bits). Written in session 8, not run.
cd "$(dirname "$0")/../.."
scripts/device-session.sh t:gpu_model:300 ncuengine e2esuper16g presets:moe_slots_t1
cd "$OUT" && ls | grep -v -E '^(all.tgz|summary.txt)$' | xargs rm -rf
