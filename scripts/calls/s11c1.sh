#!/usr/bin/env bash
# Next session, device call 1 (written at the end of session 10, whose device time ran out):
# the test binaries of the kernel files that gained DUET_PDL_ENTRY / DUET_PDL_DEFERRED in
# session 10 and have not run their own tests since (the macros are no-ops without
# programmatic edges; the engine's use of these kernels passed gpu_model in calls 4 and 5):
#  - gpu_router (router_v3's new barrier; every router version), mamba_conv1d, gpu_ssu (164 s
#    in session 10 call 2), gpu_model (the review's bias-argument helper, host side)
cd "$(dirname "$0")/../.."
scripts/device-session.sh t:gpu_model:30 t:gpu_router:120 t:mamba_conv1d:120 t:gpu_ssu:240
cd "$OUT" && ls | grep -v -E '^(all.tgz|summary.txt)$' | xargs rm -rf
