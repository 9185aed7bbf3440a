#!/usr/bin/env bash
# Session 30, call 1 (DEVBIN_KCACHE="selective_state_update"; carry .devbin.tar.xz and .baselines):
# issue 5's SSU side by side in one run: FlashInfer 0.7.4's selective state update (duet's harness
# tools/flashinfer_ssu, built here with the image's nvcc), duet's presets (with auto's entries,
# `"auto": true`) and mamba_ssm's Triton kernels; FlashInfer again at the end for its spread.
cd "$(dirname "$0")/../.."
scripts/device-session.sh
. scripts/calls/lib.sh
run build-flashinfer 150 tools/flashinfer_ssu/build.sh /tmp/fi_ssu
run flashinfer-ssu-1 120 /tmp/fi_ssu --out "$OUT/flashinfer_ssu_1.json"
run bench-ssu-presets 200 "$B/duet" bench --backend gpu --no-resources --shape ssu_b1_bf16 \
    --shape ssu_b64_bf16 --shape ssu_b256_bf16 --shape ssu_b256_f32 --out "$OUT/bench_ssu_presets.json"
# Batch 1's chain (auto's x11_bf16_c4_m4): ncu source counters with warm caches (per SASS
# instruction: executions, stall samples).
export DUET_SSU_ONLY=ssu_x11_bf16_c4_m4 DUET_SSU_BATCH=1
run ncu-src-c4m4-b1 150 "$ncu" --clock-control none --cache-control none -k "regex:^ssu_x11_bf16_c4_m4$" \
    -s 5 -c 1 --section SourceCounters --section WarpStateStats --section SpeedOfLight \
    --import-source no -o /tmp/c4b1 "$B/duet" bench --backend gpu --no-resources --shape ssu_v11 \
    --out /tmp/ncu_bench.json
run ncu-src-c4m4-b1-csv 60 "$ncu" --import /tmp/c4b1.ncu-rep --page source --csv --print-source sass
run ncu-det-c4m4-b1 60 "$ncu" --import /tmp/c4b1.ncu-rep --page details --csv
unset DUET_SSU_ONLY DUET_SSU_BATCH
run triton 150 python3 tools/triton_side_by_side.py --out "$OUT/triton_side_by_side.json"
run flashinfer-ssu-2 60 /tmp/fi_ssu --out "$OUT/flashinfer_ssu_2.json"
pack
