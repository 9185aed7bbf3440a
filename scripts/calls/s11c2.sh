#!/usr/bin/env bash
# Next session, device call 2 (written at the end of session 10): issue 5's side-by-side with
# mamba_ssm's Triton kernels in one run. Build here first: `scripts/gpu-test.sh build` and
# `python3 tools/fetch_baselines.py`; carry [".devbin.tar.xz", ".baselines"].
#  - triton: mamba_ssm's selective_state_update at batch 1 / 64 / 256 (bf16 state) and 256 (f32),
#    graph replay over >= 256 MB of rotating state (the issue quotes 4.6 / 165 / 654 / 685 us),
#    and mamba_chunk_scan_combined at 4096 and 50000 tokens (the issue: 3785 us)
#  - duet's SSU presets at the same shapes (session 10 call 2: v9 6.77 / 85.7 / 328.1, v8 614.2)
#    and its SSD at 50k tokens
cd "$(dirname "$0")/../.."
PRESETS_LIMIT=400 scripts/device-session.sh triton presets:ssu_b1_bf16,ssu_b64_bf16,ssu_b256_bf16,ssu_b256_f32,ssd_50k
cd "$OUT" && ls | grep -v -E '^(all.tgz|summary.txt)$' | xargs rm -rf
