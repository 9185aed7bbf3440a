#!/usr/bin/env bash
# Session 37, call 7 (the device's 7th call of the session). The SSD stage loads' thread map
# (SSD_LOAD_MAP, gpu/kernels/ssd_chunk_scan.cu ssd3_load_map; picked per run with
# DUET_NVRTC_DEFINES): ncu on ssd5 at ssd_4k (call 5) counted 2x the ideal L2 sectors on the
# cp.async loads of C / B / x and L2 at 73 % of its throughput. Maps 1 and 2 make each
# quarter-warp read whole sectors. mamba_ssd's fused tests under each map (correctness: the
# map only moves which thread copies which 16 bytes), the ssd presets twice under each, ncu on
# ssd5 under map 1, racecheck over the MoE xw e forms. Worst case 3 x 150 + 6 x 120 + 200 + 210
# s of step limits; expected ~300 s.
# Build: scripts/devbin-quick.sh "mamba_ssd gpu_moe" "moe ssd_chunk_scan", then ssd_chunk_scan
# under SSD_LOAD_MAP=1 and 2 into .devbin/kcache (DUET_NVRTC_DEFINES, DUET_COMPILE_ONLY), tar
# again; carry [".devbin.tar.xz"] (8.6 MB).
cd "$(dirname "$0")/../.."
scripts/device-session.sh
. scripts/calls/lib.sh
for m in 0 1 2; do
    run "ssd-v2-m$m" 150 env DUET_NVRTC_DEFINES=SSD_LOAD_MAP=$m $B/tests/mamba_ssd --ignored \
        --test-threads 1 ssd_v2
    grep -h "test result\|FAILED\|panicked" "$OUT/ssd-v2-m$m.log" | head -5 | sed "s/^/m$m /" >> $OUT/summary.txt
done
for i in 1 2; do
    for m in 0 1 2; do
        run "bench-ssd-m$m-$i" 120 env DUET_NVRTC_DEFINES=SSD_LOAD_MAP=$m "$B/duet" bench --backend gpu \
            --no-resources --shape ssd_4k --shape ssd_50k --out "$OUT/bench_ssd_m${m}_$i.json"
        python3 scripts/calls/ssd_summary.py "$OUT/bench_ssd_m${m}_$i.json" | sed "s/^/m$m run $i /" >> $OUT/summary.txt
    done
done
# MoE: racecheck over the e forms alone (call 2's report, print limit 20, showed only
# moe_gemm_xw192_ff_q's sites: 1159 errors over the four forms).
run racecheck-xwe 200 env DUET_MOE_TEST_VERSIONS=v4_xw192e,v4_xw192t3e compute-sanitizer --tool racecheck \
    --print-limit 20 $B/tests/gpu_moe --ignored --test-threads 1 bit_exact_on_exact_sums
grep -h "test result\|FAILED\|panicked\|RACECHECK SUMMARY" $OUT/racecheck-xwe.log | head -5 >> $OUT/summary.txt
grep -h "Race reported" $OUT/racecheck-xwe.log | sed 's/ at 0x.*//; s/+0x[0-9a-f]*//g' | sort | uniq -c | head -5 >> $OUT/summary.txt
export DUET_NVRTC_DEFINES=SSD_LOAD_MAP=1
ncu_ssd ssd5_fused_p64_n128
unset DUET_NVRTC_DEFINES
# (gpu_model left out: with every kernel file precompiled the carry passes 64 MiB.)
pack
