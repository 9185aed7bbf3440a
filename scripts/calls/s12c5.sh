#!/usr/bin/env bash
# Session 12, device call 5 (the last: ~480 s of device time left). Call 4: ncu on w64's GEMM2
# (ring, T = 4096): L1/TEX 81.7%, issue 37.9%, 0.46 eligible warps, shared loads 3-way bank
# conflicts (52.6% of their wavefronts: the e2m1-pair table's random lookups); m64: L1 90.2%.
# Since then w64 reads a lane-interleaved table (32 copies, entry b of lane l at 32 b + l:
# conflict-free lookups; 108 KB a CTA, still two an SM). Here: gpu_moe (same outputs),
# memcheck / racecheck over the GEMM tests, moe_t64 / moe_t4096.
cd "$(dirname "$0")/../.."
SAN_LIMIT=150 scripts/device-session.sh t:gpu_moe:120 presets:moe_t64,moe_t4096 \
    tsan:memcheck:gpu_moe:gemm1_bit_exact_on_exact_sums,gemm2_bit_exact_on_exact_sums \
    tsan:racecheck:gpu_moe:gemm2_bit_exact_on_exact_sums
cd "$OUT" && tar -czf /tmp/all2.tgz --exclude=all.tgz . && mv /tmp/all2.tgz all.tgz
ls | grep -v -E '^(all.tgz|summary.txt)$' | xargs rm -rf
