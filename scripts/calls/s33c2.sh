#!/usr/bin/env bash
# Session 33, call 2: the r8 forms' x staging with batched loads (XB units a thread before any
# decode) and the w forms (8 / 16 warps a block sharing x): gpu_moe on r8p4 / r2p8 / the w
# forms, then the layer bench at T = 1 / 8 / 64 on r8p4, r2p8, the w forms and GEMM1 / GEMM2
# pairs.
cd "$(dirname "$0")/../.."
scripts/device-session.sh
. scripts/calls/lib.sh
V="v3_r8p4,v3_r2p8,v3_r8w8p4,v3_r2w8p8,v3_r8w16p4"
DUET_MOE_TEST_VERSIONS=$V run gpu-moe 200 $B/tests/gpu_moe --ignored --test-threads 1
P="v3_r8p4/v3_r8w8p4,v3_r8p4/v3_r8w16p4,v3_r2p8/v3_r2w8p8,v3_r2p8/v3_r8w8p4"
DUET_MOE_VERSIONS="$V,$P" run bench-moe 240 "$B/duet" bench --backend gpu --no-resources \
    --shape moe_t1 --shape moe_t8 --shape moe_t64 --out "$OUT/bench_moe.json"
grep -h "test result\|FAILED\|panicked" $OUT/gpu-moe.log | head -20 >> $OUT/summary.txt
pack
