#!/usr/bin/env bash
# Session 14, device call 2. Call 1: r8 (v3) took the MoE layer from 79.5 / 339.6 / 1021.7 to
# 39.1 / 212.1 / 646.6 us at T = 1 / 8 / 64. New: the R forms (m-tiles of 8 / 4 / 2 / 1 rows:
# less x staging, more blocks an SM; 4 steps in flight), v3's pick by rows per expert, and
# moe_perm_offsets filling the m-tile schedule (layer_tiles_from_permute in the bench JSON).
# gpu_moe (every form on every shape, the fused schedule against moe_tile_schedule), the
# layer presets per T with the forms that fit it, memcheck over the GEMM tests and the
# schedule test, racecheck over the schedule test.
cd "$(dirname "$0")/../.."
SAN_LIMIT=150 scripts/device-session.sh t:gpu_moe:240
DUET_MOE_VERSIONS=v3_r8,v3_r8s2,v3_r1d4,v3_r1s2d4,v3_r1s2,v3_r2d4,v3_r2s2d4 PRESETS_LIMIT=120 \
    scripts/device-session.sh presets:moe_t1
DUET_MOE_VERSIONS=v3_r8,v3_r8s2,v3_r1d4,v3_r1s2d4,v3_r2d4,v3_r2s2d4,v3_r4d4,v3_r4s2d4 PRESETS_LIMIT=120 \
    scripts/device-session.sh presets:moe_t8
DUET_MOE_VERSIONS=v3_r8,v3_r8s2,v3_r8d4,v3_r8s2d4,v3_r4d4,v3_r4s2d4,v3_r2s2d4 PRESETS_LIMIT=150 \
    scripts/device-session.sh presets:moe_t64
SAN_LIMIT=150 scripts/device-session.sh \
    tsan:memcheck:gpu_moe:gemm1_bit_exact_on_exact_sums,permute_fills_the_tile_schedule \
    tsan:racecheck:gpu_moe:permute_fills_the_tile_schedule
cd "$OUT" && tar -czf /tmp/all2.tgz --exclude=all.tgz . && mv /tmp/all2.tgz all.tgz
ls | grep -v -E '^(all.tgz|summary.txt)$' | xargs rm -rf
