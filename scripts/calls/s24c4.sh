#!/usr/bin/env bash
# Session 24, call 4 (build with DEVBIN_KCACHE="selective_state_update causal_conv1d"; carry
# duet, gpu_ssu and mamba_conv1d):
# - ssu_v9_bf16 is now call 3's best sweep form (5 blocks an SM, row passes unrolled 2 deep) and
#   auto takes v9 for a bf16 state at dstate 128: every gpu_ssu test, then the batch 256 and 64
#   presets;
# - conv v8 with a proxy fence before its empty arrive (call 3's racecheck reported every stage
#   reuse on v8, none on v10): racecheck over the hand cases again, then the conv preset once.
cd "$(dirname "$0")/../.."
scripts/device-session.sh t:gpu_ssu:200
. scripts/calls/lib.sh
run bench-ssu-b256 150 "$B/duet" bench --backend gpu --shape ssu_b256_bf16 --out "$OUT/bench_ssu_b256.json"
run bench-ssu-b64 120 "$B/duet" bench --backend gpu --shape ssu_b64_bf16 --out "$OUT/bench_ssu_b64.json"
SAN_LIMIT=120 scripts/device-session.sh tsan:racecheck:mamba_conv1d:conv1d_fn_hand_cases
run bench-conv 60 "$B/duet" bench --backend gpu --shape conv1d_prefill_50k --out "$OUT/bench_conv.json"
pack
