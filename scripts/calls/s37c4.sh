#!/usr/bin/env bash
# Session 37, prepared for the next session (no device time was left): SSD v7
# (`ssd7_fused_p64_n128`: v6 without the per-chunk LR / LS hand-overs, XFULL by half k % 6;
# protocol model `handover_model::ssd_v7`; first run anywhere). The sequential oracle under a
# short limit first (a hand-over gap hangs), then mamba_ssd's fused tests (every version),
# ssd_4k / ssd_50k twice (v6 = 2597-2606 us at 50k in session 37), ncu source counters on
# ssd7 (scripts: the role split by SASS address, gpu/NOTES.md session 37), racecheck on v7
# alone, v7 past 2^31; session 38 added v8 (v7 with a producer warp) to every step. Worst case
# 2 x 60 + 150 + 2 x 120 + 2 x (270 + 150 + 150) s; expected ~550 s.
# Build: scripts/devbin-quick.sh "mamba_ssd gpu_index64" "ssd_chunk_scan" (or session 38's
# larger carry for s38c1.sh, which serves both); carry [".devbin.tar.xz"].
cd "$(dirname "$0")/../.."
scripts/device-session.sh
. scripts/calls/lib.sh
ssd_oracle ssd-oracle v6,v7
ssd_oracle ssd-oracle8 v8
ok7=0 ok8=0
grep -q "^ssd-oracle rc=0 " $OUT/summary.txt && ok7=1
grep -q "^ssd-oracle8 rc=0 " $OUT/summary.txt && ok8=1
# (the v5 hand-over probe under racecheck: scripts/calls/s38c1.sh runs it, run that first)
if [ $ok7 = 1 ] || [ $ok8 = 1 ]; then
    VS=v2,v3,v4,v5,v6
    [ $ok7 = 1 ] && VS=$VS,v7
    [ $ok8 = 1 ] && VS=$VS,v8
    run ssd-v2 150 env DUET_MAMBA_TEST_VERSIONS=$VS $B/tests/mamba_ssd --ignored --test-threads 1 ssd_v2
    grep -h "test result\|FAILED\|panicked" $OUT/ssd-v2.log | head -20 >> $OUT/summary.txt
    for i in 1 2; do
        run "bench-ssd-$i" 120 env DUET_SSD_BENCH_VERSIONS=$VS "$B/duet" bench --backend gpu \
            --no-resources --shape ssd_4k --shape ssd_50k --out "$OUT/bench_ssd_$i.json"
        python3 scripts/calls/ssd_summary.py "$OUT/bench_ssd_$i.json" | sed "s/^/run $i /" >> $OUT/summary.txt
    done
fi
for v in 7 8; do
    eval ok=\$ok$v
    if [ "$ok" != 1 ]; then
        echo "v$v: the oracle failed or hung, not run further" >> $OUT/summary.txt
        continue
    fi
    [ $v = 8 ] && export ROLES=rows1,rows0,state,producer
    export DUET_SSD_BENCH_VERSIONS=v$v  # the bench under ncu runs this version alone
    ncu_ssd ssd${v}_fused_p64_n128
    unset ROLES DUET_SSD_BENCH_VERSIONS
    run racecheck-v$v 150 env DUET_MAMBA_TEST_VERSIONS=v$v compute-sanitizer --tool racecheck \
        --print-limit 10 $B/tests/mamba_ssd --ignored --test-threads 1 ssd_v2_matches_sequential_oracle
    grep -h "RACECHECK SUMMARY\|test result" $OUT/racecheck-v$v.log | sed "s/^/v$v /" >> $OUT/summary.txt
    run index64-ssd$v 150 $B/tests/gpu_index64 --ignored --test-threads 1 --nocapture \
        ssd_chunk_scan_v${v}_past_2_pow_31
    grep -h "test result\|FAILED\|panicked" $OUT/index64-ssd$v.log | head -5 | sed "s/^/v$v /" >> $OUT/summary.txt
done
pack
