#!/usr/bin/env bash
# Session 22, device call 3 (the last ~350 s of device time): SSD v4 with every named-barrier id
# an immediate (session 19 passed 1 + lh / 3 + lh in a register and racecheck reported the xch
# hand-over): racecheck over the bf16 row of ssd_chunk_scan, then mamba_ssd's v2 / v3 / v4 tests.
cd "$(dirname "$0")/../.."
SAN_LIMIT=120 scripts/device-session.sh racecheck:ssd_chunk_scan/what=bf16
. scripts/calls/lib.sh
run tests-mamba_ssd 90 "$B/tests/mamba_ssd" --ignored --test-threads=1 ssd_v2
pack
