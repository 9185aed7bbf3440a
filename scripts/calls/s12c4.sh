#!/usr/bin/env bash
# Session 12, device call 4 (the call 3 build, nothing rebuilt). Call 3: gpu_ssu 5 / gpu_moe 10
# / gpu_model 18 passed; SSU batch 1 v10 5.56 us bf16 / 6.66 f32 (v6 7.06 / 7.91); the fused
# engine with the decode SSU on v6 1.1686 ms, on v10 1.1863 (same run, v6 first): the other
# way round from the bench. Here:
#  - the engine with v10 first, then v6 (is the order or the kernel the difference?)
#  - sanitizers over what is new: memcheck / racecheck over gpu_moe's bit-exact GEMM tests
#    (w64's cp.async ring with zero-fill), memcheck over `duet check --op
#    selective_state_update` (every version, v10 and the sweep variants)
#  - ncu --set full on one launch each of w64's and m64's GEMM2 (ff, T = 4096): what bounds
#    both at ~3.2-3.4 ms (~1.5 us a k-tile a CTA against ~0.15 of HGMMA)
cd "$(dirname "$0")/../.."
for v in v10 v6; do
    DUET_DECODE_SSU=$v SLOT_KERNEL=xs3m E2E_STEPS=24 E2E_SUPER_LIMIT=100 scripts/device-session.sh e2esuper16gfs
    mv "$OUT/e2e-super-bf16-graphs-fused-slots-xs3m.log" "$OUT/e2e-super-fused-xs3m-ssu-$v.log"
done
SAN_LIMIT=200 scripts/device-session.sh \
    tsan:memcheck:gpu_moe:gemm1_bit_exact_on_exact_sums,gemm2_bit_exact_on_exact_sums \
    tsan:racecheck:gpu_moe:gemm2_bit_exact_on_exact_sums memcheck:selective_state_update
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
for k in w64 m64; do
    t0=$SECONDS
    timeout 150 "$ncu" --clock-control none -k "regex:^moe_gemm_${k}_ff_o\$" -c 1 --set full --csv \
        --page details .devbin/duet bench --backend gpu --shape moe_t4096 --out /tmp/ncu_moe.json \
        >"$OUT/ncu-moe-$k.log" 2>&1
    echo "ncu-moe-$k rc=$? took=$((SECONDS - t0))s" | tee -a "$OUT/summary.txt"
done
cd "$OUT" && tar -czf /tmp/all2.tgz --exclude=all.tgz . && mv /tmp/all2.tgz all.tgz
ls | grep -v -E '^(all.tgz|summary.txt)$' | xargs rm -rf
