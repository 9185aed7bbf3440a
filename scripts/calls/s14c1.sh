#!/usr/bin/env bash
# Session 14, device call 1. New: moe.cu's r8 grouped GEMM (NVFP4 x NVFP4, <= 8 token rows a
# tile: both operands decoded in registers to f16, mma.sync f16 -> f32, x staged once a
# block; versions v3 / v3_r8 / v3_r8s2 / v3_r8s4). gpu_moe (every version incl. r8 on every
# shape), the layer presets at T = 1 / 8 / 64 with every version side by side, memcheck and
# racecheck over the bit-exact GEMM tests.
cd "$(dirname "$0")/../.."
SAN_LIMIT=150 PRESETS_LIMIT=240 scripts/device-session.sh t:gpu_moe:150 presets:moe_t1,moe_t8,moe_t64 \
    tsan:memcheck:gpu_moe:gemm1_bit_exact_on_exact_sums,gemm2_bit_exact_on_exact_sums \
    tsan:racecheck:gpu_moe:gemm2_bit_exact_on_exact_sums
cd "$OUT" && tar -czf /tmp/all2.tgz --exclude=all.tgz . && mv /tmp/all2.tgz all.tgz
ls | grep -v -E '^(all.tgz|summary.txt)$' | xargs rm -rf
