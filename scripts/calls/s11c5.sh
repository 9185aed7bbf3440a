#!/usr/bin/env bash
# Session 11, device call 5. Call 4: pipe chain 83.9 us vs the default's 67.2 (same bits), and
# ncu on the default slot GEMV: L1-bound (issue every 1.7 cycles, 1.3 eligible warps of 3.7;
# 36% excess global sectors: x read as four 16-byte loads 64 bytes apart per lane, the pairs
# as random 8-byte gathers). New: _xs / _xs3 (x lane-major and the pairs in shared memory per
# block), and the pipe without per-unit 64-bit divisions, with x and the pairs staged too.
#  - gpu_model, everything (slot_gemv_variants_give_the_chunk_bits: pipe and xs forms)
#  - moe_slots_t1: every slot variant
#  - ncu --set full over the first up and down launch of _xs and of _pipe
#  - the super decode bench, fused, 24 steps: default, --slot-kernel xs, xs3, pipe
cd "$(dirname "$0")/../.."
E2E_STEPS=24 E2E_SUPER_LIMIT=120 scripts/device-session.sh t:gpu_model:120 presets:moe_slots_t1 \
    e2esuper16gf
for sk in xs xs3 pipe; do
    SLOT_KERNEL=$sk E2E_STEPS=24 E2E_SUPER_LIMIT=120 scripts/device-session.sh e2esuper16gfs
done
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
for v in xs pipe; do
    DUET_SLOT_VARIANTS=model_gemv1_slots_nvfp4w_$v timeout 120 "$NCU" --clock-control none \
        -k "regex:^model_gemv1_slots_nvfp4w_$v\$" -c 2 --set full --csv --page details \
        .devbin/duet bench --backend gpu --shape moe_slots_t1 --out /tmp/ncu_slots.json \
        >"$OUT/ncu_slots_$v.csv" 2>"$OUT/ncu_slots_$v.err"
    echo "ncu $v rc=$?" >>"$OUT/summary.txt"
done
cd "$OUT" && tar -czf /tmp/all2.tgz --exclude=all.tgz . && mv /tmp/all2.tgz all.tgz
ls | grep -v -E '^(all.tgz|summary.txt)$' | xargs rm -rf
