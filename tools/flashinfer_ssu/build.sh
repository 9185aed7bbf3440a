#!/usr/bin/env bash
# Builds duet's FlashInfer SSU harness (tools/flashinfer_ssu/ssu_bench.cu) with nvcc.
#   tools/flashinfer_ssu/build.sh OUT_BINARY
# Needs FlashInfer's headers in .baselines/flashinfer/include (python3 tools/fetch_baselines.py)
# and nvcc 12.8+ (the device machine's image has nvcc 13.0; NVCC=... names another).
set -euo pipefail
cd "$(dirname "$0")/../.."
out="${1:?usage: tools/flashinfer_ssu/build.sh OUT_BINARY}"
inc=.baselines/flashinfer/include
if [ ! -f "$inc/flashinfer/mamba/selective_state_update.cuh" ]; then
    echo "flashinfer_ssu: $inc has no FlashInfer headers; run python3 tools/fetch_baselines.py" >&2
    exit 2
fi
# nvcc 13.0's front end rejects one braced list in the horizontal kernel's launcher (an int64
# stride into FlashInfer's vector of uint64 strides, inside a template lambda: "invalid narrowing
# conversion"; the vertical launcher's identical list compiles). A copy of the headers gets the
# explicit, value-preserving cast there; nothing else differs from the wheel's text.
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp -r "$inc/flashinfer" "$work/"
sed -i 's/{1, DSTATE, DSTATE \* DIM, params.state_stride_batch}/{1, DSTATE, DSTATE * DIM, (uint64_t)params.state_stride_batch}/' \
    "$work/flashinfer/mamba/kernel_selective_state_update_stp.cuh"
"${NVCC:-nvcc}" -O3 -std=c++20 --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a \
    -DFLASHINFER_MAMBA_ENABLE_SM90 -DFLASHINFER_ENABLE_BF16 -DFLASHINFER_ENABLE_FP8 -I "$work" tools/flashinfer_ssu/ssu_bench.cu -lcuda -o "$out.tmp"
mv "$out.tmp" "$out"
