#!/usr/bin/env bash
# Session 10, device call 4 (call 3 again: call 3 found a warm machine and ran call 2's binaries,
# its .devbin/ kept; the scripts now unpack a changed tarball), for the decode engine's host share and launch gaps:
#  - gpu_model, everything: decode_engine_graphs_replay_the_eager_steps now also runs graphs
#    with programmatic dependent launch (--engine-pdl; unfused and fused; bits vs eager, and
#    every kernel edge programmatic), router_v3's barrier (racecheck in call 1)
#  - the super decode bench: graphs; graphs + fuse; graphs + pdl; graphs + fuse + pdl. Since
#    call 1: the logits land in page-locked memory (call 1: 184 us of download a step) and a
#    replayed step's graph is launched at begin_step, before the host walks the step's ops
#  - racecheck over the fused engine test again (router_v3's fix)
cd "$(dirname "$0")/../.."
E2E_SUPER_LIMIT=120 scripts/device-session.sh t:gpu_model:90 e2esuper16g e2esuper16gp e2esuper16gf \
    e2esuper16gfp
SAN_LIMIT=200 scripts/device-session.sh tsan:racecheck:gpu_model:fused_norms
cd "$OUT" && ls | grep -v -E '^(all.tgz|summary.txt)$' | xargs rm -rf
