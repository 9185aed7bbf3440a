#!/usr/bin/env bash
# Session 9, device call 5 (with the precompiled kernels working since call 4: each step
# skips the ~120 s compile): the sanitizers over the rest of what changed or was never
# sanitized: memcheck over the NVFP4 storage (the one-row GEMV's per-lane shared table), the
# engine on the GPU (eager and graphs) and the bench variants; racecheck over the NVFP4
# storage and the fused engine (add_rmsnorm's block sum).
cd "$(dirname "$0")/../.."
SAN_LIMIT=240 scripts/device-session.sh \
    tsan:memcheck:gpu_model:compact_lazy,decode_engine_on,decode_engine_graphs,slot_gemv_variants,norm_variants
SAN_LIMIT=200 scripts/device-session.sh tsan:racecheck:gpu_model:compact_lazy,fused_norms
cd "$OUT" && ls | grep -v -E '^(all.tgz|summary.txt)$' | xargs rm -rf
