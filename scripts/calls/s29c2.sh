#!/usr/bin/env bash
# Session 29, call 2 (DEVBIN_KCACHE="moe"; carry duet): issue 10 at T = 1 (39.6 us vs 25; the
# weights of 22 experts, ~68 MB, take ~17.5 us at duet's copy speed): ncu --set full on both
# GEMMs of auto's R form (r8p4: GEMM1 _ff_q, K = 1024, 924 blocks; GEMM2 _ff_o, K = 2688, 352
# blocks), then the moe_t1 preset twice (v2, v3 / v4's pick).
cd "$(dirname "$0")/../.."
scripts/device-session.sh
. scripts/calls/lib.sh
export DUET_MOE_VERSIONS=v3
run ncu-moe-t1 200 "$ncu" --clock-control none -k "regex:^moe_gemm_r8p4_ff_" -s 2 -c 2 --set full \
    --import-source no --csv --page details "$B/duet" bench --backend gpu --no-resources \
    --shape moe_t1 --out /tmp/ncu_bench.json
for i in 1 2; do
    run "bench-moe-t1-$i" 120 "$B/duet" bench --backend gpu --no-resources --shape moe_t1 \
        --out "$OUT/bench_moe_t1_$i.json"
done
unset DUET_MOE_VERSIONS
pack
