#!/bin/bash
# Runs test_train_dp (data parallel on the CPU over MPI, end to end) with Open MPI set up.
set -euo pipefail
. "$(dirname "$0")/mpi_env.sh"
[ -n "${GLM_TEST_TRAIN_DP:-}" ] || { echo "SKIPPED: this build has no MPI (CMake did not find it; tests/deps.sh installs libopenmpi-dev)"; exit 77; }
exec "$GLM_TEST_TRAIN_DP"
