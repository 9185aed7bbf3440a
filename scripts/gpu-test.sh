#!/usr/bin/env bash
# GPU tests, in two halves (there is no Rust toolchain on the GPU machine):
#
#   scripts/gpu-test.sh build   # here: builds the duet-gpu test binaries and the duet binary
#                               # (release), copies them into the git-ignored .devbin/
#   scripts/gpu-test.sh run [FILTER...]
#                               # on the GPU machine (device tool: carry [".devbin.tar.xz"]): runs every
#                               # test binary with --ignored (FILTER: test name filters), then
#                               # `.devbin/duet check --backend gpu`
#
# Never carry target/ (the device tool's 64 MiB limit): carry [".devbin.tar.xz"] (stripped
# binaries, xz-compressed; `run` unpacks it).
# Outputs worth keeping (rcp corrections, bench JSON, logs) go to $DUET_OUT (default $OUT).
set -euo pipefail
cd "$(dirname "$0")/.."
cmd="${1:-build}"
shift || true
case "$cmd" in
build)
    if [ -f scripts/nvrtc-env.sh ]; then
        # shellcheck disable=SC1091
        source scripts/nvrtc-env.sh
    fi
    rm -rf .devbin && mkdir -p .devbin/tests
    cargo test --release -p duet-gpu --no-run --message-format=json 2>/dev/null |
        python3 -c '
import json, sys, shutil, os
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m.get("profile", {}).get("test"):
        name = m["target"]["name"]
        kind = m["target"]["kind"][0]
        dst = ".devbin/tests/" + (name if kind != "lib" else "gpu_unit")
        shutil.copy(m["executable"], dst)
        print("test binary:", dst)
'
    cargo build --release --bin duet
    cp target/release/duet .devbin/duet
    for f in .devbin/duet .devbin/tests/*; do
        strip --strip-debug "$f" 2>/dev/null || true
    done
    # Every kernel precompiled here for the H200 (sm_90a) into the disk cache the device reads
    # (DUET_KERNEL_CACHE, keyed by source + options hash and arch): a fresh machine otherwise
    # spends ~60-120 s of device time compiling in its first process.
    rm -rf .devbin/kcache
    # With DEVBIN_KCACHE only those files are compiled (DUET_COMPILE_ONLY): minutes saved.
    DUET_COMPILE_ONLY="${DEVBIN_KCACHE:-}" DUET_KERNEL_CACHE="$PWD/.devbin/kcache" \
        cargo test --release -q -p duet-gpu \
        --test nvrtc_compile every_kernel_compiles_for_sm90a >/dev/null
    echo "kernel cache: $(ls .devbin/kcache | wc -l) cubins"
    # Test binaries without #[ignore = "gpu"] tests have nothing to run there.
    rm -f .devbin/tests/gpu_unit .devbin/tests/nvrtc_compile
    # DEVBIN_KCACHE="moe model_ops ...": keep only these kernel files' cubins (the others
    # compile on the device when used). The device tool counts the working tree as a tar
    # (512-byte blocks and a header a file: the tracked tree is ~51 MiB that way), so the
    # tarball must stay under ~12.9 MiB; every cubin made it 13.2 MiB in session 14.
    if [ -n "${DEVBIN_KCACHE:-}" ]; then
        for c in .devbin/kcache/*.cubin; do
            keep=0
            for k in $DEVBIN_KCACHE; do
                case "$(basename "$c")" in "$k"-*) keep=1 ;; esac
            done
            [ "$keep" = 1 ] || rm -f "$c"
        done
        echo "kernel cache kept: $(ls .devbin/kcache | tr '\n' ' ')"
    fi
    # The device tool carries at most 64 MiB with the working tree: ship a tarball.
    tar -cJf .devbin.tar.xz .devbin
    du -sh .devbin .devbin.tar.xz
    ;;
run)
    # A warm machine keeps .devbin/ from an earlier call (ignored outputs stay): unpack the
    # carried tarball whenever it is not the one unpacked there (session 10 call 3 ran the
    # previous call's binaries).
    if [ -f .devbin.tar.xz ]; then
        sum=$(sha1sum .devbin.tar.xz | cut -c1-40)
        if [ "$(cat .devbin/.from 2>/dev/null)" != "$sum" ]; then
            rm -rf .devbin && tar -xJf .devbin.tar.xz && echo "$sum" >.devbin/.from
            echo "devbin: unpacked .devbin.tar.xz $sum" >&2
        fi
    fi
    # The kernels precompiled by `build` (a missing or stale entry is compiled as usual).
    export DUET_KERNEL_CACHE="${DUET_KERNEL_CACHE:-$PWD/.devbin/kcache}"
    export DUET_OUT="${DUET_OUT:-${OUT:-/tmp}}"
    status=0
    for t in .devbin/tests/*; do
        echo "=== $t"
        "$t" --ignored --test-threads=1 "$@" || status=1
    done
    if [ $# -eq 0 ]; then
        echo "=== duet check --backend gpu"
        .devbin/duet check --backend gpu || status=1
    fi
    exit $status
    ;;
*)
    echo "usage: scripts/gpu-test.sh build | run [FILTER...]" >&2
    exit 2
    ;;
esac
