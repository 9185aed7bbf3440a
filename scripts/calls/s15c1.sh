#!/usr/bin/env bash
# Session 15, device call 1: router v11 / v12 (issue 4, T = 32768 target 30 us). gpu_router
# (every version incl. v11 / v12 on every case, the 9001-token walk, v11's sigmoid over all 2^32
# inputs in tanh and exp mode), the router presets v9 / v11 / v12 twice, ncu --set full on one
# launch of each at T = 32768.
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
        --shape router_t4096 --shape router_t32768 --versions v9,v11,v12 --out "$OUT/bench_router_$i.json"
done
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
for v in v9 v11 v12; do
    run "ncu-router-$v" 150 "$ncu" --clock-control none -k "regex:^router_${v}_n16_k22" -c 1 --set full \
        --import-source no --csv --page details "$B/duet" bench --backend gpu --shape router_t32768 \
        --versions "$v" --out /tmp/ncu_bench.json
done
cd "$OUT" && tar -czf /tmp/all2.tgz --exclude=all.tgz . && mv /tmp/all2.tgz all.tgz
ls | grep -v -E '^(all.tgz|summary.txt)$' | xargs rm -rf
