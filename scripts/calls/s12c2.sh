#!/usr/bin/env bash
# Session 12, device call 2. Call 1: gpu_model 18 / gpu_moe 10 passed (v1_w64 gives the same
# outputs), memcheck / racecheck over the slot variants clean, moe_slots_t1: _xs4r2 down 28.50 us
# vs _xs3 29.39 (up 27.42 vs 25.99); v1_w64 3054 / 10389 us a layer at T = 64 / 4096 (v2 1021,
# v1 8255). Since then:
#  - v1_w64 with two shared-memory buffers (the next tile stored while the wgmma's run) and a
#    conflict-free store mapping: gpu_moe, then moe_t64 / moe_t4096
#  - _xs4r2_relu and the slot form xs3m (up _xs3, fused down _xs4r2_relu): gpu_model's bit
#    test, moe_slots_t1, then the fused super engine on xs3 and xs3m in the same run
#  - slot_gemv_past_2_pow_31 with its precondition fixed
#  - SSU v10 and the small-batch sweep (8 rows a block, loads before the prologue, z / D with
#    them): the batch-1 sweep and ssu_b1_bf16 (bit tests: gpu_ssu in the next call)
cd "$(dirname "$0")/../.."
scripts/device-session.sh t:gpu_moe:120 t:gpu_model:120 t:gpu_index64:150:slot_gemv_past_2_pow_31 \
    presets:ssu_sweep_all_b1_bf16,ssu_b1_bf16 presets:moe_t64,moe_t4096
DUET_SLOT_VARIANTS=model_gemv1_slots_nvfp4w_xs3,model_gemv1_slots_nvfp4w_xs3_relu,model_gemv1_slots_nvfp4w_xs4r2,model_gemv1_slots_nvfp4w_xs4r2_relu \
    PRESETS_LIMIT=90 scripts/device-session.sh presets:moe_slots_t1
for sk in xs3 xs3m; do
    SLOT_KERNEL=$sk E2E_STEPS=24 E2E_SUPER_LIMIT=100 scripts/device-session.sh e2esuper16gfs
done
cd "$OUT" && tar -czf /tmp/all2.tgz --exclude=all.tgz . && mv /tmp/all2.tgz all.tgz
ls | grep -v -E '^(all.tgz|summary.txt)$' | xargs rm -rf
