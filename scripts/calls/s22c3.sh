#!/usr/bin/env bash
# Session 22, device call 3: SSD v4 with every named-barrier id an immediate (session 19 passed
# 1 + lh / 3 + lh in a register and racecheck reported the xch hand-over): mamba_ssd's v2 / v3 /
# v4 tests, racecheck and synccheck over the bf16 row of ssd_chunk_scan, the SSD presets; then
# the MoE GEMM past 2^31 on the wgmma forms.
cd "$(dirname "$0")/../.."
SAN_LIMIT=150 scripts/device-session.sh t:mamba_ssd:150:ssd_v2 \
    racecheck:ssd_chunk_scan/what=bf16 synccheck:ssd_chunk_scan/what=bf16
. scripts/calls/lib.sh
run bench-ssd-1 100 "$B/duet" bench --backend gpu --shape ssd_4k --shape ssd_50k \
    --out "$OUT/bench_ssd_1.json"
pack
