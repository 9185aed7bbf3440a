#!/usr/bin/env bash
# Session 22, device call 2 (shortened after a machine was taken back mid-call, budget low):
# - the R forms' column groups (r2p8c2 / r2p8c4 / r8p4c2 / r8p4c4: CG column groups of 16 a warp,
#   one weight stream through the warp's ring): the layer at T = 1 / 8 / 64 next to r2p8 /
#   r8p4, twice; gpu_moe on the new forms and v3 / v4 (a new shape with one K step a group).
cd "$(dirname "$0")/../.."
V=v3_r2p8,v3_r8p4,v3_r2p8c2,v3_r2p8c4,v3_r8p4c2,v3_r8p4c4
DUET_MOE_VERSIONS=$V PRESETS_LIMIT=100 scripts/device-session.sh presets:moe_t1,moe_t8,moe_t64
. scripts/calls/lib.sh
run bench-small-2 100 env DUET_MOE_VERSIONS=$V "$B/duet" bench --backend gpu --shape moe_t1 \
    --shape moe_t8 --shape moe_t64 --out "$OUT/bench_small_2.json"
run tests-gpu_moe-c 150 env DUET_MOE_TEST_VERSIONS=v3_r2p8c2,v3_r2p8c4,v3_r8p4c2,v3_r8p4c4,v3,v4 \
    "$B/tests/gpu_moe" --ignored --test-threads=1
pack
