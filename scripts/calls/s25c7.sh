#!/usr/bin/env bash
# Session 25, call 7 (call 6's binaries and kernel cache; gpu_ssu rebuilt): the stochastic
# rounding test over both mappings with Philox 10, 5 and 7 rounds (call 6 ran group_of_4 only
# with 10: the compiled-in 5-round form and the run-time loop's fallback had no bit check).
cd "$(dirname "$0")/../.."
scripts/device-session.sh t:gpu_ssu:120:ssu_stochastic_rounding_is_bit_exact,f16_hardware_conversions_match_the_software_ones
. scripts/calls/lib.sh
pack
