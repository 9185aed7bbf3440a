#!/usr/bin/env bash
# Session 8, device call 5 (the session's last ~320 s of device time): the norms' unrolled
# loops (model_rmsnorm / model_gated_rmsnorm / model_mix_slots: same FMAs in the same order)
# under the gpu_model tests that cover them and the engine, the tiny goldens through the engine,
# then the super decode bench with compact weights and graphs twice: the routed slots' NVFP4
# GEMV with 4 columns per warp (default) and with 2 (DUET_GEMV1_NV_R=2, at most 80 registers).
cd "$(dirname "$0")/../.."
E2E_LIMIT=40 E2E_SUPER_LIMIT=90 scripts/device-session.sh \
    t:gpu_model:60:norms,decode_engine,compact,gemm_matches,conv_ssd_ssu_router e2eengine e2esuper16g
cp "$OUT/e2e-super-bf16-graphs.log" "$OUT/e2e-super-bf16-graphs-r4.log"
DUET_GEMV1_NV_R=2 E2E_SUPER_LIMIT=90 scripts/device-session.sh e2esuper16g
cd "$OUT" && ls | grep -v -E '^(all.tgz|summary.txt)$' | xargs rm -rf
