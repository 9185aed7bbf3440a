# Sourced by the device-call scripts (scripts/calls/s*.sh) after a first
# scripts/device-session.sh step (which unpacks .devbin.tar.xz): the binaries, the kernel cache,
# and `run NAME LIMIT CMD...` (a timed step logged to $OUT/NAME.log and $OUT/summary.txt, like
# device-session.sh's own steps), and `pack` to end a call (every output into $OUT/all.tgz).
B=.devbin
export DUET_KERNEL_CACHE="$PWD/.devbin/kcache" DUET_OUT="$OUT"
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
run() { # name limit cmd...
    local name=$1 lim=$2 t0=$SECONDS
    shift 2
    timeout "$lim" "$@" >>"$OUT/$name.log" 2>&1
    echo "$name rc=$? ${lim}s-limit took=$((SECONDS - t0))s :: $*" | tee -a "$OUT/summary.txt"
}
# run_router_presets VERSIONS: the router presets at T = 1 / 64 / 4096 / 32768, twice.
run_router_presets() {
    local i
    for i in 1 2; do
        run "bench-router-$i" 150 "$B/duet" bench --backend gpu --shape router_t1 --shape router_t64 \
            --shape router_t4096 --shape router_t32768 --versions "$1" --out "$OUT/bench_router_$i.json"
    done
}
# ncu_router V: ncu --set full on one launch of router V (E = 512, k = 22) at T = 32768.
ncu_router() {
    run "ncu-router-$1" 150 "$ncu" --clock-control none -k "regex:^router_$1_n16_k22" -c 1 --set full \
        --import-source no --csv --page details "$B/duet" bench --backend gpu --shape router_t32768 \
        --versions "$1" --out /tmp/ncu_bench.json
}
# ncu_src_router V: ncu source counters (per SASS instruction: executions, stall samples) on one
# launch of router V at T = 32768, and their CSV (ncu-src-V-csv.log).
ncu_src_router() {
    run "ncu-src-$1" 150 "$ncu" --clock-control none -k "regex:^router_$1_n16_k22" -c 1 \
        --section SourceCounters --section WarpStateStats --import-source no -o "/tmp/r$1" \
        "$B/duet" bench --backend gpu --shape router_t32768 --versions "$1" --out /tmp/ncu_bench.json
    run "ncu-src-$1-csv" 60 "$ncu" --import "/tmp/r$1.ncu-rep" --page source --csv --print-source sass
}
# ncu_src_moe TAG [SHAPE]: ncu warp states, source counters, speed of light and occupancy of one
# launch of moe_gemm_TAG in the moe_t4096 preset (or SHAPE, e.g. moe_t64; DUET_MOE_VERSIONS
# picks the versions that run), its source CSV (ncu-src-TAG-csv.log) and details page
# (ncu-det-TAG.log).
ncu_src_moe() {
    run "ncu-src-$1" 200 "$ncu" --clock-control none -k "regex:^moe_gemm_$1\$" -c 1 \
        --section SourceCounters --section WarpStateStats --section SpeedOfLight --section Occupancy \
        --import-source no -o "/tmp/m$1" "$B/duet" bench --backend gpu --shape "${2:-moe_t4096}" \
        --out /tmp/ncu_bench.json
    run "ncu-src-$1-csv" 60 "$ncu" --import "/tmp/m$1.ncu-rep" --page source --csv --print-source sass
    run "ncu-det-$1" 60 "$ncu" --import "/tmp/m$1.ncu-rep" --page details --csv
}
# run_conv_presets: the Super conv1d prefill preset (every version), twice.
run_conv_presets() {
    local i
    for i in 1 2; do
        run "bench-conv-$i" 150 "$B/duet" bench --backend gpu --shape conv1d_prefill_50k \
            --out "$OUT/bench_conv_$i.json"
    done
}
# ncu_conv KERNEL: ncu (speed of light, memory, occupancy, warp states, launch) on one launch of
# the conv1d kernel KERNEL inside the conv1d_prefill_50k preset.
ncu_conv() {
    run "ncu-$1" 120 "$ncu" --clock-control none -k "regex:^$1" -c 1 --section SpeedOfLight \
        --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats \
        --section LaunchStats "$B/duet" bench --backend gpu --shape conv1d_prefill_50k \
        --out /tmp/ncu_bench.json
}
pack() {
    cd "$OUT" && tar -czf /tmp/all2.tgz --exclude=all.tgz . && mv /tmp/all2.tgz all.tgz
    ls | grep -v -E '^(all.tgz|summary.txt)$' | xargs rm -rf
}
# ncu_ssd2: ncu --set full, then the source counters (per SASS instruction: executions, stall
# samples; CSV in ncu-src-ssd2-csv.log) on one ssd2_fused launch in the ssd_4k preset.
ncu_ssd2() {
    run ncu-ssd2 120 "$ncu" --clock-control none -k "regex:^ssd2_fused" -c 1 --set full \
        --import-source no --csv --page details "$B/duet" bench --backend gpu --shape ssd_4k \
        --out /tmp/ncu_bench.json
    run ncu-src-ssd2 120 "$ncu" --clock-control none -k "regex:^ssd2_fused" -c 1 \
        --section SourceCounters --section WarpStateStats --import-source no -o /tmp/ssd2 \
        "$B/duet" bench --backend gpu --shape ssd_4k --out /tmp/ncu_bench.json
    run ncu-src-ssd2-csv 60 "$ncu" --import /tmp/ssd2.ncu-rep --page source --csv --print-source sass
}
# ncu_ssd K: ncu warp states, source counters, speed of light and occupancy on one launch of
# the fused SSD kernel K (e.g. ssd5_fused_p64_n128) in the ssd_4k preset, its source CSV
# (ncu-src-K-csv.log) and details page (ncu-det-K.log).
ncu_ssd() {
    run "ncu-src-$1" 150 "$ncu" --clock-control none -k "regex:^$1\$" -c 1 \
        --section SourceCounters --section WarpStateStats --section SpeedOfLight --section Occupancy \
        --import-source no -o "/tmp/s$1" "$B/duet" bench --backend gpu --no-resources --shape ssd_4k \
        --out /tmp/ncu_bench.json
    run "ncu-src-$1-csv" 60 "$ncu" --import "/tmp/s$1.ncu-rep" --page source --csv --print-source sass
    run "ncu-det-$1" 60 "$ncu" --import "/tmp/s$1.ncu-rep" --page details --csv
    # the stall split by role (fused SSD kernels v5-v7: row warpgroup 1, row warpgroup 0, state;
    # v8: then the producer warpgroup; ROLES overrides)
    python3 tools/ncu_roles.py "$OUT/ncu-src-$1-csv.log" "${ROLES:-rows1,rows0,state}" | sed "s/^/$1 /" >> "$OUT/summary.txt"
}
# ssd_oracle NAME VERSIONS: mamba_ssd's sequential-oracle test on those fused versions under a
# 60 s limit (a hand-over gap hangs rather than fails), logged as NAME, its result lines into the
# summary; `grep -q "^NAME rc=0 " $OUT/summary.txt` tells whether they passed.
ssd_oracle() {
    run "$1" 60 env DUET_MAMBA_TEST_VERSIONS="$2" $B/tests/mamba_ssd --ignored --test-threads 1 \
        ssd_v2_matches_sequential_oracle
    grep -h "test result\|FAILED\|panicked" "$OUT/$1.log" | head -5 | sed "s/^/$1 /" >> $OUT/summary.txt
}
