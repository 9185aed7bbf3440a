#!/usr/bin/env bash
# Session 8, device call 1 (written in session 7, which had no device time left): everything
# session 7 changed on the GPU path (~6 min).
#  - gpu_model: the resident Mamba decode states (ModelKernels::mamba_decode), the one-upload
#    routed experts, the decode engine on the GPU device (decode_engine_on_the_gpu_...), bf16
#    and compact (NVFP4) weight storage giving the f32 bits, the engine's CUDA graphs; the tiny
#    goldens through `duet e2e`, also with --decode-engine (the engine's decode logits held to
#    the golden)
#  - the super decode bench: the model path and the decode engine (bench_decode.paths.gpu-engine,
#    its op_breakdown and vs_model_path_max_rel), with f32 weights, with --weights bf16
#    --gpu-weights compact, and that with --engine-graphs
cd "$(dirname "$0")/../.."
# The engine tests run in their own step: a hang there (a graph) cannot take the others down.
scripts/device-session.sh t:gpu_model:240:--skip,decode_engine+e2e t:gpu_model:200:decode_engine \
    e2eengine e2esuper e2esuper16 e2esuper16g
cd "$OUT" && ls | grep -v -E '^(all.tgz|summary.txt)$' | xargs rm -rf
