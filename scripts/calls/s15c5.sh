#!/usr/bin/env bash
# Session 15, device call 5: the router with v13 (v12 ranking its candidates by counting, a
# bench variant) and v12's constant-cache warm-up only in v12:
# gpu_router and the presets twice; then, for issue 10's next step, ncu on the v3 MoE grouped
# GEMMs at T = 64 (r8p4: GEMM1 and GEMM2, --set full, and their source counters with stall
# reasons).
cd "$(dirname "$0")/../.."
scripts/device-session.sh t:gpu_router:400
. scripts/calls/lib.sh
run_router_presets v9,v11,v12,v13
ncu_router v13
export DUET_MOE_VERSIONS=v3_r8p4
run bench-moe-t64 200 "$B/duet" bench --backend gpu --shape moe_t64 --out "$OUT/bench_moe_t64.json"
run ncu-moe-r8p4 200 "$ncu" --clock-control none -k "regex:^moe_gemm_r8p4" -c 2 --set full \
    --import-source no --csv --page details "$B/duet" bench --backend gpu --shape moe_t64 \
    --out /tmp/ncu_bench.json
run ncu-src-moe-r8p4 200 "$ncu" --clock-control none -k "regex:^moe_gemm_r8p4" -c 2 \
    --section SourceCounters --section WarpStateStats --import-source yes -o /tmp/m8 "$B/duet" bench \
    --backend gpu --shape moe_t64 --out /tmp/ncu_bench.json
run ncu-src-moe-r8p4-csv 60 "$ncu" --import /tmp/m8.ncu-rep --page source --csv --print-source sass
pack
