#!/usr/bin/env bash
# Session 6, device call 9 (final): router tests with auto = v9; the model tests and the tiny
# goldens with the direct decode SSU path; the router presets (v4 / v7 / v9 / v10); the super
# decode (auto router v9, direct decode SSU).
cd "$(dirname "$0")/../.."
export DUET_ROUTER_BENCH_VERSIONS=v4,v7,v9,v10
scripts/device-session.sh t:gpu_router:300 t:gpu_model:200+e2e presets:router_t1,router_t64,router_t4096,router_t32768 e2esuper
cd $OUT && tar czf /tmp/all.tgz --exclude=all.tgz . && mv /tmp/all.tgz . && ls | grep -v -E '^(all.tgz|summary.txt)$' | xargs rm -rf
