#!/usr/bin/env bash
# Session 9, device call 3: after the register-held norms (model_rmsnorm / model_add_rmsnorm /
# model_gated_rmsnorm load a thread's values first; the loop forms kept as `_loop` bench
# variants) and the gemv1 launch spreading small products over more SMs (fewer warps per
# block; the same bits):
#  - gpu_model, everything (norm_variants_give_the_default_bits now compares the new norms
#    with the loop forms bit for bit; the engine and storage tests run the new launches)
#  - the super decode bench without and with --engine-fuse (call 1: 1.511 / 1.604 ms)
#  - norms_super (call 1: rmsnorm 6.52 us, gated 3.74 us per graph launch)
#  - the engine step under ncu again (call 2: 1357 us summed, rmsnorm 14.5 us a call)
cd "$(dirname "$0")/../.."
NCU_ENGINE_LIMIT=200 scripts/device-session.sh t:gpu_model:200 e2esuper16g e2esuper16gf \
    presets:norms_super ncuengine
cd "$OUT" && ls | grep -v -E '^(all.tgz|summary.txt)$' | xargs rm -rf
