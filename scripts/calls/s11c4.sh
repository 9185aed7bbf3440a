#!/usr/bin/env bash
# Session 11, device call 4. Call 3: the pipe slot GEMV gave the model path's bits in the super
# engine but took 1.269 ms a step against 1.202 (slower); its test failed on a test-input
# mistake (ReLU² of all-negative x) and pipe2 on the 48 KB static + dynamic limit (fixed).
#  - gpu_model, everything (the fixed test; the bench variants' bits)
#  - moe_slots_t1: every slot variant's up / down / chain time
#  - ncu --set full over the first chain (up and down) of the default, the pipe and the
#    production-numerics slot GEMVs (DUET_SLOT_VARIANTS keeps the bench to those)
cd "$(dirname "$0")/../.."
scripts/device-session.sh t:gpu_model:120 presets:moe_slots_t1
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
DUET_SLOT_VARIANTS=model_gemv1_slots_nvfp4w_pipe,model_gemv1_slots_nvfp4p timeout 200 "$NCU" \
    --clock-control none -k 'regex:^model_gemv1_slots_nvfp4(w|w_pipe|p)$' -c 6 --set full \
    --csv --page details .devbin/duet bench --backend gpu --shape moe_slots_t1 \
    --out /tmp/ncu_slots.json >"$OUT/ncu_slots.csv" 2>"$OUT/ncu_slots.err"
echo "ncu rc=$?" >>"$OUT/summary.txt"
tail -3 "$OUT/ncu_slots.err"
cd "$OUT" && ls | grep -v -E '^(all.tgz|summary.txt|ncu_slots.csv)$' | xargs rm -rf
