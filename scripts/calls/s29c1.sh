#!/usr/bin/env bash
# Session 29, call 1 (written in session 28; DEVBIN_KCACHE="selective_state_update bench_copy";
# carry duet, gpu_ssu): the sanitizers session 28 had no budget left for: memcheck and racecheck
# over `ssu_v11_interleaved_walk_bit_exact` (the only test whose shapes reach the round-robin part
# of v11's walk: 5,120 tiles, every state type on v11, every bf16 sweep form), then ncu on one
# launch of auto's bf16 pick at batch 256 (DRAM throughput, eligible warps: what is left of the
# 3.5% to duet's copy).
cd "$(dirname "$0")/../.."
scripts/device-session.sh t:gpu_ssu:120:ssu_v11_interleaved_walk_bit_exact,ssu_v11_bit_exact,ssu_random_shapes_every_mode
. scripts/calls/lib.sh
run memcheck-walk 200 compute-sanitizer --tool memcheck --error-exitcode 9 \
    "$B/tests/gpu_ssu" --ignored --test-threads=1 ssu_v11_interleaved_walk_bit_exact --nocapture
run racecheck-walk 300 compute-sanitizer --tool racecheck --error-exitcode 9 --print-limit 200 \
    "$B/tests/gpu_ssu" --ignored --test-threads=1 ssu_v11_interleaved_walk_bit_exact --nocapture
export DUET_SSU_ONLY=ssu_x11_bf16_c8_m3_s3_i
run ncu-c8s3i 150 "$ncu" --clock-control none -k "regex:^ssu_x11_bf16_c8_m3_s3_i$" -c 1 --set full \
    --import-source no --csv --page details "$B/duet" bench --backend gpu --no-resources \
    --shape ssu_v11_b256 --out /tmp/ncu_bench.json
# Batch 1 (4.7 us a launch in a graph vs the 4 us target): how long is the kernel itself, and
# what do its warps wait on (v11, the 6th launch: past the warm-up)?
export DUET_SSU_ONLY=ssu_v11_bf16 DUET_SSU_BATCH=1
run ncu-v11-b1 150 "$ncu" --clock-control none -k "regex:^ssu_v11_bf16$" -s 5 -c 1 --set full \
    --import-source no --csv --page details "$B/duet" bench --backend gpu --no-resources \
    --shape ssu_v11 --out /tmp/ncu_bench.json
unset DUET_SSU_ONLY DUET_SSU_BATCH
# Session 29: v10's tile size (4 KiB .. 256 KiB) and occupancy swept, and v10's order as a
# copy with a separate source (copy_v11-v15), twice: is there an SM pattern nearer the copy
# engines' ~4.2 TB/s?
for i in 1 2; do
    run "bench-copy-$i" 150 "$B/duet" bench --backend gpu --no-resources --shape copy --out "$OUT/bench_copy_$i.json"
done
pack
