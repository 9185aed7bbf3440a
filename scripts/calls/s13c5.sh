#!/usr/bin/env bash
# Session 13, device call 5 (~570 s of device time left; no kernel changes since call 4, the
# same binaries). Call 4: the fused super engine on the committed defaults (mma, the down GEMV
# on _mma2w8_relu + mix) took 1.0893 and 1.0603 ms in two runs of one call (1.527 / 1.487x the
# floor), the other mma downs 1.0759 / 1.0760, xs3m 1.1674: the run-to-run spread (~30 us) is
# larger than the differences. Here: five more runs of the defaults, for the distribution.
cd "$(dirname "$0")/../.."
for i in 1 2 3 4 5; do
    E2E_STEPS=24 E2E_SUPER_LIMIT=100 scripts/device-session.sh e2esuper16gf
done
cd "$OUT" && tar -czf /tmp/all2.tgz --exclude=all.tgz . && mv /tmp/all2.tgz all.tgz
ls | grep -v -E '^(all.tgz|summary.txt)$' | xargs rm -rf
