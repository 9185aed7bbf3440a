#!/usr/bin/env bash
# Session 9, device call 4: compute-sanitizer over the kernels changed or added since the last
# sanitizer runs (session 8 call 2): the register-held norms (model_rmsnorm, model_gated_rmsnorm,
# model_add_rmsnorm), the one-row GEMV (model_gemv1_*, incl. the NVFP4 per-lane shared table
# and the fewer-warps-per-block launch for small products).
#  - memcheck: norms_and_relu2_match_cpu (rmsnorm / gated through the op path),
#    bf16_weight_storage (gemv1 over many shapes), decode_engine_fused_norms (add_rmsnorm,
#    the engine eager and with graphs)
#  - racecheck: the norms (block sums in shared memory) and the GEMV storage test
#  - synccheck: the norms
# (session 8 wrote a call 2 with the ncu engine profile too: that ran as session 9 calls 2-3)
cd "$(dirname "$0")/../.."
SAN_LIMIT=300 scripts/device-session.sh \
    tsan:memcheck:gpu_model:norms_and_relu2,bf16_weight,fused_norms
SAN_LIMIT=120 scripts/device-session.sh tsan:racecheck:gpu_model:norms_and_relu2,bf16_weight
SAN_LIMIT=60 scripts/device-session.sh tsan:synccheck:gpu_model:norms_and_relu2
cd "$OUT" && ls | grep -v -E '^(all.tgz|summary.txt)$' | xargs rm -rf
