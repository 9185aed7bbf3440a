#!/usr/bin/env bash
# Session 14, device call 5 (~630 s of device time left). New after call 4: the u forms (the
# cp.async loop unrolled by P: constant ring offsets, ~180 instead of ~221 SASS instructions a
# step in r8p4u). gpu_moe (every form), the presets at T = 1 / 8 / 64 next to r8p4 / r2p8,
# memcheck and racecheck over the bit-exact GEMM tests on the u forms.
cd "$(dirname "$0")/../.."
scripts/device-session.sh t:gpu_moe:240
DUET_MOE_VERSIONS=v3_r8p4,v3_r8p4u,v3_r2p8,v3_r2p8u,v3_r2p4u PRESETS_LIMIT=150 \
    scripts/device-session.sh presets:moe_t1,moe_t8,moe_t64
DUET_MOE_TEST_VERSIONS=v3_r8p4u,v3_r2p4u,v3_r2p8u SAN_LIMIT=120 scripts/device-session.sh \
    tsan:memcheck:gpu_moe:gemm1_bit_exact_on_exact_sums,gemm2_bit_exact_on_exact_sums \
    tsan:racecheck:gpu_moe:gemm1_bit_exact_on_exact_sums,gemm2_bit_exact_on_exact_sums
cd "$OUT" && tar -czf /tmp/all2.tgz --exclude=all.tgz . && mv /tmp/all2.tgz all.tgz
ls | grep -v -E '^(all.tgz|summary.txt)$' | xargs rm -rf
