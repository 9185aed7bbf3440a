#!/usr/bin/env bash
# Session 36, call 2 (prepared without a device; after s36c1 passed): SSD v5 past element 2^31
# (gpu_index64), synccheck and memcheck over the bf16 row of the case table (every version), and
# a second ssd_50k run (v2-v5 side by side). Same carry as s36c1.
cd "$(dirname "$0")/../.."
scripts/device-session.sh
. scripts/calls/lib.sh
run index64-ssd5 150 $B/tests/gpu_index64 --ignored --test-threads 1 --nocapture \
    ssd_chunk_scan_v5_past_2_pow_31
grep -h "test result\|FAILED\|panicked" $OUT/index64-ssd5.log | head -5 >> $OUT/summary.txt
SAN_LIMIT=120 scripts/device-session.sh synccheck:ssd_chunk_scan/what=bf16 \
    memcheck:ssd_chunk_scan/what=bf16
run bench-ssd-2 150 "$B/duet" bench --backend gpu --no-resources --shape ssd_50k \
    --out "$OUT/bench_ssd_2.json"
python3 scripts/calls/ssd_summary.py "$OUT/bench_ssd_2.json" >> $OUT/summary.txt
pack
