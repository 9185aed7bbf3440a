#!/usr/bin/env bash
# Session 11, device call 7 (short: ~460 s of device time left). Call 6: the fused engine on
# the new default slot kernel (xs3) took 1.2259 ms, against call 5's 1.1957 (xs3) / 1.1996
# (chunk) on another machine: the engine's difference is under the run-to-run spread.
#  - moe_slots_t1 on the default, _relu, _xs3, _xs3_relu and the new _xs3_t16 (16-entry
#    signed table; bits checked against the default by the bench)
#  - the fused super decode bench, 24 steps, chunk and xs3 in the same run
cd "$(dirname "$0")/../.."
DUET_SLOT_VARIANTS=model_gemv1_slots_nvfp4w_relu,model_gemv1_slots_nvfp4w_xs3,model_gemv1_slots_nvfp4w_xs3_relu,model_gemv1_slots_nvfp4w_xs3_t16 \
    PRESETS_LIMIT=90 scripts/device-session.sh presets:moe_slots_t1
for sk in chunk xs3; do
    SLOT_KERNEL=$sk E2E_STEPS=24 E2E_SUPER_LIMIT=100 scripts/device-session.sh e2esuper16gfs
done
cd "$OUT" && tar -czf /tmp/all2.tgz --exclude=all.tgz . && mv /tmp/all2.tgz all.tgz
ls | grep -v -E '^(all.tgz|summary.txt)$' | xargs rm -rf
