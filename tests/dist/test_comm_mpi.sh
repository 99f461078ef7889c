#!/bin/bash
# Runs test_comm_mpi under mpirun with 3 ranks (tests/dist/mpi_env.sh: the launcher's settings).
set -euo pipefail
. "$(dirname "$0")/mpi_env.sh"
[ -n "${GLM_TEST_COMM_MPI:-}" ] || { echo "SKIPPED: this build has no MPI (CMake did not find it; tests/deps.sh installs libopenmpi-dev)"; exit 77; }
exec mpirun -np 3 "$GLM_TEST_COMM_MPI"
