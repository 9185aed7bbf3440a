#!/usr/bin/env bash
# Session 20, device call 2: where the X forms' time goes. Call 1: layer at T = 4096 v1 8285,
# x64 4966 (GEMM1 3230 / GEMM2 1702), x128 9001 (6746 / 2218) us: 22-30% of the tensor cores
# though the SASS issue estimate allows ~70%. Here: the layer with deeper rings (x64p5,
# x128p6), then ncu warp states + source counters of x64's GEMM2 and x128's GEMM1.
cd "$(dirname "$0")/../.."
DUET_MOE_VERSIONS=v4_x64,v4_x128,v4_x64p5,v4_x128p6 PRESETS_LIMIT=200 scripts/device-session.sh presets:moe_t4096
. scripts/calls/lib.sh
ncu_src_moe() { # kernel tag
    run "ncu-src-$1" 200 "$ncu" --clock-control none -k "regex:^moe_gemm_$1\$" -c 1 \
        --section SourceCounters --section WarpStateStats --section SpeedOfLight --section Occupancy \
        --import-source no -o "/tmp/m$1" "$B/duet" bench --backend gpu --shape moe_t4096 \
        --out /tmp/ncu_bench.json
    run "ncu-src-$1-csv" 60 "$ncu" --import "/tmp/m$1.ncu-rep" --page source --csv --print-source sass
    run "ncu-det-$1" 60 "$ncu" --import "/tmp/m$1.ncu-rep" --page details --csv
}
DUET_MOE_VERSIONS=v4_x64 ncu_src_moe x64_ff_o
DUET_MOE_VERSIONS=v4_x128 ncu_src_moe x128_ff_q
pack
