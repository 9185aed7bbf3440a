#!/usr/bin/env bash
# Session 10, device call 6: REFUSED (224 s of device time left, too little to start a machine);
# not run. What it would have run: the GPU tests of
# the files that gained DUET_PDL_ENTRY after call 2 and had not run since (the router's and
# the conv1d's own differential tests; router_v3's barrier), and gpu_model after the review's
# bias-argument helper. gpu_ssu (164 s in call 2) does not fit: the SSU kernels gained only
# the entry macro (a no-op without programmatic edges), and ssu_v6 runs in gpu_model's engine.
cd "$(dirname "$0")/../.."
scripts/device-session.sh t:gpu_model:30 t:gpu_router:70 t:mamba_conv1d:80
cd "$OUT" && ls | grep -v -E '^(all.tgz|summary.txt)$' | xargs rm -rf
