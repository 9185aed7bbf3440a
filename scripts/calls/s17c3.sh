#!/usr/bin/env bash
# Session 17, device call 3: issue 4's acceptance run on the committed code (auto = v9 / v11 /
# v18 by T). gpu_router, gpu_nvfp4, gpu_cases; the router presets twice (v9 / v11 / v17 / v18 /
# auto); the NVFP4 quantize preset; the PyTorch router and NVFP4 chains
# (tools/torch_side_by_side.py) in the same run; `duet check --backend gpu --op
# noaux_tc_router` and memcheck over it.
cd "$(dirname "$0")/../.."
scripts/device-session.sh t:gpu_router:400 t:gpu_nvfp4:300 t:gpu_cases:300
. scripts/calls/lib.sh
run_router_presets v9,v11,v17,v18,auto
run bench-nvfp4 150 "$B/duet" bench --backend gpu --shape nvfp4_8192 --out "$OUT/bench_nvfp4.json"
CHK_LIMIT=120 SAN_LIMIT=120 scripts/device-session.sh torch:router torch:nvfp4 chk:noaux_tc_router memcheck:noaux_tc_router
pack
