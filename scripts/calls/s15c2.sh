#!/usr/bin/env bash
# Session 15, device call 2: router v12 with four-way partial sums (the NaN screen and the probe
# masks), v13 (v12 at 5 blocks a SM, 48 registers). gpu_router (v13 in the 9001-token walk),
# the presets v9 / v11 / v12 / v13 twice, ncu --set full on v13, ncu source counters (per SASS
# instruction: executions and stall samples) on v12.
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
    run "bench-router-$i" 120 "$B/duet" bench --backend gpu --shape router_t1 --shape router_t64 \
        --shape router_t4096 --shape router_t32768 --versions v9,v11,v12,v13 --out "$OUT/bench_router_$i.json"
done
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
run ncu-router-v13 150 "$ncu" --clock-control none -k "regex:^router_v13_n16_k22" -c 1 --set full \
    --import-source no --csv --page details "$B/duet" bench --backend gpu --shape router_t32768 \
    --versions v13 --out /tmp/ncu_bench.json
run ncu-src-v12 150 "$ncu" --clock-control none -k "regex:^router_v12_n16_k22" -c 1 \
    --section SourceCounters --section WarpStateStats --import-source yes -o /tmp/r12 "$B/duet" bench \
    --backend gpu --shape router_t32768 --versions v12 --out /tmp/ncu_bench.json
run ncu-src-v12-csv 60 "$ncu" --import /tmp/r12.ncu-rep --page source --csv --print-source sass
run ncu-src-v12-details 60 "$ncu" --import /tmp/r12.ncu-rep --page details --csv
cd "$OUT" && tar -czf /tmp/all2.tgz --exclude=all.tgz . && mv /tmp/all2.tgz all.tgz
ls | grep -v -E '^(all.tgz|summary.txt)$' | xargs rm -rf
