#!/usr/bin/env bash
# Next session, device call 1 (written at the end of session 9, whose device time ran out; the
# precompiled kernels load since session 9 call 4, so every step is short):
#  - gpu_model, everything (~5 s in session 9 call 5): compact_lazy_weight_storage's new
#    37 x 4096 shape (the NVFP4 split one-row GEMV); slot_gemv_variants' new `_relu` row (the
#    NVFP4 down GEMV reading h through ReLU², bits vs the default chain);
#    decode_engine_fused_norms now also runs the f32 `_relu` slot GEMV (fusion on)
#  - moe_slots_t1 (session 9 call 5: default chain 67.0 us; `_relu` drops the relu2 launch)
#  - the super decode bench without and with --engine-fuse: `vs_model_path_max_rel` should be
#    0 again (call 5: 6.7e-7, the split decision since fixed), engine 1.396 ms in call 5
#  - racecheck over the fused engine test with room (call 5's 100 s were too few)
#  (also new since call 5: the engine's logits download copies only the values, every engine
#  test and the e2e benches run it; the e2e JSON's paths.gpu-engine.host_per_step_us splits
#  the host's share of a step: upload / launch / wait / download)
cd "$(dirname "$0")/../.."
E2E_SUPER_LIMIT=120 scripts/device-session.sh t:gpu_model:90 presets:moe_slots_t1 e2esuper16g \
    e2esuper16gf
SAN_LIMIT=300 scripts/device-session.sh tsan:racecheck:gpu_model:fused_norms
cd "$OUT" && ls | grep -v -E '^(all.tgz|summary.txt)$' | xargs rm -rf
