#!/usr/bin/env bash
# Session 10, device call 5 (after call 4: pinned download + launch at begin_step gave 1.242 ms,
# PDL 1.213, fused 1.201, fused + PDL 1.239 on 8 steps: too few steps to rank them):
#  - gpu_model, everything: new since call 4 the shared expert's ReLU², down GEMV and add in
#    one kernel under --engine-fuse (model_gemv1_*_relu_add: decode_engine_fused_norms and the
#    graphs test's PDL + fused engine check its bits), and the one-row GEMVs prefetch their
#    first weights into L2 before their PDL wait (DUET_PDL_DEFERRED; every test runs them)
#  - the super decode bench over 24 steps: graphs; + pdl; + fuse; + fuse + pdl
cd "$(dirname "$0")/../.."
E2E_STEPS=24 E2E_SUPER_LIMIT=120 scripts/device-session.sh t:gpu_model:90 e2esuper16g \
    e2esuper16gp e2esuper16gf e2esuper16gfp
cd "$OUT" && ls | grep -v -E '^(all.tgz|summary.txt)$' | xargs rm -rf
