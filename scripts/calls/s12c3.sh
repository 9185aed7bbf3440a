#!/usr/bin/env bash
# Session 12, device call 3. Call 2: w64 two buffers 2543 / 8850 us (T = 64 / 4096; v2 1021,
# m64 8192); SSU batch 1 sweep: x_bf16_r2_h_e1_z_m6 5.48 us (v9 6.75, v6 7.01); xs3m engine
# 1.1796 vs xs3 1.1883 ms. Since then:
#  - w64's NVFP4 ring (cp.async, 4 stages of raw bytes, each thread dequantizes what it
#    copied): gpu_moe (a new K = 384 shape: more k-tiles than stages), moe_t64 / moe_t4096
#  - v10 = r2_h_e1_z (16 rows a block); auto below 4 x SMs tiles; the decode step's SSU
#    (DUET_DECODE_SSU, default v10): gpu_ssu (every version incl. v10 and the sweep),
#    gpu_model, ssu_b1_f32 / ssu_b1_bf16, and the fused engine with v6 and v10 in one run
#  - the default slot form xs3m
cd "$(dirname "$0")/../.."
scripts/device-session.sh t:gpu_moe:120 t:gpu_model:120 presets:moe_t64,moe_t4096 \
    presets:ssu_b1_f32,ssu_b1_bf16 t:gpu_ssu:240
for v in v6 v10; do
    DUET_DECODE_SSU=$v SLOT_KERNEL=xs3m E2E_STEPS=24 E2E_SUPER_LIMIT=100 scripts/device-session.sh e2esuper16gfs
    mv "$OUT/e2e-super-bf16-graphs-fused-slots-xs3m.log" "$OUT/e2e-super-fused-xs3m-ssu-$v.log"
done
cd "$OUT" && tar -czf /tmp/all2.tgz --exclude=all.tgz . && mv /tmp/all2.tgz all.tgz
ls | grep -v -E '^(all.tgz|summary.txt)$' | xargs rm -rf
