#!/usr/bin/env bash
# Session 24, call 3 (build with DEVBIN_KCACHE="selective_state_update causal_conv1d"; carry duet,
# gpu_ssu and mamba_conv1d):
# - SSU v9's sweep variants (l5 / l6: 5 / 6 blocks an SM; u2 / u4: row passes unrolled) bit-exact
#   (gpu_ssu's sweep test), then the batch-256 sweep preset twice;
# - ncu on conv v5 (channel-first auto, 570 us) in the Super prefill preset;
# - racecheck over mamba_conv1d's hand cases (v8 / v9 / v10's mbarrier rings).
cd "$(dirname "$0")/../.."
scripts/device-session.sh t:gpu_ssu:200:ssu_sweep_variants_bit_exact
. scripts/calls/lib.sh
for i in 1 2; do
    run "bench-ssu-sweep-$i" 150 "$B/duet" bench --backend gpu --shape ssu_sweep_b256_bf16 \
        --out "$OUT/bench_ssu_sweep_$i.json"
done
ncu_conv conv1d_fn_v5u4_bf16_w4
SAN_LIMIT=150 scripts/device-session.sh tsan:racecheck:mamba_conv1d:conv1d_fn_hand_cases
pack
