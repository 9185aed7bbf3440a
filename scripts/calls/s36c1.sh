#!/usr/bin/env bash
# Session 36, call 1 (prepared without a device: session 36 had none). SSD v5
# (`ssd5_fused_p64_n128`: v4 with the roles decoupled, pairwise named-barrier hand-overs instead
# of a block barrier a chunk; first run anywhere) and v5m (v5 with M in one bf16 pass, as
# mamba_ssm rounds it: its tolerance is the question). The sequential oracle first with a short limit
# (a wrong hand-over hangs: v5 has no block-wide barrier), then mamba_ssd's v2-v5 tests (hand
# cases, oracle, proptest; every case runs every version), the presets ssd_4k / ssd_50k (v2-v5
# side by side, one run), racecheck over the bf16 row of the case table (v4, v5, v5m next to v1-v3).
# Worst case 60 + 150 + 200 + 120 s of step limits.
# Build here first (with s35's MoE calls in the same carry):
#   scripts/devbin-quick.sh "gpu_moe gpu_index64 mamba_ssd" "moe ssd_chunk_scan"
# carry [".devbin.tar.xz"].
cd "$(dirname "$0")/../.."
scripts/device-session.sh
. scripts/calls/lib.sh
run ssd-oracle 60 $B/tests/mamba_ssd --ignored --test-threads 1 ssd_v2_matches_sequential_oracle
grep -h "test result\|FAILED\|panicked" $OUT/ssd-oracle.log | head -5 >> $OUT/summary.txt
if grep -q "^ssd-oracle rc=0 " $OUT/summary.txt; then
    run ssd-v2 150 $B/tests/mamba_ssd --ignored --test-threads 1 ssd_v2
    grep -h "test result\|FAILED\|panicked" $OUT/ssd-v2.log | head -20 >> $OUT/summary.txt
    run bench-ssd 200 "$B/duet" bench --backend gpu --no-resources --shape ssd_4k --shape ssd_50k \
        --out "$OUT/bench_ssd.json"
    python3 scripts/calls/ssd_summary.py "$OUT/bench_ssd.json" >> $OUT/summary.txt
    SAN_LIMIT=120 scripts/device-session.sh racecheck:ssd_chunk_scan/what=bf16
else
    # v5 / v5m failed or hung (a hang would stall every later step): v4 (refactored with v5)
    # and the others only, then stop.
    echo "ssd-oracle failed: v2-v4 only" >> $OUT/summary.txt
    DUET_MAMBA_TEST_VERSIONS=v1,v1_small,tuned,v2,v3,v4,auto run ssd-v2-without-v5 150 \
        $B/tests/mamba_ssd --ignored --test-threads 1 ssd_v2
    grep -h "test result\|FAILED\|panicked" $OUT/ssd-v2-without-v5.log | head -20 >> $OUT/summary.txt
fi
pack
