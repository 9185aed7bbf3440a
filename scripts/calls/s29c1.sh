#!/usr/bin/env bash
# Next session's first call (written in session 28, not yet run; DEVBIN_KCACHE="selective_state_update";
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
unset DUET_SSU_ONLY
pack
