#!/usr/bin/env bash
# Session 35, call 3 (prepared without a device; after s35c1 / s35c2): a second T = 4096 run of
# both xw pairs next to v4, then ncu source counters of the e form's GEMM1 (xw192e_ff_q: how
# the epilogue's share of the samples moved from session 34's 27.6% on xw192).
# Build here first: scripts/devbin-quick.sh "gpu_moe gpu_index64" "moe" (6.6 MB); carry [".devbin.tar.xz"].
cd "$(dirname "$0")/../.."
scripts/device-session.sh
. scripts/calls/lib.sh
DUET_MOE_VERSIONS="v4_xw192/v4_xw192t3,v4_xw192e/v4_xw192t3e,v4" run bench-moe-4096-2 150 \
    "$B/duet" bench --backend gpu --no-resources --shape moe_t4096 --out "$OUT/bench_moe_4096_2.json"
DUET_MOE_VERSIONS="v4_xw192e/v4_xw192t3e" ncu_src_moe xw192e_ff_q
pack
