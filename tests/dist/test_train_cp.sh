#!/bin/bash
# Runs test_train_cp (context parallel end to end through the CLI on the CPU over MPI) with Open MPI
# set up (tests/dist/mpi_env.sh).
set -euo pipefail
. "$(dirname "$0")/mpi_env.sh"
[ -n "${GLM_TEST_TRAIN_CP:-}" ] || { echo "SKIPPED: this build has no MPI (CMake did not find it; tests/deps.sh installs libopenmpi-dev)"; exit 77; }
exec "$GLM_TEST_TRAIN_CP"
