#!/usr/bin/env bash
# Session 37, call 10: the final code (v5m removed, auto back to v3; the SSD kernels' SASS
# identical to call 9's). mamba_ssd's fused tests again (call 9's proptest stopped at v5m's
# failure, so v6 had not met every generated case), then the whole ssd_chunk_scan case table.
# Build: scripts/devbin-quick.sh "mamba_ssd" "ssd_chunk_scan"; carry [".devbin.tar.xz"].
cd "$(dirname "$0")/../.."
scripts/device-session.sh
. scripts/calls/lib.sh
run ssd-v2 150 $B/tests/mamba_ssd --ignored --test-threads 1 ssd_v2
grep -h "test result\|FAILED\|panicked" $OUT/ssd-v2.log | head -10 >> $OUT/summary.txt
run check-ssd 120 "$B/duet" check --backend gpu --op ssd_chunk_scan
grep -h "comparisons passed\|FAIL" $OUT/check-ssd.log | head -10 >> $OUT/summary.txt
pack
