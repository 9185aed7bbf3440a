#!/usr/bin/env bash
# Session 8, device call 4: call 3 again after its fix. Call 3 hung (both steps ran into their
# limits): model_gemv1_body's chunk loop had a per-lane trip count and a __syncwarp inside, so
# with fewer chunks than 32 lanes (K = 256: 16) the idle lanes waited at the butterfly's
# shuffle and the others at the __syncwarp. The loop is warp-uniform now. Tight limits (the
# session's device budget had ~480 s left).
cd "$(dirname "$0")/../.."
E2E_LIMIT=60 E2E_SUPER_LIMIT=150 scripts/device-session.sh t:gpu_model:150 e2eengine e2esuper16g
cd "$OUT" && ls | grep -v -E '^(all.tgz|summary.txt)$' | xargs rm -rf
