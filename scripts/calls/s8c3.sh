#!/usr/bin/env bash
# Session 8, device call 3: the one-row GEMV on 16-weight chunks (model_gemv1_*, R columns per
# warp, NVFP4 decoded through a per-lane shared table) and NVFP4 storage at 0.5625 bytes per
# weight (codes, scale bytes, one table of pairs per matrix): gpu_model (bf16 / compact storage
# give the f32 bits at t = 1 through gemv1; the engine and its graphs), the tiny goldens through
# the engine, then the super decode bench with compact weights and graphs (~5 min).
cd "$(dirname "$0")/../.."
scripts/device-session.sh t:gpu_model:300 e2eengine e2esuper16g
cd "$OUT" && ls | grep -v -E '^(all.tgz|summary.txt)$' | xargs rm -rf
