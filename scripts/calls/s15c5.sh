#!/usr/bin/env bash
# Session 15, device call 5: the committed router (v12's constant-cache warm-up only in v12):
# gpu_router and the presets twice; then, for issue 10's next step, ncu on the v3 MoE grouped
# GEMMs at T = 64 (r8p4: GEMM1 and GEMM2, --set full, and their source counters with stall
# reasons).
cd "$(dirname "$0")/../.."
scripts/device-session.sh t:gpu_router:400
B=.devbin
export DUET_KERNEL_CACHE="$PWD/.devbin/kcache" DUET_OUT="$OUT"
run() { # name limit cmd...
    local name=$1 lim=$2 t0=$SECONDS
    shift 2
    timeout "$lim" "$@" >>"$OUT/$name.log" 2>&1
    echo "$name rc=$? ${lim}s-limit took=$((SECONDS - t0))s :: $*" | tee -a "$OUT/summary.txt"
}
for i in 1 2; do
    run "bench-router-$i" 150 "$B/duet" bench --backend gpu --shape router_t1 --shape router_t64 \
        --shape router_t4096 --shape router_t32768 --versions v9,v11,v12 --out "$OUT/bench_router_$i.json"
done
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
export DUET_MOE_VERSIONS=v3_r8p4
run bench-moe-t64 200 "$B/duet" bench --backend gpu --shape moe_t64 --out "$OUT/bench_moe_t64.json"
run ncu-moe-r8p4 200 "$ncu" --clock-control none -k "regex:^moe_gemm_r8p4" -c 2 --set full \
    --import-source no --csv --page details "$B/duet" bench --backend gpu --shape moe_t64 \
    --out /tmp/ncu_bench.json
run ncu-src-moe-r8p4 200 "$ncu" --clock-control none -k "regex:^moe_gemm_r8p4" -c 2 \
    --section SourceCounters --section WarpStateStats --import-source yes -o /tmp/m8 "$B/duet" bench \
    --backend gpu --shape moe_t64 --out /tmp/ncu_bench.json
run ncu-src-moe-r8p4-csv 60 "$ncu" --import /tmp/m8.ncu-rep --page source --csv --print-source sass
cd "$OUT" && tar -czf /tmp/all2.tgz --exclude=all.tgz . && mv /tmp/all2.tgz all.tgz
ls | grep -v -E '^(all.tgz|summary.txt)$' | xargs rm -rf
