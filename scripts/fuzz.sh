#!/usr/bin/env bash
# Fuzz duet's input parsers with cargo-fuzz (libFuzzer), N seconds per target (default 60).
#
#   scripts/fuzz.sh [SECONDS] [TARGET ...]      # all targets of fuzz/Cargo.toml when none named
#   FUZZ_FLAGS="-fork=1 -ignore_crashes=1" scripts/fuzz.sh 180 op_call   # keep going after crashes
#
# Not part of CI (CI replays the committed corpora instead: tests/fuzz_regressions.rs).
# Needs `cargo install cargo-fuzz`; the toolchain is stable, so RUSTC_BOOTSTRAP=1 unlocks the
# nightly flags cargo-fuzz passes (-Zsanitizer=address, ...). Runs at nice 10, one process per
# target, with libFuzzer's memory limits so a huge allocation counts as a finding.
# Inputs: fuzz/corpus/<target>/ (unpacked from the committed fuzz/corpus/<target>.zip first:
# fuzz/corpus_pack.py; the zips keep thousands of tiny files out of the device tool's carry)
# plus the valid seed files of fuzz/seeds/<target>/ (written by fuzz/seeds/make_seeds.py). New
# inputs go into fuzz/corpus/<target>/, which is minimised (cargo fuzz cmin) and packed back
# into fuzz/corpus/<target>.zip afterwards;
# crashes land in fuzz/artifacts/<target>/: copy each into fuzz/regressions/<target>/ and add
# an expected-error line to tests/fuzz_regressions.rs. A summary line per target is printed
# and appended to fuzz/target/fuzz-summary.txt.
set -uo pipefail
cd "$(dirname "$0")/../fuzz"
secs="${1:-60}"
shift || true
export RUSTC_BOOTSTRAP=1
export CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-1}"
if [ "$#" -gt 0 ]; then targets=("$@"); else mapfile -t targets < <(cargo fuzz list); fi
# Committed corpora stay small (< 1 MB in all): after cmin, keep the smallest files of each
# target up to this many bytes (the long run regrows the rest).
budget="${FUZZ_CORPUS_BUDGET:-90000}"
trim() {
  local dir=$1 total=0 sz f
  while IFS= read -r f; do
    sz=$(stat -c %s "$dir/$f")
    if [ $((total + sz)) -gt "$budget" ]; then rm -f "$dir/$f"; else total=$((total + sz)); fi
  done < <(ls -Sr "$dir")
}
mkdir -p target
status=0
for t in "${targets[@]}"; do
  [ -f "corpus/$t.zip" ] && python3 corpus_pack.py unpack "corpus/$t.zip" >/dev/null
  mkdir -p "corpus/$t" "artifacts/$t"
  nice -n 10 cargo fuzz build -a "$t" || { echo "$t: build failed"; status=1; continue; }
  log="target/fuzz-$t.log"
  # -max_len: parsers see whole files; 64 KiB is plenty to reach every branch.
  seeds=(); [ -d "seeds/$t" ] && seeds=("seeds/$t")
  start=$SECONDS
  nice -n 10 cargo fuzz run -a "$t" "corpus/$t" "${seeds[@]}" -- \
    -max_total_time="$secs" -rss_limit_mb=2048 -malloc_limit_mb=1024 -timeout=10 \
    -max_len=65536 -print_final_stats=1 ${FUZZ_FLAGS:-} >"$log" 2>&1
  rc=$?
  took=$((SECONDS - start))
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
  # fork mode prints no final stats: take the last "#N" progress line
  [ -n "$runs" ] || runs=$(grep -oE '^#[0-9]+' "$log" | tail -1 | tr -d '#')
  crashes=$(find "artifacts/$t" -type f | wc -l)
  nice -n 10 cargo fuzz cmin -a "$t" "corpus/$t" >"target/cmin-$t.log" 2>&1 || true
  trim "corpus/$t"
  files=$(find "corpus/$t" -type f | wc -l)
  python3 corpus_pack.py pack "corpus/$t" >/dev/null || status=1
  line="$(date -u +%FT%TZ) $t: ${took}s of ${secs}s, ${runs:-?} executions, exit $rc, $crashes artifact(s), corpus $files files"
  echo "$line" | tee -a target/fuzz-summary.txt
  [ "$rc" -eq 0 ] || { status=1; grep -m5 -E 'panicked|ERROR|SUMMARY' "$log"; }
done
du -sh --apparent-size corpus/*.zip
exit "$status"
