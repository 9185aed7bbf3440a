#!/usr/bin/env bash
# Session 6, device call 9 (final): router tests and check with auto = v9, the router presets
# (v4 / v7 / v9 / v10) and the PyTorch chains in one run, the super decode with auto = v9.
cd "$(dirname "$0")/../.."
export DUET_ROUTER_BENCH_VERSIONS=v4,v7,v9,v10
scripts/device-session.sh t:gpu_router:300 chk:noaux_tc_router presets:router_t1,router_t64,router_t4096,router_t32768 torch e2esuper
cd $OUT && tar czf /tmp/all.tgz --exclude=all.tgz . && mv /tmp/all.tgz . && ls | grep -v -E '^(all.tgz|summary.txt)$' | xargs rm -rf
