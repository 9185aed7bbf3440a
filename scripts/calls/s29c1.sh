#!/usr/bin/env bash
# Session 29, call 1 (DEVBIN_KCACHE="selective_state_update bench_copy moe"; carry duet, gpu_ssu).
# Ordered so that the measurements come first and the sanitizers last (a call ends at 600 s):
#   1. gpu_ssu: the walk tests (session 28's interleaved walk, session 29's grouped walks g4 /
#      g16 over 26,624 tiles), v11 bit-exact, random shapes;
#   2. the grouped walks (64 / 256 KiB of consecutive tiles dealt round-robin) next to _i and
#      v11 at batch 256 and 64, twice;
#   3. the copy probes twice: v10's tile size (4 KiB .. 256 KiB) and occupancy, v10's order as
#      a copy with a separate source, bulk L2 prefetch ahead, and the graph launch floors;
#   4. ncu of auto's bf16 pick at batch 256 (c8_m3_s3_i) and of v11 at batch 1;
#   5. issue 10 at T = 1: ncu of both r8p4 GEMMs, the moe_t1 preset (kcache also: moe);
#   6. memcheck and racecheck over `ssu_v11_interleaved_walk_bit_exact` (session 28's leftover).
cd "$(dirname "$0")/../.."
scripts/device-session.sh t:gpu_ssu:180:ssu_v11_interleaved_walk_bit_exact,ssu_v11_grouped_walk_bit_exact,ssu_v11_bit_exact,ssu_random_shapes_every_mode
. scripts/calls/lib.sh
export DUET_SSU_ONLY=ssu_x11_bf16_c8_m3_s3_i,ssu_x11_bf16_c8_m3_s3_g4,ssu_x11_bf16_c8_m3_s3_g16,ssu_v11_bf16
export DUET_SSU_BATCH=256,64
for i in 1 2; do
    run "bench-ssu-g-$i" 150 "$B/duet" bench --backend gpu --no-resources --shape ssu_v11 \
        --out "$OUT/bench_ssu_g_$i.json"
done
unset DUET_SSU_ONLY DUET_SSU_BATCH
for i in 1 2; do
    run "bench-copy-$i" 150 "$B/duet" bench --backend gpu --no-resources --shape copy --out "$OUT/bench_copy_$i.json"
done
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
# Issue 10 at T = 1 (39.6 us vs 25; 22 experts' weights, ~68 MB, ~17.5 us at duet's copy speed):
# ncu on both GEMMs of auto's R form (r8p4: GEMM1 _ff_q, K = 1024, 924 blocks; GEMM2 _ff_o,
# K = 2688, 352 blocks), then the moe_t1 preset once (kcache: moe).
export DUET_MOE_VERSIONS=v3
run ncu-moe-t1 150 "$ncu" --clock-control none -k "regex:^moe_gemm_r8p4_ff_" -s 2 -c 2 --set full \
    --import-source no --csv --page details "$B/duet" bench --backend gpu --no-resources \
    --shape moe_t1 --out /tmp/ncu_bench.json
run bench-moe-t1 100 "$B/duet" bench --backend gpu --no-resources --shape moe_t1 --out "$OUT/bench_moe_t1.json"
unset DUET_MOE_VERSIONS
run memcheck-walk 150 compute-sanitizer --tool memcheck --error-exitcode 9 \
    "$B/tests/gpu_ssu" --ignored --test-threads=1 ssu_v11_interleaved_walk_bit_exact --nocapture
run racecheck-walk 200 compute-sanitizer --tool racecheck --error-exitcode 9 --print-limit 200 \
    "$B/tests/gpu_ssu" --ignored --test-threads=1 ssu_v11_interleaved_walk_bit_exact --nocapture
pack
