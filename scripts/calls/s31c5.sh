#!/usr/bin/env bash
# Session 31, call 5 (kcache as call 3; TESTS="gpu_ssu"; carry .devbin.tar.xz and .baselines):
# the acceptance side by side in one run: auto's presets (v12 at batch 1 now), FlashInfer's
# harness and mamba_ssm's Triton kernels; an f16 state at batch 1 on v12 against auto's v10.
cd "$(dirname "$0")/../.."
scripts/device-session.sh
. scripts/calls/lib.sh
DUET_SSU_AUTO_ONLY=1 run bench-ssu-auto 150 "$B/duet" bench --backend gpu --no-resources \
    --shape ssu_b1_bf16 --shape ssu_b64_bf16 --shape ssu_b256_bf16 --shape ssu_b256_f32 \
    --out "$OUT/bench_ssu_auto.json"
run build-flashinfer 90 tools/flashinfer_ssu/build.sh /tmp/fi_ssu
run flashinfer-ssu 90 /tmp/fi_ssu --out "$OUT/flashinfer_ssu.json"
run triton 150 python3 tools/triton_side_by_side.py --out "$OUT/triton_side_by_side.json"
DUET_SSU_ONLY=ssu_v10_f16,ssu_v12_f16 DUET_SSU_BATCH=1 run bench-f16-b1 60 "$B/duet" bench \
    --backend gpu --no-resources --shape ssu_v11 --out "$OUT/bench_f16_b1.json"
pack
