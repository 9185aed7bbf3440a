#!/usr/bin/env bash
# Session 31, call 6 (kcache as call 3; TESTS="gpu_ssu"; carry .devbin.tar.xz): the
# final code (auto also takes v12 for an f16 state at batch 1): the op's case table, v12's
# tests.
cd "$(dirname "$0")/../.."
scripts/device-session.sh
. scripts/calls/lib.sh
run check-ssu 90 "$B/duet" check --backend gpu --op selective_state_update
run tests-v12 120 "$B/tests/gpu_ssu" --ignored --test-threads 1 ssu_v12_bit_exact

pack
