#!/usr/bin/env bash
# Session 6, device call 6: call 5's diagnostic bench (call 5 ran it before unpacking .devbin).
cd "$(dirname "$0")/../.."
[ -d .devbin ] || tar -xJf .devbin.tar.xz
export DUET_ROUTER_BENCH_VERSIONS=v7,v7p,v9,v9n,v10
timeout 100 .devbin/duet bench --backend gpu --shape router_t4096 --shape router_t32768 --out $OUT/bench_diag.json > $OUT/bench_diag.log 2>&1
echo "diag rc=$?" | tee -a $OUT/summary.txt
