#!/usr/bin/env bash
# Session 13, device call 2. Call 1: the tensor-core slot GEMV (mma*) passed its tests (f64
# bound, vs the default, past 2^31) and memcheck / racecheck; moe_slots_t1 up / down / chain
# mma1 12.84 / 16.24 / 41.39 us (xs3 25.99 / 29.46 / 62.76); fused super engine xs3m 1.1951 /
# 1.1701 ms, mma (down on mma4_relu) 1.1182 ms (1.568x the floor). The engine and the model path
# differed (2.2e-6) because the fused down ran mma4 (K over four warps) and the unfused mma1.
# Since then: the fused down on mma1_relu (the unfused path's bits), D = 3 / 4 / 6 steps in
# flight (mma1d*), x staged in one pass of loads. Here: gpu_model, memcheck over the mma tests,
# moe_slots_t1, the fused super engine on xs3m and three mma pairs.
cd "$(dirname "$0")/../.."
SAN_LIMIT=120 scripts/device-session.sh t:gpu_model:150 \
    tsan:memcheck:gpu_model:slot_gemv_mma
DUET_SLOT_VARIANTS=model_gemv1_slots_nvfp4w_xs3,model_gemv1_slots_nvfp4w_xs4r2_relu,model_gemv1_slots_nvfp4w_mma1,model_gemv1_slots_nvfp4w_mma1_relu,model_gemv1_slots_nvfp4w_mma1d3,model_gemv1_slots_nvfp4w_mma1d3_relu,model_gemv1_slots_nvfp4w_mma1d4,model_gemv1_slots_nvfp4w_mma1d4_relu,model_gemv1_slots_nvfp4w_mma1d6,model_gemv1_slots_nvfp4w_mma1d6_relu \
    PRESETS_LIMIT=90 scripts/device-session.sh presets:moe_slots_t1
SLOT_KERNEL=xs3m E2E_STEPS=24 E2E_SUPER_LIMIT=100 scripts/device-session.sh e2esuper16gfs
for pair in mma1:mma1_relu mma1:mma1d6_relu mma1d3:mma1d4_relu; do
    DUET_SLOT_MMA_UP=model_gemv1_slots_nvfp4w_${pair%%:*} \
        DUET_SLOT_MMA_DOWN=model_gemv1_slots_nvfp4w_${pair#*:} \
        SLOT_KERNEL=mma E2E_STEPS=24 E2E_SUPER_LIMIT=100 scripts/device-session.sh e2esuper16gfs
    echo "^ pair $pair" >>"$OUT/e2e-super-bf16-graphs-fused-slots-mma.log"
done
cd "$OUT" && tar -czf /tmp/all2.tgz --exclude=all.tgz . && mv /tmp/all2.tgz all.tgz
ls | grep -v -E '^(all.tgz|summary.txt)$' | xargs rm -rf
