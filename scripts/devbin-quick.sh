#!/usr/bin/env bash
# scripts/devbin-quick.sh "TESTS" "KCACHE_FILES": a smaller .devbin.tar.xz than
# `scripts/gpu-test.sh build`: the duet binary, only the named gpu/tests binaries (stripped) and
# only the named kernel files precompiled for sm_90a (DUET_COMPILE_ONLY), e.g.
#   scripts/devbin-quick.sh "gpu_moe gpu_index64" "moe"
# for scripts/calls/s35c1.sh and s35c2.sh (carry [".devbin.tar.xz"]). A third argument, space-
# separated DUET_NVRTC_DEFINES values, precompiles those variants of the named kernel files too
# (the defines are part of the cache key), e.g. "DUET_JITTER=2000" for scripts/calls/s38c1.sh;
# FILE@DEFINES compiles that one file only (e.g. ssd_chunk_scan@DUET_RC_NO_LOADS).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/nvrtc-env.sh
rm -rf .devbin && mkdir -p .devbin/tests
cargo build --release -q --bin duet
cp target/release/duet .devbin/duet
for t in $1; do
  exe=$(cargo test --release -p duet-gpu --test "$t" --no-run --message-format=json 2>/dev/null | python3 -c '
import json,sys
for l in sys.stdin:
    try: m=json.loads(l)
    except ValueError: continue
    if m.get("reason")=="compiler-artifact" and m.get("executable") and m.get("profile",{}).get("test"): print(m["executable"])
' | tail -1)
  cp "$exe" .devbin/tests/$t
done
for f in .devbin/duet .devbin/tests/*; do strip --strip-debug "$f" 2>/dev/null || true; done
if [ -n "${2:-}" ]; then
  DUET_COMPILE_ONLY="$2" DUET_KERNEL_CACHE="$PWD/.devbin/kcache" cargo test --release -q -p duet-gpu --test nvrtc_compile every_kernel_compiles_for_sm90a >/dev/null
  for d in ${3:-}; do
    files="$2"
    case "$d" in *@*) files="${d%%@*}"; d="${d#*@}";; esac
    DUET_NVRTC_DEFINES="$d" DUET_COMPILE_ONLY="$files" DUET_KERNEL_CACHE="$PWD/.devbin/kcache" cargo test --release -q -p duet-gpu --test nvrtc_compile every_kernel_compiles_for_sm90a >/dev/null
  done
fi
tar -cJf .devbin.tar.xz .devbin
du -sh .devbin .devbin.tar.xz; ls .devbin/kcache 2>/dev/null | wc -l
