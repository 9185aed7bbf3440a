#!/usr/bin/env bash
# Session 9, device call 5 (the precompiled kernels work since call 4: no compile per step):
#  - gpu_model, everything: slot_gemv_variants_give_the_default_bits now checks the new
#    default NVFP4 slot GEMV (8-entry table, the code's sign moved onto x) against the
#    16-entry one (`_t16`, the default until now) bit for bit; the storage tests run the new
#    split one-row GEMV (`model_gemv1_*_split`: n 35 k 4096 bf16, n 37 k 2688 NVFP4 / bf16)
#  - moe_slots_t1 (call 1: default 70.7 us chain), the super decode bench (call 3: engine
#    1.438 ms)
#  - memcheck / racecheck over the storage tests, the engine tests and the bench variants
#  - the engine step under ncu (call 3: 1236 us summed)
cd "$(dirname "$0")/../.."
E2E_SUPER_LIMIT=120 scripts/device-session.sh t:gpu_model:200 presets:moe_slots_t1 e2esuper16g
SAN_LIMIT=150 scripts/device-session.sh \
    tsan:memcheck:gpu_model:compact_lazy,bf16_weight,decode_engine_on,decode_engine_graphs,slot_gemv_variants
SAN_LIMIT=100 scripts/device-session.sh tsan:racecheck:gpu_model:compact_lazy,bf16_weight,fused_norms
NCU_ENGINE_LIMIT=150 scripts/device-session.sh ncuengine
cd "$OUT" && ls | grep -v -E '^(all.tgz|summary.txt)$' | xargs rm -rf
