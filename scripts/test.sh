#!/usr/bin/env bash
# The test command (README, .ci/run): installs NVRTC 13.0 into the project-local .nvrtc/ (so the
# kernel-compile test can run without a GPU), then runs the whole workspace test suite.
# GPU tests are #[ignore = "gpu"]; scripts/gpu-test.sh runs them on the H200.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -f scripts/nvrtc-env.sh ]; then
  # shellcheck disable=SC1091
  source scripts/nvrtc-env.sh
fi
cargo test --workspace --no-fail-fast "$@"
