#!/bin/bash
# Runs test_train_dp (data parallel on the CPU over MPI, end to end) with Open MPI set up.
set -euo pipefail
. "$(dirname "$0")/mpi_env.sh"
exec "$GLM_TEST_TRAIN_DP"
