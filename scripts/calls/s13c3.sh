#!/usr/bin/env bash
# Session 13, device call 3. Call 2: moe_slots_t1 mma1 up / down / chain 11.92 / 13.09 / 38.42
# us with the one-pass staging (D = 3 / 4 / 6 slower); fused super engine xs3m 1.1582 ms, mma
# 1.0801 / 1.0861 / 1.0851 (1.514x the floor; target 1.5x). Since then: the fused down GEMV
# adds the slot mix in its last block per column group (no model_mix_slots launch; its bits).
# Here: gpu_model (slot_down_mix_gives_the_unfused_bits), memcheck / racecheck over it, the
# fused engine on mma (twice) and xs3m, one engine step under ncu on mma.
cd "$(dirname "$0")/../.."
SAN_LIMIT=120 scripts/device-session.sh t:gpu_model:150 \
    tsan:memcheck:gpu_model:slot_down_mix,slot_gemv_mma \
    tsan:racecheck:gpu_model:slot_down_mix
for sk in mma xs3m mma; do
    SLOT_KERNEL=$sk E2E_STEPS=24 E2E_SUPER_LIMIT=100 scripts/device-session.sh e2esuper16gfs
done
DUET_KERNEL_CACHE=$PWD/.devbin/kcache timeout 300 .devbin/duet profile engine-step \
    --e2e "--preset super --pattern MEMEMEM*E --experts nvfp4 --weights bf16 --gpu-weights compact --engine-graphs --engine-fuse --slot-kernel mma --compare gpu --bench-decode 3 --tokens 3 --mtp-pattern=" \
    >"$OUT/ncu-engine-step-mma.log" 2>&1
echo "ncu-engine-step-mma rc=$?" >>"$OUT/summary.txt"
cd "$OUT" && tar -czf /tmp/all2.tgz --exclude=all.tgz . && mv /tmp/all2.tgz all.tgz
ls | grep -v -E '^(all.tgz|summary.txt)$' | xargs rm -rf
