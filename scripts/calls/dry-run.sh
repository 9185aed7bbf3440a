#!/usr/bin/env bash
# Dry run of a device-call script here, without a GPU: copies scripts/ and tools/ into a temp
# folder, stands stub binaries in for .devbin's tests and duet (each prints its arguments, the
# env switches the scripts set, and "test result: ok") and for compute-sanitizer, ncu and
# nvidia-smi, runs the call, and prints its summary. It checks the call's control flow (steps,
# limits, greps, file names, env), not the GPU work. Usage: scripts/calls/dry-run.sh s38c1.sh
set -euo pipefail
call=${1:?usage: scripts/calls/dry-run.sh CALL.sh}
root="$(cd "$(dirname "$0")/../.." && pwd)"
[ -f "$root/scripts/calls/$call" ] || { echo "error: scripts/calls/$call does not exist" >&2; exit 2; }
d=$(mktemp -d /tmp/duet-dry.XXXXXX)
trap 'rm -rf "$d"' EXIT
cp -r "$root/scripts" "$root/tools" "$d/"
mkdir -p "$d/.devbin/tests" "$d/bin" "$d/out"
cat >"$d/stub" <<'STUB'
#!/usr/bin/env bash
# A test binary's stub: the filter (its last argument not starting with -) must name a test of
# gpu/tests/<binary>.rs, as cargo's substring filter would, or the call would run 0 tests.
me=$(basename "$0")
echo "stub $me $* versions=${DUET_MAMBA_TEST_VERSIONS:-}${DUET_MOE_TEST_VERSIONS:-} defines=${DUET_NVRTC_DEFINES:-}"
src="$DRY_ROOT/gpu/tests/$me.rs"
filt=""
for a in "$@"; do [[ "$a" == -* ]] || filt=$a; done
if [ -f "$src" ] && [ -n "$filt" ] && [[ "$filt" != [0-9]* ]]; then
    if ! grep -Eq "fn [A-Za-z0-9_]*${filt}[A-Za-z0-9_]*\(" "$src"; then
        echo "DRY-RUN: no test of gpu/tests/$me.rs matches '$filt'" | tee -a "$OUT/dry-nomatch.txt"
        echo "test result: ok. 0 passed; 0 failed"
        exit 0
    fi
fi
echo "test result: ok. 1 passed; 0 failed"
STUB
chmod +x "$d/stub"
for b in mamba_ssd gpu_moe gpu_index64 gpu_ssu gpu_router gpu_model gpu_nvfp4 mamba_conv1d gpu_cases; do
    cp "$d/stub" "$d/.devbin/tests/$b"
done
cp "$d/stub" "$d/.devbin/duet"
cat >"$d/bin/compute-sanitizer" <<'STUB'
#!/usr/bin/env bash
echo "========= COMPUTE-SANITIZER $*"
while [ $# -gt 0 ] && [[ "$1" == --* ]]; do shift 2; done
"$@"
echo "========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)"
STUB
printf '#!/usr/bin/env bash\necho "ncu $*"\n' >"$d/bin/ncu"
printf '#!/usr/bin/env bash\necho "stub GPU"\n' >"$d/bin/nvidia-smi"
chmod +x "$d/bin/"*
rc=0
(cd "$d" && OUT="$d/out" DRY_ROOT="$root" PATH="$d/bin:$PATH" bash "scripts/calls/$call") >"$d/out/dry-run.log" 2>&1 || rc=$?
echo "dry run of $call: exit $rc; summary:"
sort -u "$d/out/summary.txt" 2>/dev/null | cut -c1-200 || echo "(no summary.txt)"
if [ "$rc" != 0 ]; then tail -20 "$d/out/dry-run.log"; fi
if [ -s "$d/out/dry-nomatch.txt" ]; then
    echo "error: test filters that match no test:" >&2
    sort -u "$d/out/dry-nomatch.txt" >&2
    exit 1
fi
exit "$rc"
