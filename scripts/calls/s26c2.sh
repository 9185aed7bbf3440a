#!/usr/bin/env bash
# Session 26, call 2 (DEVBIN_KCACHE="selective_state_update"; carry duet, gpu_ssu): v11 after
# call 1 (bf16 393 us at batch 256 against v9's 318, f32 584 against v8's 611): each chunk is
# now one block of independent chains (bf16 rounded branch-free with the reference's NaN rule,
# the rows' x shuffled first), the per-head values computed 32 tiles at a time (one f64 chain a
# lane), the next tile's rows and B / C prefetched into the L2. Tests, the preset, the 2^31 test.
cd "$(dirname "$0")/../.."
scripts/device-session.sh t:gpu_ssu:200:ssu_v11_bit_exact,ssu_random_shapes_every_mode,ssu_stochastic_rounding_is_bit_exact
. scripts/calls/lib.sh
run bench-ssu-v11 300 "$B/duet" bench --backend gpu --shape ssu_v11 --out "$OUT/bench_ssu_v11.json"
run t-2pow31 150 "$B/tests/gpu_ssu" --ignored --test-threads=1 ssu_state_offsets_beyond_2_pow_31 --nocapture
pack
