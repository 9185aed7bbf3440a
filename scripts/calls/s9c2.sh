#!/usr/bin/env bash
# Session 9, device call 2:
#  - gpu_model's decode_engine_fused_norms_give_the_unfused_bits again: call 1 failed it on
#    tiny-b, whose graph mode refuses a Mamba layer outside the direct decode step (a test
#    error: graphs now only on tiny-a; eager fused on both)
#  - `duet profile engine-step`: each kernel of one graph-replayed decode-engine step (super,
#    compact weights) under ncu, summed per kernel name (new in session 8, first run)
cd "$(dirname "$0")/../.."
NCU_ENGINE_LIMIT=400 scripts/device-session.sh t:gpu_model:150:fused_norms ncuengine
cd "$OUT" && ls | grep -v -E '^(all.tgz|summary.txt)$' | xargs rm -rf
