#!/usr/bin/env bash
# Session 11, device call 6 (carry [".devbin.tar.xz", ".baselines"]; `python3
# tools/fetch_baselines.py` first). Call 5: _xs3 slot chain 61.6 us vs 67.0 (same bits), engine
# fused 1.196 ms (xs3), 1.192 (xs) vs 1.200 (chunk); xs3 is now the default slot kernel.
#  - gpu_model, everything, and the fused super decode bench (24 steps) on the new default
#  - issue 5's outside baseline in the same run: mamba_ssm 2.3.2.post1's Triton
#    selective_state_update at batch 1 / 64 / 256 (bf16 state) and 256 (f32), and
#    mamba_chunk_scan_combined at 4096 / 50000 tokens (tools/triton_side_by_side.py), next to
#    duet's SSU presets at batch 1 and 256 (session 10: v9 6.77 / 328.1 us)
cd "$(dirname "$0")/../.."
E2E_STEPS=24 E2E_SUPER_LIMIT=120 PRESETS_LIMIT=150 scripts/device-session.sh t:gpu_model:120 \
    e2esuper16gf triton presets:ssu_b1_bf16,ssu_b256_bf16
cd "$OUT" && ls | grep -v -E '^(all.tgz|summary.txt|triton_side_by_side.json)$' | xargs rm -rf
