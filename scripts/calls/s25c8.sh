#!/usr/bin/env bash
# Session 25, call 8 (call 7's kernel cache; duet rebuilt with the int16 preset): v8 and v9 on an
# int16 state at batch 256 (`ssu_b256_i16`, new; auto keeps v8 for int16 until measured).
cd "$(dirname "$0")/../.."
PRESETS_LIMIT=150 scripts/device-session.sh presets:ssu_b256_i16
. scripts/calls/lib.sh
pack
