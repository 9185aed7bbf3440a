#!/usr/bin/env bash
# Session 16, device call 6: the committed router (call 5's weight division reverted, the exp
# core's immediates kept; auto = v17 from T = 16384). gpu_router, the router presets twice,
# the NVFP4 quantize preset, the PyTorch router and NVFP4 chains (tools/torch_side_by_side.py)
# in the same run, `duet check --backend gpu --op noaux_tc_router`.
cd "$(dirname "$0")/../.."
scripts/device-session.sh t:gpu_router:400
. scripts/calls/lib.sh
run_router_presets v9,v11,v12,v15,v17
run bench-nvfp4 150 "$B/duet" bench --backend gpu --shape nvfp4_8192 --out "$OUT/bench_nvfp4.json"
CHK_LIMIT=120 scripts/device-session.sh torch:router torch:nvfp4 chk:noaux_tc_router
pack
