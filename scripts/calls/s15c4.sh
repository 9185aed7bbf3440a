#!/usr/bin/env bash
# Session 15, device call 4: the final router build (v12 without the seed, FLO compaction, the
# constant cache warmed; v14 and v13 removed; auto = v9 / v11 / v12 by T). gpu_router, the
# presets v9 / v11 / v12 twice, and memcheck / racecheck / synccheck / initcheck over
# `duet check --op noaux_tc_router` (every version, every case).
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
SAN_LIMIT=150 scripts/device-session.sh memcheck:noaux_tc_router racecheck:noaux_tc_router \
    synccheck:noaux_tc_router initcheck:noaux_tc_router
cd "$OUT" && tar -czf /tmp/all2.tgz --exclude=all.tgz . && mv /tmp/all2.tgz all.tgz
ls | grep -v -E '^(all.tgz|summary.txt)$' | xargs rm -rf
