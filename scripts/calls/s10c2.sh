#!/usr/bin/env bash
# Next session, device call 2 (written at the end of session 9): the SSU v9 (v8 with the
# consumers' per-tile loop specialised for dstate 128: the row reduction unrolled, addresses
# advanced per pass, B * dt per column once per tile; offline SASS: ~123 executed instructions
# per pass of 8 bf16 elements against v8's ~158; not yet run on the H200):
#  - gpu_ssu (v9 in the random-shape, stochastic-rounding and past-2^31 tests: the state must be
#    bit-exact against the reference)
#  - the SSU presets: v9 next to v8 at batch 1 / 64 / 256 (bf16) and 256 (f32); the sweep at
#    64 / 256 (session 4: v8 334.5 us at batch 256 bf16, 86.9 at 64)
#  - ncu on the batch-256 bf16 preset's ssu kernels (v8 and v9 side by side)
cd "$(dirname "$0")/../.."
scripts/device-session.sh ssu presets:ssu_sweep_b256_bf16,ssu_sweep_b64_bf16
cd "$OUT" && ls | grep -v -E '^(all.tgz|summary.txt)$' | xargs rm -rf
