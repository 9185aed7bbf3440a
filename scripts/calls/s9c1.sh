#!/usr/bin/env bash
# Next session, device call 1 (written in session 8, whose device time ran out; ~6 min):
#  - gpu_model (everything; the first process compiles the kernels: ~120 s on a fresh machine),
#    incl. slot_gemv_variants_give_the_default_bits (new, not yet run)
#  - the super decode bench (compact weights, graphs): engine median per step, 1.558 ms in
#    session 8 call 4
#  - the same with --engine-fuse (new, not yet run: the residual add fused into the next norm;
#    gpu_model's decode_engine_fused_norms_give_the_unfused_bits checks its bits)
#  - `moe_slots_t1` (new, not yet run): the NVFP4 slot GEMV variants (columns per warp, chunks
#    per trip, register caps) side by side on 22 Super experts, bits checked against the default;
#    `norms_super` (new): rmsnorm / gated rmsnorm / slot mix with unrolled loops vs the default
cd "$(dirname "$0")/../.."
scripts/device-session.sh t:gpu_model:300 e2esuper16g e2esuper16gf presets:moe_slots_t1,norms_super
cd "$OUT" && ls | grep -v -E '^(all.tgz|summary.txt)$' | xargs rm -rf
