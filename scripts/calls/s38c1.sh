#!/usr/bin/env bash
# Session 38, prepared for the next session with a device (none was lent in session 38): the
# schedule hunt for racecheck's unexplained reports (SSD v4-v6's X hand-over, the MoE xw forms'
# x-tile / epilogue-tile stores), and v7's first correctness run. Kernels built with
# DUET_NVRTC_DEFINES=DUET_JITTER=NS pause a warp (up to ~NS ns, a quarter of the calls) after
# every named-barrier sync / mbarrier wait and before every arrival of those hand-overs
# (common.cuh `duet_jitter`); a protocol that orders its accesses gives the same bits under any
# schedule. Steps: v6 / v7 and v8 (session 38's producer-warp form) against the sequential
# oracle (short limit: a hand-over gap hangs); ssd_fused_bits_repeat plain (v3-v8, those that
# passed the oracle: same bits run to run, v5-v8 = v4's bits), then under
# DUET_JITTER=2000 and =300 with 12 runs a version; gpu_moe's bit-exact GEMM tests on the four xw
# forms under DUET_JITTER=2000 (twice); racecheck over the v5 hand-over probe (as session 37
# wrote it, and with the kernel's own access pattern: `ssd5_handover_probe_kpat`), then over v5 as
# it is and stripped of its wgmma / stage loads / both (DUET_RC_NO_WGMMA, DUET_RC_NO_LOADS: which
# of the kernel's other shared-memory users racecheck needs to report the X hand-over). Worst
# case 60 + 90 + 120 + 2 x 180 + 2 x 150 + 2 x 120 + 4 x 180 s; expected ~700 s. Then
# scripts/calls/s37c4.sh (v7 speed, ncu, racecheck, past 2^31) on the same carry.
# Build (12.0 MB in session 38; with the 53.3 MB tree, 62.3 MiB of the 64 MiB that travel):
#   scripts/devbin-quick.sh "mamba_ssd gpu_index64 gpu_moe" "ssd_chunk_scan moe" "DUET_JITTER=2000
#   ssd_chunk_scan@DUET_JITTER=300 ssd_chunk_scan@DUET_RC_NO_WGMMA ssd_chunk_scan@DUET_RC_NO_LOADS
#   ssd_chunk_scan@DUET_RC_NO_WGMMA,DUET_RC_NO_LOADS"; carry [".devbin.tar.xz"]. (Without the
#   ssd_chunk_scan@ variants each of those steps compiles the file on the device first, ~20 s.)
cd "$(dirname "$0")/../.."
scripts/device-session.sh
. scripts/calls/lib.sh
ssd_oracle ssd-oracle v6,v7
ssd_oracle ssd-oracle8 v8
VS=v3,v4,v5,v6
grep -q "^ssd-oracle rc=0 " $OUT/summary.txt && VS=$VS,v7
grep -q "^ssd-oracle8 rc=0 " $OUT/summary.txt && VS=$VS,v8
run ssd-bits 90 env DUET_MAMBA_TEST_VERSIONS=$VS $B/tests/mamba_ssd --ignored --test-threads 1 \
    --nocapture ssd_fused_bits_repeat
grep -h "test result\|same bits\|v4's bits\|panicked" $OUT/ssd-bits.log | sed "s/^/plain /" >> $OUT/summary.txt
# Session 39: every fused version's NMSE within 8x of the numerics twin's (a lost half of a split
# shows as 37-7000x; the printed ratios say how close the GPU's arithmetic is to the twin's)
run ssd-twin 120 env DUET_MAMBA_TEST_VERSIONS=v2,$VS $B/tests/mamba_ssd --ignored --test-threads 1 \
    --nocapture ssd_fused_error_matches_its_arithmetic
grep -h "test result\|NMSE\|panicked" $OUT/ssd-twin.log | head -64 | sed "s/^/twin /" >> $OUT/summary.txt
# DUET_JITTER=2000 (both files) and 300 (short pauses, other interleavings; ssd_chunk_scan.cu)
# are precompiled in the carry
for j in 2000 300; do
    run "ssd-bits-j$j" 180 env DUET_NVRTC_DEFINES=DUET_JITTER=$j DUET_SSD_REPEAT=12 \
        DUET_MAMBA_TEST_VERSIONS=$VS $B/tests/mamba_ssd --ignored --test-threads 1 --nocapture \
        ssd_fused_bits_repeat
    grep -h "test result\|same bits\|v4's bits\|panicked" $OUT/ssd-bits-j$j.log | sed "s/^/jitter $j /" >> $OUT/summary.txt
done
for i in 1 2; do
    run "moe-bits-j2000-$i" 150 env DUET_NVRTC_DEFINES=DUET_JITTER=2000 \
        DUET_MOE_TEST_VERSIONS=v4_xw192,v4_xw192t3,v4_xw192e,v4_xw192t3e \
        $B/tests/gpu_moe --ignored --test-threads 1 bit_exact_on_exact_sums
    grep -h "test result\|panicked" $OUT/moe-bits-j2000-$i.log | head -3 | sed "s/^/moe jitter 2000 run $i /" >> $OUT/summary.txt
done
# v5 / v6's X-slot protocol alone (no wgmma, no TMA) on v5's grid and shared memory
run racecheck-probe5 120 compute-sanitizer --tool racecheck --print-limit 10 \
    $B/tests/mamba_ssd --ignored --test-threads 1 v5_handover_probe
grep -h "RACECHECK SUMMARY\|test result" $OUT/racecheck-probe5.log | sed "s/^/probe5 /" >> $OUT/summary.txt
# the same protocol with the kernel's access pattern (float2 reads, the state's stores, WG0)
run racecheck-probe5k 120 compute-sanitizer --tool racecheck --print-limit 10 \
    $B/tests/mamba_ssd --ignored --test-threads 1 v5_handover_probe_kernel_pattern
grep -h "RACECHECK SUMMARY\|test result" $OUT/racecheck-probe5k.log | sed "s/^/probe5k /" >> $OUT/summary.txt
# Bisection between the probe and the kernel (racecheck over v5 alone on the oracle's case): v5
# as it is, without its wgmma (DUET_RC_NO_WGMMA), without its stage loads (DUET_RC_NO_LOADS),
# without both. The stripped builds compute garbage, so their oracle test fails after the one
# launch racecheck reads (expected).
for v in plain:"" nowgmma:DUET_RC_NO_WGMMA noloads:DUET_RC_NO_LOADS neither:DUET_RC_NO_WGMMA,DUET_RC_NO_LOADS; do
    tag=${v%%:*} defs=${v#*:}
    run "racecheck-v5-$tag" 180 env DUET_NVRTC_DEFINES="$defs" DUET_MAMBA_TEST_VERSIONS=v5 \
        compute-sanitizer --tool racecheck --print-limit 6 $B/tests/mamba_ssd --ignored \
        --test-threads 1 ssd_v2_matches_sequential_oracle
    grep -h "RACECHECK SUMMARY" $OUT/racecheck-v5-$tag.log | sed "s/^/v5 $tag /" >> $OUT/summary.txt
    grep -h "Race reported" $OUT/racecheck-v5-$tag.log | sed 's/(.*) *+0x[0-9a-f]*//; s/^=* *//' | sort | uniq -c | head -4 | sed "s/^/v5 $tag /" >> $OUT/summary.txt
done
pack
