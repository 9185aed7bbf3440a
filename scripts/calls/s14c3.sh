#!/usr/bin/env bash
# Session 14, device call 3. Call 2: the register R forms (rows 8/4/2/1, D 2/4) took the layer
# to 41.0 (r1s2) / 198.8 (v3: r2d4 + r2s2d4) / 689.5 (r4d4) us at T = 1 / 8 / 64, still
# latency-bound (~2.3 TB/s). New: the p forms (the weights through a per-warp cp.async ring of
# 4-8 stages: no registers held by loads in flight); gpu_moe's random tests now cover the
# general forms (call 2 stopped at v3_r8g, a name the op did not list). gpu_moe, gpu_model
# (common.cuh now holds the slot GEMV's decode helpers), the presets per T, memcheck over the
# GEMM tests, racecheck over GEMM1's.
cd "$(dirname "$0")/../.."
scripts/device-session.sh t:gpu_moe:240 t:gpu_model:150
DUET_MOE_VERSIONS=v3_r8,v3_r1s2,v3_r1p6,v3_r1s2p6,v3_r2p6,v3_r8p4,v3_r2p8,v3_r4p6 PRESETS_LIMIT=120 \
    scripts/device-session.sh presets:moe_t1
DUET_MOE_VERSIONS=v3_r2d4,v3_r2s2d4,v3_r2p6,v3_r2s2p6,v3_r4p6,v3_r4p8,v3_r2p8,v3_r1p6 PRESETS_LIMIT=120 \
    scripts/device-session.sh presets:moe_t8
DUET_MOE_VERSIONS=v3_r8d4,v3_r8s2,v3_r4d4,v3_r8p4,v3_r4p6,v3_r4p8,v3_r4s2p6,v3_r2p8 PRESETS_LIMIT=150 \
    scripts/device-session.sh presets:moe_t64
SAN_LIMIT=150 scripts/device-session.sh \
    tsan:memcheck:gpu_moe:gemm1_bit_exact_on_exact_sums,gemm2_bit_exact_on_exact_sums \
    tsan:racecheck:gpu_moe:gemm1_bit_exact_on_exact_sums
cd "$OUT" && tar -czf /tmp/all2.tgz --exclude=all.tgz . && mv /tmp/all2.tgz all.tgz
ls | grep -v -E '^(all.tgz|summary.txt)$' | xargs rm -rf
