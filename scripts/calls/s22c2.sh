#!/usr/bin/env bash
# Session 22, device call 2:
# - the R forms' column groups (r2p8c2 / r2p8c4 / r8p4c2 / r8p4c4: CG column groups of 16 a warp,
#   one weight stream through the warp's ring): gpu_moe (every version, a new shape with one
#   K step a group), the layer at T = 1 / 8 / 64 next to r2p8 / r8p4, twice;
# - memcheck over the bit-exact GEMM tests on two of the new forms and s256 (v4's GEMM2 form, never
#   under memcheck).
cd "$(dirname "$0")/../.."
scripts/device-session.sh t:gpu_moe:200
. scripts/calls/lib.sh
V=v3_r2p8,v3_r8p4,v3_r2p8c2,v3_r2p8c4,v3_r8p4c2,v3_r8p4c4
for i in 1 2; do
    run "bench-small-$i" 120 env DUET_MOE_VERSIONS=$V "$B/duet" bench --backend gpu --shape moe_t1 \
        --shape moe_t8 --shape moe_t64 --out "$OUT/bench_small_$i.json"
done
DUET_MOE_TEST_VERSIONS=v3_r2p8c4,v3_r8p4c2,v4_s256 SAN_LIMIT=150 \
    scripts/device-session.sh tsan:memcheck:gpu_moe:gemm1_bit_exact_on_exact_sums,gemm2_bit_exact_on_exact_sums
pack
