#!/usr/bin/env bash
# Next session, device call 1 (written at the end of session 11, whose device time ran out):
#  - gpu_model, everything: slot_gemv_variants_give_the_chunk_bits now also runs _xs4r2 (two
#    columns a warp, 64 registers, four blocks an SM; written after the last call) and
#    _xs3_t16 on every case
#  - memcheck and racecheck over that test: none of session 11's slot kernels (pipe, xs,
#    xs3, xs3_t16, xs4r2) has run under a sanitizer yet (call 3's sanitizer steps ended on the
#    test's own failure before any kernel ran)
#  - gpu_index64's slot_gemv_past_2_pow_31 (written after the last call: one expert with code
#    bytes past 2^31 through the default, _xs, _xs3, _xs4r2, _pipe2)
#  - gpu_moe, everything: its differential tests now run v1_w64 (the grouped GEMM on wgmma,
#    written after the last call) on every case; and moe_t64 / moe_t4096 with v1_w64 next to
#    v1 / v2 (the bench reports each version's agreement with the first)
#  - moe_slots_t1 on the default, _xs3, _xs3_relu, _xs4r2 (session 11 call 7: 67.19 / 62.72 /
#    61.52 us chains)
cd "$(dirname "$0")/../.."
scripts/device-session.sh t:gpu_model:120 t:gpu_moe:120 t:gpu_index64:120:slot_gemv_past_2_pow_31 \
    tsan:memcheck:gpu_model:slot_gemv_variants_give_the_chunk_bits \
    tsan:racecheck:gpu_model:slot_gemv_variants_give_the_chunk_bits presets:moe_t64,moe_t4096
# (DUET_SLOT_VARIANTS only here: slot_gemv_variants_give_the_default_bits expects every row.)
DUET_SLOT_VARIANTS=model_gemv1_slots_nvfp4w_xs3,model_gemv1_slots_nvfp4w_xs3_relu,model_gemv1_slots_nvfp4w_xs4r2 \
    PRESETS_LIMIT=90 scripts/device-session.sh presets:moe_slots_t1
cd "$OUT" && tar -czf /tmp/all2.tgz --exclude=all.tgz . && mv /tmp/all2.tgz all.tgz
ls | grep -v -E '^(all.tgz|summary.txt)$' | xargs rm -rf
