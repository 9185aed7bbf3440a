#!/usr/bin/env bash
# Session 32, call 4 (call 2's build): `duet profile engine-step` (ncu, one graph-replayed
# step of the fused super engine, kernels one at a time, L2 flushed) with the decode SSU on
# v10, then on v12 (the default): the SSU kernel's own time inside the step (the step medians
# of calls 1-3 spread more than the SSU's ~7 us).
cd "$(dirname "$0")/../.."
scripts/device-session.sh
. scripts/calls/lib.sh
E="--preset super --pattern MEMEMEM*E --experts nvfp4 --weights bf16 --gpu-weights compact --engine-graphs --engine-fuse --compare gpu --bench-decode 3 --tokens 3 --mtp-pattern="
for v in v10 v12; do
    DUET_DECODE_SSU=$v run "profile-engine-$v" 250 "$B/duet" profile engine-step --e2e "$E" --json
done
pack
