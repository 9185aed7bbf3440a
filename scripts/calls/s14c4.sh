#!/usr/bin/env bash
# Session 14, device call 4 (~860 s of device time left). After call 3 v3 picks r8p4 (r2p8 at
# 0.1 < rows per expert <= 1), from call 3's presets. Here: gpu_moe (v3's new pick on the
# test shapes, every form again), the layer presets at T = 1 / 8 / 64 (v2, r8p4, r2p8, v3) and
# T = 4096 (v1 = v3 = m64) next to PyTorch's torch._grouped_mm chain in the same call, and
# racecheck over both bit-exact GEMM tests restricted to three forms (all of them ran past
# 150 s in call 3).
cd "$(dirname "$0")/../.."
scripts/device-session.sh t:gpu_moe:240
DUET_MOE_VERSIONS=v3_r8p4,v3_r2p8 PRESETS_LIMIT=150 \
    scripts/device-session.sh presets:moe_t1,moe_t8,moe_t64
DUET_MOE_VERSIONS=v1 PRESETS_LIMIT=150 scripts/device-session.sh presets:moe_t4096
scripts/device-session.sh torch:moe
DUET_MOE_TEST_VERSIONS=v3_r8p4,v3_r2p8,v3_r4s2p6 SAN_LIMIT=150 scripts/device-session.sh \
    tsan:racecheck:gpu_moe:gemm1_bit_exact_on_exact_sums,gemm2_bit_exact_on_exact_sums
cd "$OUT" && tar -czf /tmp/all2.tgz --exclude=all.tgz . && mv /tmp/all2.tgz all.tgz
ls | grep -v -E '^(all.tgz|summary.txt)$' | xargs rm -rf
