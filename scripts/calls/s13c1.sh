#!/usr/bin/env bash
# Session 13, device call 1. Session 12's last merges (moe.cu back to one table: call 3's
# PTX; the _xs* entries as one macro) get their first run (gpu_moe, gpu_model). New: the
# routed slots' GEMV on the tensor cores (model_gemv1_slots_nvfp4w_mma{1,2,4}[_relu]: E2M1
# decoded to f16 in registers, x as three f16 terms, mma.sync f16 -> f32): its tests against
# f64 dot products and the default (gpu_model), past 2^31 (gpu_index64), memcheck / racecheck,
# moe_slots_t1 next to xs3 / xs4r2, then the fused super engine on xs3m / mma / xs3m.
cd "$(dirname "$0")/../.."
SAN_LIMIT=120 scripts/device-session.sh t:gpu_moe:120 t:gpu_model:150 \
    t:gpu_index64:150:slot_gemv_past_2_pow_31 \
    tsan:memcheck:gpu_model:slot_gemv_mma_matches_the_default_on_engine_shapes \
    tsan:racecheck:gpu_model:slot_gemv_mma_matches_the_default_on_engine_shapes
DUET_SLOT_VARIANTS=model_gemv1_slots_nvfp4w_xs3,model_gemv1_slots_nvfp4w_xs3_relu,model_gemv1_slots_nvfp4w_xs4r2_relu,model_gemv1_slots_nvfp4w_mma1,model_gemv1_slots_nvfp4w_mma2,model_gemv1_slots_nvfp4w_mma4,model_gemv1_slots_nvfp4w_mma1_relu,model_gemv1_slots_nvfp4w_mma2_relu,model_gemv1_slots_nvfp4w_mma4_relu \
    PRESETS_LIMIT=90 scripts/device-session.sh presets:moe_slots_t1
for sk in xs3m mma xs3m; do
    SLOT_KERNEL=$sk E2E_STEPS=24 E2E_SUPER_LIMIT=100 scripts/device-session.sh e2esuper16gfs
done
cd "$OUT" && tar -czf /tmp/all2.tgz --exclude=all.tgz . && mv /tmp/all2.tgz all.tgz
ls | grep -v -E '^(all.tgz|summary.txt)$' | xargs rm -rf
