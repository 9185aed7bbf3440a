#!/usr/bin/env bash
# Session 13, device call 6 (~300 s of device time left). After call 5 one host change: the xs
# and mma slot launches share one launcher (launch_slots_staged; same grids, arguments and
# shared memory). Here: gpu_model (every slot form's tests), the past-2^31 slot test, one run
# of the fused super engine on the defaults.
cd "$(dirname "$0")/../.."
scripts/device-session.sh t:gpu_model:120 t:gpu_index64:120:slot_gemv_past_2_pow_31
E2E_STEPS=24 E2E_SUPER_LIMIT=100 scripts/device-session.sh e2esuper16gf
cd "$OUT" && tar -czf /tmp/all2.tgz --exclude=all.tgz . && mv /tmp/all2.tgz all.tgz
ls | grep -v -E '^(all.tgz|summary.txt)$' | xargs rm -rf
