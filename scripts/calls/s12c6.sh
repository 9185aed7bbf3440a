#!/usr/bin/env bash
# Session 12, device call 6 (~260 s of device time left): the committed state after the last
# kernel edits (moe.cu back to the one table: call 3's PTX; the _xs* slot entries as one macro:
# the same PTX): gpu_moe and gpu_model once more on these binaries.
cd "$(dirname "$0")/../.."
scripts/device-session.sh t:gpu_moe:60 t:gpu_model:60
cd "$OUT" && tar -czf /tmp/all2.tgz --exclude=all.tgz . && mv /tmp/all2.tgz all.tgz
ls | grep -v -E '^(all.tgz|summary.txt)$' | xargs rm -rf
