#!/usr/bin/env bash
# Session 8, device call 1 (written in session 7, which had no device time left): everything
# session 7 changed on the GPU path, then what session 6 left unverified on the router.
#  - gpu_model: the resident Mamba decode states (ModelKernels::mamba_decode), the one-upload
#    routed experts, the decode engine on the GPU device (decode_engine_on_the_gpu_...), and
#    memcheck over the engine test (its pointer offsets); the tiny goldens through `duet e2e`,
#    also with --decode-engine (the engine's decode logits held to the golden)
#  - the super decode bench: the model path and the decode engine (bench_decode.paths.gpu-engine),
#    with f32 and with bf16 dense weights (gpu_model's bf16_weight_storage test first)
#  - router: the four sanitizers over noaux_tc_router (v9 / v10 with the two-slot path), the
#    router past 2^31 (v8-v10), gpu_router, the presets side by side with torch
cd "$(dirname "$0")/../.."
scripts/device-session.sh t:gpu_model:300+e2e e2eengine tsan:memcheck:gpu_model:decode_engine e2esuper e2esuper16 \
    memcheck:noaux_tc_router racecheck:noaux_tc_router initcheck:noaux_tc_router synccheck:noaux_tc_router \
    t:gpu_index64:200:router_logits_past t:gpu_router:200 \
    torch presets:router_t1,router_t64,router_t4096,router_t32768
cd "$OUT" && ls | grep -v -E '^(all.tgz|summary.txt)$' | xargs rm -rf
