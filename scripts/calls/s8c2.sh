#!/usr/bin/env bash
# Session 8, device call 2 (written in session 7): memcheck over the decode engine's GPU tests
# (its pointer offsets, graphs included), then what session 6 left unverified on the router
# (~7 min): the four sanitizers over noaux_tc_router (v9 / v10 with the two-slot path), the
# router past 2^31 (v8-v10), gpu_router, the router presets side by side with torch; and the
# channel-last conv1d v3 / v4 (mamba_conv1d's tests, the conv1d_prefill_50k preset: v1-v4);
# the SSU with an f32 state at batch 256 (ssu_b256_f32: v8 never timed).
cd "$(dirname "$0")/../.."
scripts/device-session.sh tsan:memcheck:gpu_model:decode_engine \
    memcheck:noaux_tc_router racecheck:noaux_tc_router initcheck:noaux_tc_router synccheck:noaux_tc_router \
    t:gpu_index64:200:router_logits_past t:gpu_router:200 t:mamba_conv1d:200 \
    torch presets:router_t1,router_t64,router_t4096,router_t32768,conv1d_prefill_50k,ssu_b256_f32
cd "$OUT" && ls | grep -v -E '^(all.tgz|summary.txt)$' | xargs rm -rf
