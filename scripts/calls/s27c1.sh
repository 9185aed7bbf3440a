#!/usr/bin/env bash
# Session 27, call 1 (session 26's binaries: DEVBIN_KCACHE="selective_state_update"; carry duet,
# gpu_ssu): memcheck over v11's bit-exact test, then the ssu_v11 preset again (session 26 ran it
# once per form; auto needs a repeat before it picks v11).
cd "$(dirname "$0")/../.."
scripts/device-session.sh tsan:memcheck:gpu_ssu:ssu_v11_bit_exact
. scripts/calls/lib.sh
run bench-ssu-v11 300 "$B/duet" bench --backend gpu --shape ssu_v11 --out "$OUT/bench_ssu_v11.json"
pack
