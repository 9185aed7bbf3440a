#!/usr/bin/env bash
# Session 11, device call 3: the routed slots' NVFP4 GEMV through shared-memory stages
# (model_gemv1_slots_nvfp4w_pipe*: persistent blocks, cp.async, 2 / 3 / 4 stages), written this
# session:
#  - gpu_model, everything (new: slot_gemv_pipe_gives_the_chunk_bits; the moe_slots_t1 bench's
#    pipe variants checked bit for bit in slot_gemv_variants_give_the_default_bits)
#  - memcheck and racecheck over the new test
#  - moe_slots_t1: every slot variant's up / down / chain time (session 10: default chain 67.3 us)
#  - the super decode bench over 24 steps: graphs and fused, each without and with --slots-pipe
cd "$(dirname "$0")/../.."
E2E_STEPS=24 E2E_SUPER_LIMIT=120 scripts/device-session.sh t:gpu_model:120 \
    tsan:memcheck:gpu_model:slot_gemv_pipe tsan:racecheck:gpu_model:slot_gemv_pipe \
    presets:moe_slots_t1 e2esuper16g e2esuper16gs e2esuper16gf e2esuper16gfs
cd "$OUT" && ls | grep -v -E '^(all.tgz|summary.txt)$' | xargs rm -rf
