#!/usr/bin/env bash
# Session 6, device call 5: which of v8-v10's changes slows them at T = 32768 (diagnostic
# variants v9n: plain fmaxf; v7p: v7 + 16 KB shared memory); sanitizers over the router.
cd "$(dirname "$0")/../.."
export DUET_ROUTER_BENCH_VERSIONS=v7,v7p,v9,v9n,v10
timeout 100 .devbin/duet bench --backend gpu --shape router_t4096 --shape router_t32768 --out $OUT/bench_diag.json > $OUT/bench_diag.log 2>&1
echo "diag rc=$?" >> $OUT/summary.txt
unset DUET_ROUTER_BENCH_VERSIONS
S=scripts/device-session.sh
$S memcheck:noaux_tc_router racecheck:noaux_tc_router initcheck:noaux_tc_router synccheck:noaux_tc_router
cd $OUT && tar czf /tmp/all.tgz --exclude=all.tgz . && mv /tmp/all.tgz . && ls | grep -v -E '^(all.tgz|summary.txt)$' | xargs rm -rf
