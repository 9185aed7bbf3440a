#!/usr/bin/env bash
# Session 15, device call 3: router v14 (a thread per token) and v12 with a seeded first guess.
# gpu_router (every version incl. v14 on every f32 case, the walk with NaN / all-equal rows),
# the presets v9 / v11 / v12 / v14 twice, ncu --set full on one v14 launch at T = 32768.
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
        --shape router_t4096 --shape router_t32768 --versions v9,v11,v12,v14 --out "$OUT/bench_router_$i.json"
done
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
run ncu-router-v14 150 "$ncu" --clock-control none -k "regex:^router_v14_n16_k22" -c 1 --set full \
    --import-source no --csv --page details "$B/duet" bench --backend gpu --shape router_t32768 \
    --versions v14 --out /tmp/ncu_bench.json
cd "$OUT" && tar -czf /tmp/all2.tgz --exclude=all.tgz . && mv /tmp/all2.tgz all.tgz
ls | grep -v -E '^(all.tgz|summary.txt)$' | xargs rm -rf
