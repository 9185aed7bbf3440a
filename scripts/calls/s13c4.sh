#!/usr/bin/env bash
# Session 13, device call 4. Call 3: the fused down GEMV + slot mix passes (bits of the
# unfused pair; memcheck / racecheck clean); the fused super engine on mma 1.0806 / 1.0891 ms
# (xs3m 1.1581): the mix fusion moved nothing beyond the spread. ncu on one engine step:
# the one-warp down GEMV (+ mix) 27.1 us against the up GEMV's 16.1 for the same bytes (1408
# warps of 21 steps, 10.7 an SM). Since then: eight-warp forms (K over two / four warps:
# _mma2w8, _mma4w8), the fused down on _mma2w8_relu, and `mma` is the default slot form.
# Here: gpu_model, memcheck / racecheck, moe_slots_t1, the fused super engine on the defaults
# (twice), with the down GEMV on _mma1_relu and _mma4w8_relu, and on xs3m; the tiny goldens
# through the decode engine.
cd "$(dirname "$0")/../.."
SAN_LIMIT=120 scripts/device-session.sh t:gpu_model:150 \
    tsan:memcheck:gpu_model:slot_down_mix,slot_gemv_mma \
    tsan:racecheck:gpu_model:slot_down_mix e2eengine
DUET_SLOT_VARIANTS=model_gemv1_slots_nvfp4w_xs3,model_gemv1_slots_nvfp4w_mma1,model_gemv1_slots_nvfp4w_mma1_relu,model_gemv1_slots_nvfp4w_mma2w8,model_gemv1_slots_nvfp4w_mma2w8_relu,model_gemv1_slots_nvfp4w_mma4w8,model_gemv1_slots_nvfp4w_mma4w8_relu \
    PRESETS_LIMIT=90 scripts/device-session.sh presets:moe_slots_t1
E2E_STEPS=24 E2E_SUPER_LIMIT=100 scripts/device-session.sh e2esuper16gf
for down in mma1_relu mma4w8_relu; do
    DUET_SLOT_MMA_DOWN=model_gemv1_slots_nvfp4w_$down SLOT_KERNEL=mma E2E_STEPS=24 \
        E2E_SUPER_LIMIT=100 scripts/device-session.sh e2esuper16gfs
    echo "^ down $down" >>"$OUT/e2e-super-bf16-graphs-fused-slots-mma.log"
done
SLOT_KERNEL=xs3m E2E_STEPS=24 E2E_SUPER_LIMIT=100 scripts/device-session.sh e2esuper16gfs
E2E_STEPS=24 E2E_SUPER_LIMIT=100 scripts/device-session.sh e2esuper16gf
cd "$OUT" && tar -czf /tmp/all2.tgz --exclude=all.tgz . && mv /tmp/all2.tgz all.tgz
ls | grep -v -E '^(all.tgz|summary.txt)$' | xargs rm -rf
