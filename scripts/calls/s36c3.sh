#!/usr/bin/env bash
# Session 36, call 3 (prepared without a device; after s36c1 showed v5 correct): where v5's
# chunk step goes, against v4's. ncu source counters and warp states on one launch each of
# ssd5_fused_p64_n128 and ssd4_fused_p64_n128 in the ssd_4k preset (per-SASS-line stall samples:
# which role waits where; session 19 saw v4's step at ~12k cycles a chunk against ~3.6k of
# wgmma work). Same carry as s36c1.
cd "$(dirname "$0")/../.."
scripts/device-session.sh
. scripts/calls/lib.sh
ncu_ssd ssd5_fused_p64_n128
ncu_ssd ssd4_fused_p64_n128
pack
